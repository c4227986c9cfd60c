"""Model weights delivered to a directory: fetched, verified, resumable (issue 22, first slice).

Two sources, one bookkeeping:

* ``url``: an HTTP(S) prefix that serves ``<prefix>/manifest.json`` (``{"files": [{"path", "size",
  "sha256"}]}``) and every listed file under ``<prefix>/<path>``. Each file is downloaded to
  ``<dest>/.partial/<path>``, resumed with an HTTP Range request where an earlier try stopped, checked
  for size and sha256 and only then moved into place (``os.replace``: a reader sees the old file or
  the whole new one).
* ``hub``: a Hugging Face repo at a pinned 40-hex commit, on the hub or a mirror (``endpoint``).
  Sizes and digests come from huggingface_hub's ``list_repo_tree`` (LFS sha256, git blob id); files
  come from ``hf_hub_download`` into ``<dest>/.partial/hub`` (huggingface_hub resumes its own
  ``.incomplete`` files) and are verified before they are moved into place.

``<dest>/.vllm-deploy-manifest.json`` records, per file, the size, mtime and digest seen when it was
last verified. A file whose size and mtime still match that record and whose digest is the one
wanted is not read again; anything else is hashed, and fetched again alone when it is wrong.
``verify="full"`` hashes everything. Every error is a WeightsError whose message is one line naming
the model, the file and the fix.

Standard library plus huggingface_hub (imported only for ``hub``), so the same module can run on a
cache host or a node.
"""

from __future__ import annotations

import fnmatch
import hashlib
import http.client
import json
import os
import posixpath
import re
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

RECORD_NAME = ".vllm-deploy-manifest.json"
PARTIAL_DIR = ".partial"
MANIFEST_NAME = "manifest.json"
REVISION_RE = re.compile(r"[0-9a-f]{40}")
CHUNK = 1 << 20

# What vLLM reads from a Hugging Face repo; the rest (other formats, originals) is left on the hub.
HUB_DEFAULT_INCLUDE = (
    "*.safetensors", "*.json", "tokenizer.model", "*.tiktoken", "merges.txt", "vocab.txt",
    "*.jinja",
)
HUB_DEFAULT_EXCLUDE = ("original/*",)
# Formats that only duplicate the weights when safetensors are present.
DUPLICATE_FORMATS = ("*.bin", "*.pt", "*.pth")
# Enough to validate a model and plan its memory before any large transfer.
PLANNING_FILES = (
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "tokenizer.model", "special_tokens_map.json", "*.tiktoken", "merges.txt", "vocab.txt",
    "chat_template.jinja", "chat_template.json", "preprocessor_config.json",
)

Progress = Callable[[str, int, int], None]


class WeightsError(Exception):
    """A fetch that cannot go on; str() is one line: model, file, what happened, the fix."""

    def __init__(self, message: str):
        super().__init__(" ".join(message.split()))


@dataclass
class FileSpec:
    """One file as the source describes it."""

    path: str
    size: int
    sha256: str | None = None      # hex, for url files and hub LFS files
    git_sha1: str | None = None    # git blob id, for hub files kept in git itself
    url: str | None = None


@dataclass
class FetchResult:
    """What a fetch did: the counters the tests and the role's `changed` read."""

    files: list[str] = field(default_factory=list)          # every selected file, in place and verified
    fetched: list[str] = field(default_factory=list)        # files (re)downloaded this run
    hashed: list[str] = field(default_factory=list)         # files read to compute a digest this run
    downloaded_bytes: int = 0                               # body bytes received this run
    total_bytes: int = 0                                    # size of the whole selection (plan with it)

    @property
    def changed(self) -> bool:
        return bool(self.fetched)


# --- digests ---------------------------------------------------------------------------------

