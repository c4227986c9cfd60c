"""vllm_deploy.weights against real servers on 127.0.0.1.

`url`: a small HTTP server written here (Python's http.server does no Range) that answers Range
requests, counts the body bytes it sends per file, and can be told to cut a response short or to
serve altered bytes. `hub`: olah (a self-hosted Hugging Face mirror, pinned in requirements.txt)
serving a git repository prepared here with no upstream (its `mirrors-path`), LFS object stored
where git-lfs would store it; huggingface_hub talks to it as it would to the hub. The real hub is
not reachable from these machines.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from vllm_deploy import weights
from vllm_deploy.weights import WeightsError

REV_RE = re.compile(r"[0-9a-f]{40}")


def fake_safetensors(n_floats: int, seed: int) -> bytes:
    """A well-formed safetensors file (8-byte header length, JSON header, data) of some KB."""
    data = hashlib.sha256(str(seed).encode()).digest() * (n_floats * 4 // 32 + 1)
    data = data[: n_floats * 4]
    header = json.dumps({"model.embed.weight": {"dtype": "F32", "shape": [n_floats], "data_offsets": [0, len(data)]}}).encode()
    return struct.pack("<Q", len(header)) + header + data


def tiny_model() -> dict[str, bytes]:
    return {
        "config.json": json.dumps({"model_type": "llama", "hidden_size": 128, "num_hidden_layers": 2}).encode(),
        "tokenizer.json": json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}}}).encode(),
        "tokenizer_config.json": json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}).encode(),
        "model-00001-of-00002.safetensors": fake_safetensors(12_000, 1),
        "model-00002-of-00002.safetensors": fake_safetensors(9_000, 2),
    }


def manifest_of(files: dict[str, bytes]) -> dict:
    return {"files": [{"path": p, "size": len(b), "sha256": hashlib.sha256(b).hexdigest()} for p, b in files.items()]}


# --- a Range-capable store ------------------------------------------------------------------------

class Store:
    """What the server serves and what it did: bytes sent per path, each request's Range header."""

    def __init__(self, files: dict[str, bytes]):
        self.files = dict(files)
        self.manifest = manifest_of(files)
        self.sent: dict[str, int] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.cut: dict[str, int] = {}        # path -> bytes after which the next response is cut (once)
        self.altered: dict[str, int] = {}    # path -> how many more responses carry a flipped byte
        self.lock = threading.Lock()

    def file_requests(self) -> list[tuple[str, str | None]]:
        return [r for r in self.requests if r[0] != "manifest.json"]


def make_handler(store: Store):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def do_GET(self):
            rel = self.path.lstrip("/").split("/", 1)[1] if self.path.count("/") > 1 else ""
            rel = urllib.request.url2pathname(rel)
            with store.lock:
                store.requests.append((rel, self.headers.get("Range")))
            if rel == "manifest.json":
                body = json.dumps(store.manifest).encode()
            elif rel in store.files:
                body = store.files[rel]
            else:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            with store.lock:
                if store.altered.get(rel):
                    store.altered[rel] -= 1
                    body = bytes([body[0] ^ 0xFF]) + body[1:]
                cut = store.cut.pop(rel, None)
            start, status = 0, 200
            rng = self.headers.get("Range")
            if rng:
                m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng)
                start = int(m.group(1))
                end = int(m.group(2)) if m.group(2) else len(body) - 1
                if start >= len(body):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(body)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
                full = len(body)
                body = body[start:end + 1]
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{start + len(body) - 1}/{full}")
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            out = body if cut is None else body[:cut]
            with store.lock:   # counted before the write, so a client that has read it all sees the count
                if rel != "manifest.json":
                    store.sent[rel] = store.sent.get(rel, 0) + len(out)
            self.wfile.write(out)
            self.wfile.flush()
            if cut is not None:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)

    return Handler


@pytest.fixture
def store():
    st = Store(tiny_model())
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(st))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    st.prefix = f"http://127.0.0.1:{server.server_address[1]}/tiny"
    yield st
    server.shutdown()
    server.server_close()


@pytest.fixture
def hash_calls(monkeypatch):
    """Every digest computed, as (file name, algorithm): the counter hook the 'nothing re-hashed' claims read."""
    calls = []
    real = weights.hash_file

    def counting(path, algo="sha256"):
        calls.append((Path(path).name, algo))
        return real(path, algo)

    monkeypatch.setattr(weights, "hash_file", counting)
    return calls


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- source: url ----------------------------------------------------------------------------------

