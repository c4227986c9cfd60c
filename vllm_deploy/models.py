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