def hash_file(path: Path, algo: str = "sha256") -> str:
    """Digest of a file: ``sha256``, or ``git-sha1`` (git's blob id: sha1 of "blob <size>\\0" + content)."""
    if algo == "git-sha1":
        digest = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    else:
        digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _algo(spec: FileSpec) -> tuple[str, str]:
    return ("sha256", spec.sha256) if spec.sha256 else ("git-sha1", spec.git_sha1 or "")


# --- disk ------------------------------------------------------------------------------------

def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def check_space(dest: str | os.PathLike, needed_bytes: int, margin: float = 0.05, model: str = "") -> int:
    """Refuse when the filesystem of ``dest`` (or its nearest existing parent) has less than
    ``needed_bytes * (1 + margin)`` free; returns the free bytes."""
    probe = Path(dest).absolute()
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    wanted = int(needed_bytes * (1 + margin))
    if wanted > free:
        who = f"model {model}: " if model else ""
        raise WeightsError(
            f"{who}{dest} needs {_gb(wanted)} ({_gb(needed_bytes)} of weights + {margin:.0%} margin) "
            f"but only {_gb(free)} is free on {probe}; free space there or point the model's path at a larger disk")
    return free


# --- the record of verified files --------------------------------------------------------------

def _record_path(dest: Path) -> Path:
    return dest / RECORD_NAME