def test_url_files_arrive_verified_and_moved_into_place(store, tmp_path):
    dest = tmp_path / "tiny"
    seen = []
    result = weights.fetch_url(store.prefix, dest, model="tiny", progress=lambda p, done, size: seen.append((p, done, size)))
    for rel, body in store.files.items():
        assert (dest / rel).read_bytes() == body
    assert sorted(result.fetched) == sorted(store.files)
    assert result.downloaded_bytes == sum(map(len, store.files.values())) == result.total_bytes
    assert not (dest / ".partial").exists()
    record = json.loads((dest / ".vllm-deploy-manifest.json").read_text())["files"]
    safet = "model-00001-of-00002.safetensors"
    assert record[safet]["sha256"] == hashlib.sha256(store.files[safet]).hexdigest()
    assert record[safet]["size"] == len(store.files[safet])
    assert (safet, len(store.files[safet]), len(store.files[safet])) in seen


def test_url_second_run_transfers_nothing_and_hashes_nothing(store, tmp_path, hash_calls):
    dest = tmp_path / "tiny"
    weights.fetch_url(store.prefix, dest, model="tiny")
    hash_calls.clear()
    store.requests.clear()
    store.sent.clear()
    again = weights.fetch_url(store.prefix, dest, model="tiny")
    assert again.fetched == [] and again.hashed == [] and hash_calls == []
    assert again.downloaded_bytes == 0 and store.sent == {}
    assert store.file_requests() == []          # only the manifest was asked for
    # With the manifest given (as the role will, from the cache host), not even that.
    store.requests.clear()
    weights.fetch_url(store.prefix, dest, store.manifest, model="tiny")
    assert store.requests == [] and hash_calls == []


def test_url_verify_full_rehashes_everything_and_fetches_nothing(store, tmp_path, hash_calls):
    dest = tmp_path / "tiny"
    weights.fetch_url(store.prefix, dest, model="tiny")
    hash_calls.clear()
    store.sent.clear()
    full = weights.fetch_url(store.prefix, dest, model="tiny", verify="full")
    assert sorted(name for name, _ in hash_calls) == sorted(store.files)
    assert full.fetched == [] and store.sent == {}


def test_url_interrupted_download_resumes_next_run_without_resending(store, tmp_path):
    dest = tmp_path / "tiny"
    big = "model-00001-of-00002.safetensors"
    size = len(store.files[big])
    store.cut[big] = 20_000
    with pytest.raises(WeightsError) as err:
        weights.fetch_url(store.prefix, dest, model="tiny", retries=0)
    message = str(err.value)
    assert "\n" not in message
    assert f"model tiny: file {big}: download interrupted at 20000 of {size} bytes" in message
    assert "run the fetch again to resume" in message
    assert (dest / ".partial" / big).stat().st_size == 20_000
    assert not (dest / big).exists()
    first_run = store.sent[big]
    result = weights.fetch_url(store.prefix, dest, model="tiny", retries=0)
    assert (dest / big).read_bytes() == store.files[big]
    assert (big, "bytes=20000-") in store.requests
    assert first_run == 20_000 and store.sent[big] == size      # the second run sent only the rest
    # The files before it were in place; the fetch had stopped at the cut, so the one after it comes now.
    assert result.fetched == [big, "model-00002-of-00002.safetensors"]


def test_url_cut_response_is_resumed_within_one_run(store, tmp_path):
    dest = tmp_path / "tiny"
    big = "model-00002-of-00002.safetensors"
    store.cut[big] = 7_777
    weights.fetch_url(store.prefix, dest, model="tiny")
    assert (dest / big).read_bytes() == store.files[big]
    assert [r for r in store.requests if r[0] == big] == [(big, None), (big, "bytes=7777-")]
    assert store.sent[big] == len(store.files[big])


@pytest.mark.parametrize("damage", ["altered", "truncated"])
def test_url_damaged_file_is_refetched_alone(store, tmp_path, hash_calls, damage):
    dest = tmp_path / "tiny"
    weights.fetch_url(store.prefix, dest, model="tiny")
    victim = "model-00001-of-00002.safetensors"
    data = bytearray((dest / victim).read_bytes())
    if damage == "altered":
        data[100] ^= 0xFF
    else:
        data = data[:-10]
    (dest / victim).write_bytes(bytes(data))
    hash_calls.clear()
    store.sent.clear()
    result = weights.fetch_url(store.prefix, dest, model="tiny")
    assert result.fetched == [victim]
    assert store.sent == {victim: len(store.files[victim])}
    # Only the changed file is hashed: once in place when its size still matches, once after the download.
    assert {name for name, _ in hash_calls} == {victim}
    assert len(hash_calls) == (2 if damage == "altered" else 1)
    assert (dest / victim).read_bytes() == store.files[victim]


