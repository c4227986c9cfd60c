"""Which models a host serves, and the facts the planner needs from each (config.json, weights size)."""

from __future__ import annotations

import base64
import json
from typing import Any

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")


def models_used(instances: list[dict[str, Any]], models: dict[str, Any]) -> list[dict[str, Any]]:
    """The models this host's instances reference, once each, with name and defaults filled in."""
    used = []
    for name in dict.fromkeys(i["model"] for i in instances):
        model = {"source": "present", "generate": {}, "served_name": name, **models[name], "name": name}
        used.append(model)
    return used


def generate_argv(model: dict[str, Any], python: str, script: str) -> list[str]:
    """argv of roles/vllm_model/files/tiny_model.py for a `source: generate` model (`generate:` keys become --flags)."""
    argv = [python, script, "--out", model["path"]]
    for key, value in sorted((model.get("generate") or {}).items()):
        argv += ["--" + key.replace("_", "-"), str(value)]
    return argv


def weights_bytes(files: list[dict[str, Any]]) -> int | None:
    """Sum of the weight files (as ansible.builtin.find lists them); None when there are none."""
    sizes = [f["size"] for f in files if f.get("path", "").endswith(WEIGHT_SUFFIXES)]
    return sum(sizes) if sizes else None


def model_facts(slurped: list[dict[str, Any]], found: list[dict[str, Any]]) -> dict[str, Any]:
    """{model name: {"config": dict, "weights_bytes": int|None}} from the roles' slurp and find loop results.

    Each result's `item` is a model from models_used() (for slurp, nested under item.item)."""
    files_by_model = {r["item"]["name"]: r.get("files", []) for r in found}
    facts = {}
    for r in slurped:
        if r.get("skipped") or "content" not in r:
            continue
        name = r["item"]["item"]["name"]
        config = json.loads(base64.b64decode(r["content"]))
        facts[name] = {"config": config, "weights_bytes": weights_bytes(files_by_model.get(name, []))}
    return facts


def degraded_outcomes(slurped: list[dict[str, Any]]) -> dict[str, Any]:
    """{instance: {"requested_flags", "flags"}} from slurp results of /etc/vllm/<instance>.degraded.json."""
    outcomes = {}
    for r in slurped:
        if r.get("skipped") or "content" not in r:
            continue
        name = r["item"]["path"].rsplit("/", 1)[-1].removesuffix(".degraded.json")
        outcomes[name] = json.loads(base64.b64decode(r["content"]))
    return outcomes


# --- models fetched from a hub, mirror or store (roles/vllm_model/tasks/sources.yml, weights.yml) ---

FETCHED_SOURCES = ("url", "hub", "controller")
SOURCE_FIELDS = ("source", "url", "repo", "revision", "endpoint", "include", "exclude", "dir")


def fetch_sources(used: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """This host's models that the fleet cache fetches: [{name, source: the source keys only}]."""
    return [{"name": m["name"], "source": {k: m[k] for k in SOURCE_FIELDS if k in m}}
            for m in used if m.get("source") in FETCHED_SOURCES]


def source_text(source: dict[str, Any]) -> str:
    """Where a model comes from, for the summary: the store's prefix, or repo@commit on the hub or a mirror."""
    if source.get("source") == "url":
        return str(source.get("url"))
    if source.get("source") == "controller":
        return f"the controller's {source.get('dir')}"
    where = f" from {source['endpoint']}" if source.get("endpoint") else ""
    return f"{source.get('repo')}@{str(source.get('revision'))[:12]}{where}"


def revisions(cache_results: list[dict[str, Any]], fetch: list[dict[str, Any]], models: dict[str, Any]) -> dict[str, Any]:
    """{name: what the cache answered for this host's fetched model, plus the node's place for it}.

    ``cache_results``: the loop results of `vllm-deploy weights fetch` (item: {name, source}, stdout: JSON),
    one per model of the whole play; ``fetch``: this host's fetch_sources()."""
    answers = {}
    for r in cache_results:
        if r.get("skipped") or not r.get("stdout"):
            continue
        answers[(r["item"]["name"], json.dumps(r["item"]["source"], sort_keys=True))] = json.loads(r["stdout"])
    out = {}
    for f in fetch:
        answer = answers[(f["name"], json.dumps(f["source"], sort_keys=True))]
        base = models[f["name"]]["path"].rstrip("/")
        out[f["name"]] = {
            "revision": answer["revision"], "dir": answer["dir"], "cache": answer["path"],
            "base": base, "path": f"{base}/{answer['dir']}", "files": answer["files"],
            "total_bytes": answer["total_bytes"], "from": source_text(f["source"]),
            "fetched": answer.get("fetched", []), "downloaded_bytes": answer.get("downloaded_bytes", 0),
        }
    return out


def resolved(models: dict[str, Any], revs: dict[str, Any]) -> dict[str, Any]:
    """vllm_models with each fetched model's path at its revision's directory (what the unit serves)."""
    return {name: ({**m, "path": revs[name]["path"]} if name in revs else m) for name, m in models.items()}


def fetched_facts(slurped: list[dict[str, Any]], revs: dict[str, Any]) -> dict[str, Any]:
    """model_facts() for fetched models: config.json read from the fleet cache, the weights' size from the source's listing."""
    facts = {}
    for r in slurped:
        if r.get("skipped") or "content" not in r:
            continue
        name = r["item"]
        config = json.loads(base64.b64decode(r["content"]))
        facts[name] = {"config": config, "weights_bytes": weights_bytes(revs[name]["files"])}
    return facts
