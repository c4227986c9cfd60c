"""`vllm-deploy weights fetch|publish`: the fleet model cache the deploy fills on the controller, and
the manifest a `url` store serves.

    vllm-deploy weights fetch NAME --source JSON --cache DIR [--planning] [--verify full] [--log FILE]
    vllm-deploy weights publish DIR

`fetch` brings one model of vllm_models (its source part as JSON) into ``DIR/NAME/REVISION``,
verified, resuming what an earlier run left, and prints one JSON line: revision, directory, the
source's file listing (what every node's copy is checked against), bytes fetched from the source.
`--planning` brings only config.json and the tokenizer files (the planner reads them before any large
transfer). The hub token is read from HF_TOKEN, never from the command line.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from vllm_deploy import weights

HELP = "Fetch a model into the fleet cache (verified, resumable), or write the manifest.json a url store serves."


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    fetch = sub.add_parser("fetch", help="fetch one model into the cache; prints a JSON summary")
    fetch.add_argument("name", help="the model's name in vllm_models")
    fetch.add_argument("--source", required=True, metavar="JSON",
                       help='the model\'s source keys, e.g. {"source": "url", "url": "https://store/m"}')
    fetch.add_argument("--cache", required=True, metavar="DIR", help="the fleet cache; the model lands in DIR/NAME/REVISION")
    fetch.add_argument("--planning", action="store_true", help="only config.json and the tokenizer files")
    fetch.add_argument("--verify", choices=("changed", "full"), default="changed",
                       help="changed: hash only files whose size or mtime moved since verified (default); full: hash all")
    fetch.add_argument("--log", metavar="FILE", help="append progress lines here (bytes, total, rate) as files arrive")
    publish = sub.add_parser("publish", help="write DIR/manifest.json (path, size, sha256 of every file) for a url store")
    publish.add_argument("directory")


class _ProgressLog:
    """A line every few seconds (and at each file's end): done and total bytes, rate."""

    def __init__(self, path: str | None, name: str, revision: str, total: int, every: float = 5.0):
        self.path, self.name, self.revision, self.total, self.every = path, name, revision, total, every
        self.start = self.last = time.monotonic()
        self.done_files: dict[str, int] = {}

    def line(self, text: str) -> None:
        if self.path:
            with open(self.path, "a") as out:
                out.write(f"{time.strftime('%H:%M:%S')} {self.name}@{self.revision}: {text}\n")

    def __call__(self, path: str, done: int, size: int) -> None:
        self.done_files[path] = done
        now = time.monotonic()
        if now - self.last < self.every and done < size:
            return
        self.last = now
        got = sum(self.done_files.values())
        rate = got / max(now - self.start, 1e-6)
        self.line(f"{got / 1e6:.1f} of {self.total / 1e6:.1f} MB, {rate / 1e6:.1f} MB/s ({path})")


def _specs(name: str, source: dict, token: str | None, cache: str) -> tuple[str, list[weights.FileSpec]]:
    kind = source.get("source")
    if kind == "controller":
        specs = weights.local_specs(source["dir"], Path(cache) / name / ".controller", name)
        return weights.url_revision(specs), specs
    if kind == "url":
        specs = weights.manifest_specs(weights.load_manifest(source["url"], name), source["url"], name)
        return weights.url_revision(specs), specs
    if kind == "hub":
        specs = weights.hub_specs(source["repo"], source["revision"], endpoint=source.get("endpoint"), token=token,
                                  include=source.get("include"), exclude=source.get("exclude"), model=name)
        return source["revision"], specs
    raise weights.WeightsError(f"model {name}: source {kind!r} has nothing to fetch; use source: url, hub or controller")


def fetch(args) -> dict:
    source = json.loads(args.source)
    token = os.environ.get("HF_TOKEN") or None
    revision, specs = _specs(args.name, source, token, args.cache)
    dest = Path(args.cache) / args.name / weights.revision_dir(revision)
    wanted = [s for s in specs if s.path in weights._select([s.path for s in specs], weights.PLANNING_FILES, None)] \
        if args.planning else specs
    seeded = weights.seed_from_siblings(dest, wanted)   # what an earlier revision already holds is not fetched
    progress = _ProgressLog(args.log, args.name, weights.revision_dir(revision), sum(s.size for s in wanted))
    include = [s.path for s in wanted]
    if source["source"] == "controller":
        chosen = set(include)
        result = weights.fetch_local(source["dir"], dest, [s for s in specs if s.path in chosen], verify=args.verify, model=args.name)
    elif source["source"] == "url":
        result = weights.fetch_url(source["url"], dest, {"files": weights.specs_to_json(specs)}, include=include,
                                   progress=progress, verify=args.verify, model=args.name)
    else:
        result = weights.fetch_hub(source["repo"], source["revision"], dest, endpoint=source.get("endpoint"), token=token,
                                   include=include, exclude=[], verify=args.verify, model=args.name)
    if result.fetched:
        progress.line(f"done: {len(result.fetched)} files, {result.downloaded_bytes / 1e6:.1f} MB fetched")
    return {"name": args.name, "revision": revision, "dir": weights.revision_dir(revision), "path": str(dest),
            "files": weights.specs_to_json(specs), "total_bytes": sum(s.size for s in specs),
            "fetched": result.fetched, "seeded": seeded, "hashed": result.hashed,
            "downloaded_bytes": result.downloaded_bytes, "planning": args.planning}


def run(args) -> int:
    try:
        if args.action == "publish":
            manifest = weights.write_manifest(args.directory)
            total = sum(f["size"] for f in manifest["files"])
            print(f"{args.directory}/manifest.json: {len(manifest['files'])} files, {total / 1e6:.1f} MB")
            return 0
        print(json.dumps(fetch(args)))
        return 0
    except weights.WeightsError as exc:
        print(f"vllm-deploy weights: {exc}", file=sys.stderr)
        return 1