def test_url_altered_bytes_from_the_store_are_fetched_again(store, tmp_path):
    dest = tmp_path / "tiny"
    victim = "tokenizer.json"
    store.altered[victim] = 1
    result = weights.fetch_url(store.prefix, dest, model="tiny")
    assert (dest / victim).read_bytes() == store.files[victim]
    assert store.sent[victim] == 2 * len(store.files[victim])
    assert victim in result.fetched


def test_url_wrong_digest_in_manifest_fails_in_one_line_after_a_retry(store, tmp_path):
    dest = tmp_path / "tiny"
    victim = "config.json"
    for entry in store.manifest["files"]:
        if entry["path"] == victim:
            entry["sha256"] = "0" * 64
    with pytest.raises(WeightsError) as err:
        weights.fetch_url(store.prefix, dest, model="tiny")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"model tiny: file {victim}: got sha256 {hashlib.sha256(store.files[victim]).hexdigest()} where the source lists sha256 {'0' * 64}")
    assert "(after 2 downloads); republish the file or fix its entry" in message
    assert store.sent[victim] == 2 * len(store.files[victim])
    assert not (dest / victim).exists()


def test_url_missing_file_names_the_file_and_the_fix(store, tmp_path):
    del store.files["tokenizer.json"]
    with pytest.raises(WeightsError, match=r"^model tiny: file tokenizer\.json: HTTP 404 from http://127\.0\.0\.1:\d+/tiny/tokenizer\.json; publish it there or fix the path in manifest\.json$"):
        weights.fetch_url(store.prefix, tmp_path / "tiny", model="tiny")


def test_url_unreachable_endpoint_fails_before_anything_is_written(tmp_path):
    prefix = f"http://127.0.0.1:{free_port()}/tiny"
    with pytest.raises(WeightsError, match=r"^model tiny: manifest\.json: cannot reach http://127\.0\.0\.1:\d+/tiny/manifest\.json \(.*refused.*\); check vllm_models\.tiny\.url"):
        weights.fetch_url(prefix, tmp_path / "tiny", model="tiny")
    assert not (tmp_path / "tiny").exists()


def test_url_bandwidth_limit_holds(store, tmp_path):
    start = time.monotonic()
    result = weights.fetch_url(store.prefix, tmp_path / "tiny", model="tiny", bandwidth_limit=200_000)
    elapsed = time.monotonic() - start
    assert elapsed >= result.downloaded_bytes / 200_000 * 0.9


@pytest.mark.parametrize("bad", ["../etc/passwd", "/abs", ".partial/x", "a/../../b", ".vllm-deploy-manifest.json"])
def test_url_manifest_paths_stay_inside_the_model_directory(store, tmp_path, bad):
    store.manifest["files"].append({"path": bad, "size": 1, "sha256": "0" * 64})
    with pytest.raises(WeightsError, match="fix the manifest"):
        weights.fetch_url(store.prefix, tmp_path / "tiny", model="tiny")


def test_url_planning_files_come_first_with_the_full_size(store, tmp_path):
    dest = tmp_path / "tiny"
    result = weights.fetch_planning_files({"source": "url", "url": store.prefix}, dest, model="tiny")
    assert sorted(result.fetched) == ["config.json", "tokenizer.json", "tokenizer_config.json"]
    assert not list(dest.glob("*.safetensors"))
    assert result.total_bytes == sum(map(len, store.files.values()))
    full = weights.fetch_url(store.prefix, dest, model="tiny")
    assert sorted(full.fetched) == sorted(p for p in store.files if p.endswith(".safetensors"))


def test_check_space_refuses_in_one_line(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    with pytest.raises(WeightsError) as err:
        weights.check_space(tmp_path / "not" / "yet", free * 2, 0.1, model="big")
    message = str(err.value)
    assert "\n" not in message
    assert re.match(r"model big: .*/not/yet needs [\d.]+ GB \([\d.]+ GB of weights \+ 10% margin\) but only [\d.]+ GB is free on ", message)
    assert weights.check_space(tmp_path, 1000) == pytest.approx(free, rel=0.01)


def test_url_space_is_checked_before_downloading(store, tmp_path, monkeypatch):
    monkeypatch.setattr(weights.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(WeightsError, match="but only 0.0 GB is free"):
        weights.fetch_url(store.prefix, tmp_path / "tiny", model="tiny")
    assert store.sent == {}


# --- source: hub, through olah --------------------------------------------------------------------

def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


def publish(mirrors: Path, repo_id: str, files: dict[str, bytes], lfs: set[str], corrupt_lfs: set[str] = frozenset()) -> str:
    """A git repo as the hub keeps it: LFS files as pointers, their objects under .git/lfs/objects. Returns the commit."""
    repo = mirrors / "models" / repo_id
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    for rel, body in files.items():
        target = repo / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel in lfs:
            oid = hashlib.sha256(body).hexdigest()
            obj = repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
            obj.parent.mkdir(parents=True, exist_ok=True)
            obj.write_bytes(bytes([body[0] ^ 0xFF]) + body[1:] if rel in corrupt_lfs else body)
            target.write_text(f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(body)}\n")
        else:
            target.write_bytes(body)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "publish")
    git(repo, "tag", "v1")
    return git(repo, "rev-parse", "HEAD")


HUB_FILES = {
    **tiny_model(),
    "pytorch_model.bin": b"duplicate weights in the old format" * 50,
    "original/consolidated.pth": b"original checkpoint" * 40,
    "original/params.json": b'{"dim": 128}',
    "README.md": b"# tiny\n",
}
HUB_LFS = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "pytorch_model.bin", "original/consolidated.pth"}