def load_record(dest: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Per file: size, mtime_ns and digest as last verified (empty when none or unreadable)."""
    try:
        data = json.loads(_record_path(Path(dest)).read_text())
        files = data.get("files", {})
        return files if isinstance(files, dict) else {}
    except (OSError, ValueError, AttributeError):
        return {}


def _save_record(dest: Path, files: dict[str, dict[str, Any]], source: dict[str, Any]) -> None:
    tmp = dest / (RECORD_NAME + ".tmp")
    tmp.write_text(json.dumps({"version": 1, "source": source, "files": files}, indent=1, sort_keys=True))
    os.replace(tmp, _record_path(dest))


def _record_entry(path: Path, spec: FileSpec) -> dict[str, Any]:
    st = path.stat()
    algo, digest = _algo(spec)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, algo: digest}


def _recorded_ok(path: Path, spec: FileSpec, entry: Any) -> bool:
    """In place, unchanged since it was verified, and verified with the digest wanted now."""
    if not isinstance(entry, dict):
        return False
    try:
        st = path.stat()
    except OSError:
        return False
    algo, digest = _algo(spec)
    return (st.st_size == spec.size == entry.get("size") and st.st_mtime_ns == entry.get("mtime_ns")
            and entry.get(algo) == digest)


def _safe_relpath(model: str, rel: Any) -> str:
    """A listed path stays inside dest and away from the bookkeeping."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel:
        raise WeightsError(f"model {model}: manifest path {rel!r} is not a relative path; fix the manifest")
    norm = posixpath.normpath(rel)
    if norm != rel or norm.startswith("../") or norm == ".." or norm.split("/")[0] in (PARTIAL_DIR, RECORD_NAME, "."):
        raise WeightsError(f"model {model}: manifest path {rel!r} leaves the model directory or names its bookkeeping; fix the manifest")
    return norm


def _select(paths: Iterable[str], include: Iterable[str] | None, exclude: Iterable[str] | None) -> set[str]:
    inc, exc = list(include or ["*"]), list(exclude or [])
    return {p for p in paths if any(fnmatch.fnmatch(p, pat) for pat in inc) and not any(fnmatch.fnmatch(p, pat) for pat in exc)}


# --- the shared loop ---------------------------------------------------------------------------

def _triage(dest: Path, specs: list[FileSpec], verify: str, record: dict[str, Any], result: FetchResult) -> list[FileSpec]:
    """The specs not yet in place: what the record vouches for is kept unread, the rest is hashed (on
    every core: hashlib releases the GIL, and a checkpoint's shards are hashed side by side)."""
    to_hash: list[FileSpec] = []
    todo: list[FileSpec] = []
    for spec in specs:
        final = dest / spec.path
        if verify != "full" and _recorded_ok(final, spec, record.get(spec.path)):
            continue
        if final.is_file() and final.stat().st_size == spec.size:
            to_hash.append(spec)
        else:
            record.pop(spec.path, None)
            todo.append(spec)
    workers = max(1, min(len(to_hash), os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:
        digests = list(pool.map(lambda s: hash_file(dest / s.path, _algo(s)[0]), to_hash))
    for spec, digest in zip(to_hash, digests):
        result.hashed.append(spec.path)
        if digest == _algo(spec)[1]:
            record[spec.path] = _record_entry(dest / spec.path, spec)
        else:
            record.pop(spec.path, None)
            todo.append(spec)
    return todo


def _sync(model: str, dest: Path, specs: list[FileSpec], download: Callable[[FileSpec, bool], tuple[Path, int]],
          verify: str, source: dict[str, Any], retries: int, margin: float) -> FetchResult:
    """Bring each spec into ``dest``: keep what the record vouches for, hash the rest, download what is wrong."""
    if verify not in ("changed", "full"):
        raise WeightsError(f"model {model}: verify must be 'changed' or 'full', got {verify!r}")
    dest.mkdir(parents=True, exist_ok=True)
    record = load_record(dest)
    result = FetchResult(files=[s.path for s in specs], total_bytes=sum(s.size for s in specs))
    todo = _triage(dest, specs, verify, record, result)
    _save_record(dest, record, source)
    if not todo:
        return result

    partial_root = dest / PARTIAL_DIR
    have = sum(_size(partial_root / s.path) for s in todo)
    check_space(dest, max(0, sum(s.size for s in todo) - have), margin, model)
    for spec in todo:
        final = dest / spec.path
        algo, want = _algo(spec)
        for attempt in range(retries + 1):
            staged, received = download(spec, attempt > 0)
            result.downloaded_bytes += received
            size = _size(staged)
            got = None
            if size < spec.size:
                if attempt < retries:
                    continue   # cut short: the next attempt resumes from what arrived
                raise WeightsError(
                    f"model {model}: file {spec.path}: download interrupted at {size} of {spec.size} bytes "
                    "(the connection closed early); run the fetch again to resume from there")
            if size == spec.size:
                result.hashed.append(spec.path)
                got = hash_file(staged, algo)
                if got == want:
                    break
            staged.unlink(missing_ok=True)   # whole but wrong: the next attempt starts clean
            if attempt == retries:
                what = f"{algo} {got}" if got else f"{size} bytes"
                wanted = f"{algo} {want}" if got else f"{spec.size} bytes"
                raise WeightsError(
                    f"model {model}: file {spec.path}: got {what} where the source lists {wanted} "
                    f"(after {retries + 1} downloads); republish the file or fix its entry in the source's listing")
        final.parent.mkdir(parents=True, exist_ok=True)
        with open(staged, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(staged, final)
        record[spec.path] = _record_entry(final, spec)
        _save_record(dest, record, source)
        result.fetched.append(spec.path)
    shutil.rmtree(partial_root, ignore_errors=True)
    return result


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# --- source: url -------------------------------------------------------------------------------

def _join(prefix: str, rel: str) -> str:
    return prefix.rstrip("/") + "/" + urllib.parse.quote(rel)


def _http_error(model: str, what: str, url: str, exc: BaseException) -> WeightsError:
    if isinstance(exc, urllib.error.HTTPError):
        fix = ("publish it there or fix the path in manifest.json" if exc.code == 404
               else "check the store's access rules and the URL")
        return WeightsError(f"model {model}: {what}: HTTP {exc.code} from {url}; {fix}")
    reason = getattr(exc, "reason", exc)
    return WeightsError(f"model {model}: {what}: cannot reach {url} ({reason}); "
                        f"check vllm_models.{model}.url and that the store answers from this host")


def load_manifest(prefix: str, model: str = "", timeout: float = 30) -> dict[str, Any]:
    """``<prefix>/manifest.json``, parsed."""
    url = _join(prefix, MANIFEST_NAME)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = resp.read()
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise _http_error(model, MANIFEST_NAME, url, exc) from exc
    try:
        return json.loads(body)
    except ValueError as exc:
        raise WeightsError(f"model {model}: {url} is not JSON ({exc}); publish a manifest.json with a files list") from exc


def manifest_specs(manifest: Any, prefix: str, model: str = "") -> list[FileSpec]:
    """The manifest's files, checked: relative paths, integer sizes, 64-hex sha256."""
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, list) or not files:
        raise WeightsError(f"model {model}: the manifest has no files list; give files: [{{path, size, sha256}}, ...]")
    specs = []
    for entry in files:
        if not isinstance(entry, dict):
            raise WeightsError(f"model {model}: manifest entry {entry!r} is not a mapping; give path, size and sha256")
        rel = _safe_relpath(model, entry.get("path"))
        size, sha = entry.get("size"), entry.get("sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise WeightsError(f"model {model}: file {rel}: size {size!r} is not a byte count; fix manifest.json")
        if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise WeightsError(f"model {model}: file {rel}: sha256 {sha!r} is not 64 lowercase hex digits; fix manifest.json")
        specs.append(FileSpec(rel, size, sha256=sha, url=_join(prefix, rel)))
    return specs


class _Throttle:
    """Sleep so that the bytes read stay under ``rate`` bytes per second."""

    def __init__(self, rate: int | None):
        self.rate, self.start, self.done = rate, time.monotonic(), 0

    def __call__(self, n: int) -> None:
        if not self.rate:
            return
        self.done += n
        ahead = self.done / self.rate - (time.monotonic() - self.start)
        if ahead > 0:
            time.sleep(ahead)


def fetch_url(prefix: str, dest: str | os.PathLike, manifest: dict[str, Any] | None = None, *,
              bandwidth_limit: int | None = None, progress: Progress | None = None, verify: str = "changed",
              include: Iterable[str] | None = None, model: str = "", retries: int = 1, timeout: float = 30,
              margin: float = 0.05) -> FetchResult:
    """Fetch the files of ``<prefix>/manifest.json`` (or of ``manifest``) into ``dest``, verified.

    ``bandwidth_limit`` is in bytes per second; ``progress(path, done, size)`` is called as bytes arrive;
    ``retries`` is how many more downloads a file gets after an interrupted or wrong one.
    """
    model = model or Path(dest).name
    if manifest is None:
        manifest = load_manifest(prefix, model, timeout)
    specs = manifest_specs(manifest, prefix, model)
    if include is not None:
        keep = _select([s.path for s in specs], include, None)
        specs = [s for s in specs if s.path in keep]
    dest = Path(dest)
    throttle = _Throttle(bandwidth_limit)

    def download(spec: FileSpec, again: bool) -> tuple[Path, int]:
        partial = dest / PARTIAL_DIR / spec.path
        partial.parent.mkdir(parents=True, exist_ok=True)
        offset = _size(partial)
        if offset > spec.size:
            partial.unlink()
            offset = 0
        if offset == spec.size:
            return partial, 0
        request = urllib.request.Request(spec.url or "")
        if offset:
            request.add_header("Range", f"bytes={offset}-")
        try:
            resp = urllib.request.urlopen(request, timeout=timeout)
        except urllib.error.HTTPError as exc:
            if exc.code == 416:   # the partial no longer fits the file: start over
                partial.unlink(missing_ok=True)
                return partial, 0
            raise _http_error(model, f"file {spec.path}", spec.url or "", exc) from exc
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            raise _http_error(model, f"file {spec.path}", spec.url or "", exc) from exc
        received = 0
        with resp:
            if offset and resp.status != 206:
                offset = 0   # the server ignored the Range: start over
            with open(partial, "ab" if offset else "wb") as out:
                done = offset
                try:
                    while chunk := resp.read(CHUNK):
                        out.write(chunk)
                        received += len(chunk)
                        done += len(chunk)
                        throttle(len(chunk))
                        if progress:
                            progress(spec.path, done, spec.size)
                except (OSError, http.client.HTTPException):
                    pass   # cut short: what arrived stays in the partial for the next attempt
        return partial, received

    source = {"url": prefix}
    return _sync(model, dest, specs, download, verify, source, retries, margin)


# --- source: hub -------------------------------------------------------------------------------

def _hub():
    import huggingface_hub  # only the hub source needs it
    return huggingface_hub


def hub_specs(repo_id: str, revision: str, *, endpoint: str | None = None, token: str | None = None,
              include: Iterable[str] | None = None, exclude: Iterable[str] | None = None,
              model: str = "") -> list[FileSpec]:
    """The repo's files at ``revision`` that vLLM needs, with the hub's sizes and digests.

    Nothing is downloaded. A branch or tag name is refused: the deploy pins the commit.
    """
    model = model or repo_id
    where = endpoint or "the hub"
    if not isinstance(revision, str) or not REVISION_RE.fullmatch(revision):
        pinned = resolve_revision(repo_id, revision, endpoint=endpoint, token=token) if isinstance(revision, str) else None
        fix = (f"pin the commit it resolves to now: revision: {pinned}" if pinned
               else "pin the 40-hex commit the hub resolves it to (the repo page's 'History', or HfApi().model_info(repo).sha)")
        raise WeightsError(f"model {model}: revision {revision!r} of {repo_id} is not a 40-hex commit; {fix}")
    hub = _hub()
    api = hub.HfApi(endpoint=endpoint, token=token)
    try:
        # model_info first, with a short retry of its own (list_repo_tree's pages back off for ~23 s):
        # an unreachable endpoint or an unknown commit fails within seconds.
        _probe(hub, api, repo_id, revision)
        entries = list(api.list_repo_tree(repo_id, revision=revision, recursive=True))
    except Exception as exc:  # noqa: BLE001 — huggingface_hub raises its own and its HTTP client's errors
        raise _hub_error(model, repo_id, revision, where, exc) from exc
    files = {}
    for entry in entries:
        if type(entry).__name__ != "RepoFile":
            continue
        lfs = getattr(entry, "lfs", None)
        sha256 = getattr(lfs, "sha256", None) if lfs is not None else None
        files[entry.path] = FileSpec(_safe_relpath(model, entry.path), int(entry.size),
                                     sha256=sha256, git_sha1=None if sha256 else getattr(entry, "blob_id", None))
    chosen = _select(files, HUB_DEFAULT_INCLUDE if include is None else include,
                     HUB_DEFAULT_EXCLUDE if exclude is None else exclude)
    if any(p.endswith(".safetensors") for p in chosen):
        chosen = {p for p in chosen if not any(fnmatch.fnmatch(p, pat) for pat in DUPLICATE_FORMATS)}
    if not chosen:
        raise WeightsError(f"model {model}: no file of {repo_id}@{revision[:12]} matches include/exclude; widen vllm_models.{model}.include")
    return [files[p] for p in sorted(chosen)]


def _probe(hub: Any, api: Any, repo_id: str, revision: str, tries: int = 3) -> None:
    """The repo at this commit exists; a transport error (a pooled connection the server closed) is tried again."""
    for attempt in range(tries):
        try:
            api.model_info(repo_id, revision=revision)
            return
        except hub.errors.HfHubHTTPError:
            raise
        except Exception:  # noqa: BLE001 — the HTTP client's transport errors
            if attempt == tries - 1:
                raise
            time.sleep(0.5)


def _hub_error(model: str, repo_id: str, revision: str, where: str, exc: BaseException) -> WeightsError:
    hub = _hub()
    errors = hub.errors
    name = type(exc).__name__
    if isinstance(exc, errors.RevisionNotFoundError):
        return WeightsError(f"model {model}: {where} has no revision {revision} of {repo_id}; pin a commit that exists there")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return WeightsError(f"model {model}: {where} has no repo {repo_id} (or it needs a token); fix the repo id or give vllm_hf_token")
    if isinstance(exc, errors.HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", "?")
        return WeightsError(f"model {model}: {where} could not list {repo_id} at {revision} (HTTP {status}); "
                            "check the repo id and that this commit exists there")
    return WeightsError(f"model {model}: cannot reach {where} to list {repo_id} ({name}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                        f"check vllm_models.{model}.endpoint and that it answers from this host")


def resolve_revision(repo_id: str, name: str, *, endpoint: str | None = None, token: str | None = None) -> str | None:
    """The commit a branch or tag resolves to now, or None when the hub cannot say (used in the fix text)."""
    try:
        return _hub().HfApi(endpoint=endpoint, token=token).model_info(repo_id, revision=name).sha
    except Exception:  # noqa: BLE001 — only a hint in an error message
        return None


def fetch_hub(repo_id: str, revision: str, dest: str | os.PathLike, *, endpoint: str | None = None,
              token: str | None = None, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None,
              verify: str = "changed", model: str = "", retries: int = 1, margin: float = 0.05) -> FetchResult:
    """Fetch ``repo_id`` at the pinned ``revision`` into ``dest``; each file checked against the hub's digest."""
    model = model or repo_id
    specs = hub_specs(repo_id, revision, endpoint=endpoint, token=token, include=include, exclude=exclude, model=model)
    dest = Path(dest)
    staging = dest / PARTIAL_DIR / "hub"
    hub = _hub()

    def download(spec: FileSpec, again: bool) -> tuple[Path, int]:
        staging.mkdir(parents=True, exist_ok=True)
        try:
            got = hub.hf_hub_download(repo_id, spec.path, revision=revision, local_dir=staging, endpoint=endpoint,
                                      token=token, force_download=again)
        except Exception as exc:  # noqa: BLE001
            raise WeightsError(f"model {model}: file {spec.path}: download from {endpoint or 'the hub'} failed "
                               f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); run the fetch again to resume") from exc
        path = Path(got)
        return path, _size(path)

    source = {"hub": repo_id, "revision": revision, "endpoint": endpoint}
    return _sync(model, dest, specs, download, verify, source, retries, margin)


# --- planned before fetched --------------------------------------------------------------------

def fetch_planning_files(source: dict[str, Any], dest: str | os.PathLike, *, model: str = "", **kwargs: Any) -> FetchResult:
    """Only config.json and the tokenizer files (PLANNING_FILES), so the deploy can validate the model and
    plan its memory before any large transfer. ``total_bytes`` is the size of the whole selection the full
    fetch would bring (the weights the planner sizes for).

    ``source`` is a vllm_models entry's source part: ``{source: url, url: PREFIX}`` or
    ``{source: hub, repo: ID, revision: SHA, endpoint?, include?, exclude?}``.
    """
    kind = source.get("source")
    if kind == "url":
        manifest = kwargs.pop("manifest", None) or load_manifest(source["url"], model)
        total = sum(s.size for s in manifest_specs(manifest, source["url"], model))
        result = fetch_url(source["url"], dest, manifest, include=PLANNING_FILES, model=model, **kwargs)
    elif kind == "hub":
        common = {"endpoint": source.get("endpoint"), "token": kwargs.pop("token", None), "model": model}
        total = sum(s.size for s in hub_specs(source["repo"], source["revision"], include=source.get("include"),
                                              exclude=source.get("exclude"), **common))
        result = fetch_hub(source["repo"], source["revision"], dest, include=PLANNING_FILES, exclude=source.get("exclude"),
                           **common, **kwargs)
    else:
        raise WeightsError(f"model {model}: source {kind!r} has nothing to fetch; use source: url or source: hub")
    result.total_bytes = total
    return result


# --- revisions, the fleet cache and the nodes ----------------------------------------------------

def url_revision(specs: list[FileSpec]) -> str:
    """A `url` model's revision: 12 hex digits of the digest of its listing (paths, sizes, sha256).
    The same files give the same revision whatever the manifest's order or formatting."""
    listing = sorted((s.path, s.size, s.sha256 or "") for s in specs)
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()[:12]


def revision_dir(revision: str) -> str:
    """The directory a revision lives in, beside the model's other revisions (a hub commit: its 12 first digits)."""
    return revision[:12]


def specs_to_json(specs: list[FileSpec]) -> list[dict[str, Any]]:
    return [{k: v for k, v in (("path", s.path), ("size", s.size), ("sha256", s.sha256), ("git_sha1", s.git_sha1)) if v is not None}
            for s in specs]


def specs_from_json(entries: list[dict[str, Any]], model: str = "") -> list[FileSpec]:
    return [FileSpec(_safe_relpath(model, e["path"]), int(e["size"]), sha256=e.get("sha256"), git_sha1=e.get("git_sha1"))
            for e in entries]


def seed_from_siblings(dest: str | os.PathLike, specs: list[FileSpec]) -> list[str]:
    """Hard-link into ``dest`` each wanted file that a sibling revision directory already holds,
    verified by its record with the same digest: a new revision that changes one file fetches one file."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    record = load_record(dest)
    seeded = []
    siblings = [(d, load_record(d)) for d in sorted(dest.parent.iterdir()) if d.is_dir() and d != dest] \
        if dest.parent.is_dir() else []
    for spec in specs:
        final = dest / spec.path
        if final.exists():
            continue
        for sibling, sibling_record in siblings:
            other = sibling / spec.path
            if _recorded_ok(other, spec, sibling_record.get(spec.path)):
                final.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(other, final)
                except OSError:
                    shutil.copy2(other, final)
                record[spec.path] = _record_entry(final, spec)
                seeded.append(spec.path)
                break
    if seeded:
        _save_record(dest, record, {"seeded": True})
    return seeded


def verify_dir(dest: str | os.PathLike, specs: list[FileSpec], verify: str = "changed", dry_run: bool = False) -> dict[str, Any]:
    """Check a copy (a node's) against the source's listing.

    Answers the ``missing`` files, the ``wrong`` ones (removed, so that the next copy brings them whole;
    left in place with ``dry_run``), the ``hashed`` ones, the bytes still ``needed``, the ``free`` bytes
    where they would land, and the model's other revision directories (``siblings``, newest first).
    The record keeps the verified files unread next time."""
    dest = Path(dest)
    record = load_record(dest)
    result = FetchResult()
    todo = _triage(dest, specs, verify, record, result) if dest.is_dir() else list(specs)
    missing, wrong = [], []
    for spec in todo:
        final = dest / spec.path
        if final.is_file():
            if not dry_run:
                final.unlink()
            wrong.append(spec.path)
        else:
            missing.append(spec.path)
    if not dry_run:
        dest.mkdir(parents=True, exist_ok=True)   # where the copy lands (rsync creates no parents)
        _save_record(dest, record, {"verified": True})
    probe = dest
    while not probe.exists():
        probe = probe.parent
    return {"missing": missing, "wrong": wrong, "hashed": result.hashed, "needed": sum(s.size for s in todo),
            "free": shutil.disk_usage(probe).free, "siblings": [d.name for d in _revisions(dest.parent) if d != dest]}


def _revisions(model_dir: Path) -> list[Path]:
    """A model's revision directories, the most recently verified first (by their record's mtime)."""
    if not model_dir.is_dir():
        return []
    found = [d for d in model_dir.iterdir() if d.is_dir() and _record_path(d).is_file()]
    return sorted(found, key=lambda d: _record_path(d).stat().st_mtime_ns, reverse=True)


def prune(model_dir: str | os.PathLike, current: str, keep: int) -> list[str]:
    """Remove the revisions of a model beyond the ``keep`` most recently verified, never ``current``."""
    kept, removed = 1, []
    for d in _revisions(Path(model_dir)):
        if d.name == current:
            continue
        if kept < keep:
            kept += 1
            continue
        shutil.rmtree(d)
        removed.append(d.name)
    return removed


def _model_files(directory: Path) -> list[tuple[str, Path]]:
    """(relative path, path) of every file of a model directory, hidden ones (bookkeeping, caches) left out."""
    found = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        if not any(part.startswith(".") for part in rel.split("/")):
            found.append((rel, path))
    return found


def local_specs(directory: str | os.PathLike, record_dir: str | os.PathLike, model: str = "") -> list[FileSpec]:
    """A `controller` model's listing: every file of its directory on the controller but hidden ones, with
    size and sha256. The digests are kept in ``record_dir`` (the fleet cache), so an unchanged file is
    not hashed again on the next deploy."""
    directory, record_dir = Path(directory), Path(record_dir)
    if not directory.is_dir():
        raise WeightsError(f"model {model}: {directory} is not a directory on the controller; fix vllm_models.{model}.dir")
    record_dir.mkdir(parents=True, exist_ok=True)
    record = load_record(record_dir)
    specs, seen = [], {}
    for rel, path in _model_files(directory):
        entry = record.get(rel)
        st = path.stat()
        if isinstance(entry, dict) and entry.get("size") == st.st_size and entry.get("mtime_ns") == st.st_mtime_ns and entry.get("sha256"):
            digest = entry["sha256"]
        else:
            digest = hash_file(path)
        seen[rel] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
        specs.append(FileSpec(_safe_relpath(model, rel), st.st_size, sha256=digest))
    if not specs:
        raise WeightsError(f"model {model}: {directory} holds no file; fix vllm_models.{model}.dir")
    _save_record(record_dir, seen, {"controller": str(directory)})
    return specs


def fetch_local(directory: str | os.PathLike, dest: str | os.PathLike, specs: list[FileSpec], *, verify: str = "changed",
                model: str = "", margin: float = 0.05) -> FetchResult:
    """Bring a `controller` model's files into the cache: hard links where the cache shares the directory's
    filesystem (no space, no copy), copies elsewhere; each checked against the listing like a download."""
    directory = Path(directory)

    def download(spec: FileSpec, again: bool) -> tuple[Path, int]:
        staged = Path(dest) / PARTIAL_DIR / spec.path
        staged.parent.mkdir(parents=True, exist_ok=True)
        staged.unlink(missing_ok=True)
        try:
            os.link(directory / spec.path, staged)
        except OSError:
            shutil.copyfile(directory / spec.path, staged)
        return staged, _size(staged)

    return _sync(model, Path(dest), specs, download, verify, {"controller": str(directory)}, 1, margin)


def write_manifest(directory: str | os.PathLike) -> dict[str, Any]:
    """Publish a model directory to a `url` store: its manifest.json (every file but hidden ones and the
    manifest itself, with size and sha256)."""
    directory = Path(directory)
    files = [{"path": rel, "size": path.stat().st_size, "sha256": hash_file(path)}
             for rel, path in _model_files(directory) if rel != MANIFEST_NAME]
    manifest = {"files": files}
    (directory / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _main(argv: list[str]) -> int:
    """On a node (this file alone, the standard library):

    ``python3 weights.py verify DEST LISTING.json changed|full [check]``: verify_dir's answer as JSON;
    ``python3 weights.py prune MODEL_DIR CURRENT KEEP``: the revisions removed, as JSON."""
    if len(argv) in (4, 5) and argv[0] == "verify":
        specs = specs_from_json(json.loads(Path(argv[2]).read_text()))
        print(json.dumps(verify_dir(argv[1], specs, argv[3], dry_run=argv[4:] == ["check"])))
        return 0
    if len(argv) == 4 and argv[0] == "prune":
        print(json.dumps(prune(argv[1], argv[2], int(argv[3]))))
        return 0
    print("usage: weights.py verify DEST LISTING.json changed|full [check] | prune MODEL_DIR CURRENT KEEP", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