@pytest.fixture(scope="module")
def olah(tmp_path_factory):
    pytest.importorskip("huggingface_hub")
    if importlib.util.find_spec("olah") is None:   # pinned in requirements.txt: a setup fault, not a skip
        pytest.fail("olah is not installed: pip install -r requirements.txt")
    root = tmp_path_factory.mktemp("olah")
    mirrors = root / "mirrors"
    commits = {
        "acme/tiny": publish(mirrors, "acme/tiny", HUB_FILES, HUB_LFS),
        "acme/broken": publish(mirrors, "acme/broken", tiny_model(), HUB_LFS, corrupt_lfs={"model-00002-of-00002.safetensors"}),
    }
    port = free_port()
    dead = free_port()   # no upstream: olah would ask here, and nothing answers
    (root / "olah.toml").write_text(f"""
[basic]
host = "127.0.0.1"
port = {port}
mirror-netloc = "127.0.0.1:{port}"
mirror-lfs-netloc = "127.0.0.1:{port}"
hf-scheme = "http"
hf-netloc = "127.0.0.1:{dead}"
hf-lfs-netloc = "127.0.0.1:{dead}"
repos-path = "{root / 'cache'}"
mirrors-path = ["{mirrors}"]
[accessibility]
offline = true
""")
    log = open(root / "olah.log", "wb")
    proc = subprocess.Popen([sys.executable, "-c", "from olah.server import cli; cli()", "-c", str(root / "olah.toml")],
                            cwd=root, stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/api/models/acme/tiny/revision/{commits['acme/tiny']}", timeout=2).read()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"olah did not start: {(root / 'olah.log').read_text()[-2000:]}")
            time.sleep(0.3)
    yield {"endpoint": endpoint, "commits": commits, "mirrors": mirrors, "root": root}
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


def git_blob_id(body: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()


def test_hub_specs_carry_the_hubs_sizes_and_digests(olah):
    specs = {s.path: s for s in weights.hub_specs("acme/tiny", olah["commits"]["acme/tiny"], endpoint=olah["endpoint"])}
    # Default selection: safetensors, json and tokenizer files; not the .bin duplicate, not original/* (its json neither), not the README.
    assert sorted(specs) == sorted(["config.json", "tokenizer.json", "tokenizer_config.json",
                                    "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"])
    big = specs["model-00001-of-00002.safetensors"]
    assert (big.size, big.sha256, big.git_sha1) == (len(HUB_FILES[big.path]), hashlib.sha256(HUB_FILES[big.path]).hexdigest(), None)
    cfg = specs["config.json"]
    assert (cfg.size, cfg.sha256, cfg.git_sha1) == (len(HUB_FILES["config.json"]), None, git_blob_id(HUB_FILES["config.json"]))
    # Asked for everything, the .bin/.pth duplicates still stay behind while safetensors exist.
    everything = {s.path for s in weights.hub_specs("acme/tiny", olah["commits"]["acme/tiny"], endpoint=olah["endpoint"], include=["*"], exclude=[])}
    assert everything == set(HUB_FILES) - {"pytorch_model.bin", "original/consolidated.pth"}


def test_hub_fetch_verifies_and_a_second_run_does_nothing(olah, tmp_path, hash_calls):
    dest = tmp_path / "tiny"
    commit = olah["commits"]["acme/tiny"]
    result = weights.fetch_hub("acme/tiny", commit, dest, endpoint=olah["endpoint"], model="tiny")
    wanted = ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "tokenizer.json", "tokenizer_config.json"]
    assert sorted(result.fetched) == wanted
    for rel in wanted:
        assert (dest / rel).read_bytes() == HUB_FILES[rel]
    assert not (dest / "pytorch_model.bin").exists() and not (dest / "original").exists()
    assert not (dest / ".partial").exists()
    # LFS files checked by sha256, the others by git blob id.
    assert sorted(hash_calls) == sorted([(r, "sha256") for r in wanted if r.endswith(".safetensors")]
                                        + [(r, "git-sha1") for r in wanted if r.endswith(".json")])
    record = json.loads((dest / ".vllm-deploy-manifest.json").read_text())
    assert record["source"] == {"hub": "acme/tiny", "revision": commit, "endpoint": olah["endpoint"]}
    assert record["files"]["config.json"]["git-sha1"] == git_blob_id(HUB_FILES["config.json"])
    hash_calls.clear()
    again = weights.fetch_hub("acme/tiny", commit, dest, endpoint=olah["endpoint"], model="tiny")
    assert again.fetched == [] and again.hashed == [] and hash_calls == []
    # An altered file is fetched again, alone.
    victim = dest / "model-00002-of-00002.safetensors"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0x01
    victim.write_bytes(bytes(data))
    third = weights.fetch_hub("acme/tiny", commit, dest, endpoint=olah["endpoint"], model="tiny")
    assert third.fetched == [victim.name]
    assert victim.read_bytes() == HUB_FILES[victim.name]
    hash_calls.clear()
    full = weights.fetch_hub("acme/tiny", commit, dest, endpoint=olah["endpoint"], model="tiny", verify="full")
    assert full.fetched == [] and sorted(n for n, _ in hash_calls) == wanted


def test_hub_file_that_does_not_match_the_hubs_digest_is_refused(olah, tmp_path):
    dest = tmp_path / "broken"
    victim = "model-00002-of-00002.safetensors"
    with pytest.raises(WeightsError) as err:
        weights.fetch_hub("acme/broken", olah["commits"]["acme/broken"], dest, endpoint=olah["endpoint"], model="broken")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"model broken: file {victim}: got sha256 ")
    assert f"where the source lists sha256 {hashlib.sha256(tiny_model()[victim]).hexdigest()} (after 2 downloads)" in message
    assert not (dest / victim).exists()


def test_hub_branch_name_is_refused_with_the_commit_to_pin(olah, tmp_path):
    commit = olah["commits"]["acme/tiny"]
    for name in ("main", "v1"):
        with pytest.raises(WeightsError) as err:
            weights.fetch_hub("acme/tiny", name, tmp_path / "tiny", endpoint=olah["endpoint"], model="tiny")
        assert str(err.value) == (f"model tiny: revision {name!r} of acme/tiny is not a 40-hex commit; "
                                  f"pin the commit it resolves to now: revision: {commit}")
    assert not (tmp_path / "tiny").exists()


def test_hub_unknown_revision_fails_before_any_download(olah, tmp_path):
    with pytest.raises(WeightsError) as err:
        weights.fetch_hub("acme/tiny", "1" * 40, tmp_path / "tiny", endpoint=olah["endpoint"], model="tiny")
    message = str(err.value)
    assert "\n" not in message
    # olah answers a commit its git repo lacks with a 500, the hub with a 404 RevisionNotFound: both name the commit.
    assert message.startswith(f"model tiny: {olah['endpoint']} ")
    assert "1" * 40 in message and ("pin a commit that exists there" in message or "check the repo id and that this commit exists there" in message)
    assert not (tmp_path / "tiny").exists()


def test_hub_unreachable_endpoint_fails_before_any_download(tmp_path):
    endpoint = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(WeightsError) as err:
        weights.fetch_hub("acme/tiny", "2" * 40, tmp_path / "tiny", endpoint=endpoint, model="tiny")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"model tiny: cannot reach {endpoint} to list acme/tiny (")
    assert message.endswith("check vllm_models.tiny.endpoint and that it answers from this host")
    assert not (tmp_path / "tiny").exists()


def test_hub_planning_files_come_first_with_the_full_size(olah, tmp_path):
    dest = tmp_path / "tiny"
    source = {"source": "hub", "repo": "acme/tiny", "revision": olah["commits"]["acme/tiny"], "endpoint": olah["endpoint"]}
    result = weights.fetch_planning_files(source, dest, model="tiny")
    assert sorted(result.fetched) == ["config.json", "tokenizer.json", "tokenizer_config.json"]
    assert not list(dest.glob("*.safetensors"))
    assert result.total_bytes == sum(len(HUB_FILES[p]) for p in HUB_FILES
                                     if p.endswith((".json", ".safetensors")) and not p.startswith("original/"))
