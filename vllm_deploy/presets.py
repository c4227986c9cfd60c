"""Per-GPU presets and flag selection: a preset for the GPU class, adjusted by the memory planner.

The presets and the GPU table are data (``data/presets.yaml``, ``data/gpus.yaml``); this module picks
one, checks pinned flags, and moves max_model_len / max_num_seqs to what the planner says fits.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import yaml

from vllm_deploy._validation import _closest
from vllm_deploy.planner import (
    CUDA_CONTEXT_GIB,
    ModelInfo,
    Plan,
    PlanError,
    _check_parallel,
    plan,
    plan_cpu,
)

_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
MARGIN = 0.03   # planner error margin on KV memory (bench: all calibration points within 2%)

# Seed-post flags vLLM no longer accepts (or never did): refuse them instead of rendering a broken unit.
_REJECTED_FLAGS = {"swap_space": "V1 never uses it; deprecated in 0.18 and removed",
                   "tokenizer_pool_size": "removed by vLLM 0.10", "tokenizer_pool_type": "removed by vLLM 0.10"}


@functools.lru_cache(maxsize=None)
def _load(name: str) -> dict:
    with open(os.path.join(_DATA, name), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _norm(name: str) -> str:
    n = " ".join(str(name).lower().replace("_", " ").split())
    for prefix in ("nvidia ", "tesla "):
        if n.startswith(prefix):
            n = n[len(prefix):]
    return n


def lookup_gpu(name: str | None) -> dict | None:
    """The gpus.yaml entry for a GPU name as nvidia-smi prints it; loose match on case and prefixes."""
    if not name:
        return None
    gpus = _load("gpus.yaml")["gpus"]
    if name in gpus:
        return {"name": name, **gpus[name]}
    want = _norm(name)
    for key, entry in gpus.items():
        if _norm(key) == want:
            return {"name": key, **entry}
    # Looser: a unique table name that contains the query or is contained by it ("H100 80GB" → "H100 80GB HBM3").
    hits = [k for k in gpus if want in _norm(k) or _norm(k) in want]
    if len(hits) == 1:
        return {"name": hits[0], **gpus[hits[0]]}
    return None


def gpu_total_gib(device: dict) -> tuple[float, dict | None]:
    """Torch-reported total GiB for a device dict: table value, else memory_total_mib less the usual reserve."""
    entry = lookup_gpu(device.get("name"))
    mib = device.get("memory_total_mib")
    if entry and (mib is None or abs(int(mib) - int(entry["memory_total_mib"])) <= 256):
        return float(entry["torch_total_gib"]), entry
    if mib is None:
        if entry:
            return float(entry["torch_total_gib"]), entry
        raise PlanError(f"device {device.get('name')!r} is not in gpus.yaml and has no memory_total_mib; "
                        "pass memory_total_mib from nvidia-smi")
    if not isinstance(mib, (int, float)) or mib <= 0:
        raise PlanError(f"device memory_total_mib={mib!r} must be a positive number (MiB, from nvidia-smi)")
    # MIG slices and unknown cards: nvidia-smi MiB less the ~0.5 GiB reserve torch does not report. The
    # table entry a MIG name loosely matches ("H100 80GB HBM3 MIG 3g.40gb") describes the whole board, so it
    # is not returned: its memory class would pick the 80 GB preset for a 40 GB slice.
    return round(mib / 1024 - 0.5, 2), None


def preset_for(memory_class_gb: float) -> tuple[str, dict]:
    """The largest preset whose class is <= the GPU's nominal memory (smallest one if below all)."""
    presets = {k: v for k, v in _load("presets.yaml")["presets"].items() if k != "cpu"}
    ordered = sorted(presets.items(), key=lambda kv: kv[1]["memory_class"])
    chosen = ordered[0]
    for name, p in ordered:
        if p["memory_class"] <= memory_class_gb + 0.5:
            chosen = (name, p)
    return chosen


def _fp8_kv_ok(gpu_name: str | None) -> bool:
    subs = _load("presets.yaml").get("fp8_kv_cache_gpus", [])
    return bool(gpu_name) and any(s.lower() in gpu_name.lower() for s in subs)


def _verdict(p: Plan) -> str:
    if not p.fits:
        return "no_fit"
    avail = p.available_kv_gib
    if avail <= 0 or (avail - p.needed_kv_gib) <= MARGIN * avail:
        return "margin"
    return "fits"


def choose_flags(*, config: dict, weights_bytes: int | None, device: dict, pinned: dict | None = None,
                 floors: dict | None = None, vllm_version: str | None = None) -> dict:
    """device: {"kind": "gpu", "name": "NVIDIA L40S", "memory_total_mib": 46068, "memory_free_mib": 44225 (optional), "count": N}
               (count = GPUs given to this instance) or {"kind": "cpu", "kv_cache_space_gib": 1.0}.
       pinned: flags the inventory pins, snake_case vLLM arg names (max_model_len, max_num_seqs,
               gpu_memory_utilization, enforce_eager, quantization, tensor_parallel_size, kv_cache_dtype, dtype, ...).
       floors: {"max_model_len": N, "max_num_seqs": N} — never go below.
       Returns {"flags": {snake_case: value, ...}, "plan": Plan.to_dict(), "verdict": "fits" | "margin" | "no_fit",
                "preset": "<preset name>", "message": "<one line for a person>"}"""
    if not isinstance(device, dict) or device.get("kind") not in ("gpu", "cpu"):
        raise PlanError("device must be a dict with kind 'gpu' or 'cpu'")
    pinned = dict(pinned or {})
    floors = dict(floors or {})
    _check_pins(pinned, device)
    model = ModelInfo.from_config(config, weights_bytes)
    limit = model.max_model_len_limit
    floor_len = int(floors.get("max_model_len") or 1)
    floor_seqs = int(floors.get("max_num_seqs") or 1)
    ladder = _load("presets.yaml")["max_model_len_ladder"]

    if device["kind"] == "cpu":
        return _choose_cpu(model, device, pinned, floor_len, ladder, vllm_version)

    count = int(device.get("count") or 1)
    if count < 1:
        raise PlanError(f"device count={count} must be >= 1")
    total, entry = gpu_total_gib(device)
    gpu_name = (entry or {}).get("name") or device.get("name")
    mem_class = (entry or {}).get("memory_class") or (device.get("memory_total_mib") or total * 1024) / 1024
    preset_name, preset = preset_for(float(mem_class))
    flags, free_gib = _start_flags(preset, model, device, pinned, count, total, floor_len, floor_seqs)

    def run(f: dict) -> Plan:
        return plan(model, gpu_total_gib=total, num_gpus=count, tensor_parallel_size=int(f["tensor_parallel_size"]),
                    pipeline_parallel_size=int(f.get("pipeline_parallel_size", 1)),
                    gpu_memory_utilization=f.get("gpu_memory_utilization"), max_model_len=f.get("max_model_len"),
                    dtype=f.get("dtype", "auto"), kv_cache_dtype=f.get("kv_cache_dtype", "auto"),
                    max_num_seqs=f.get("max_num_seqs"), max_num_batched_tokens=f.get("max_num_batched_tokens"),
                    cpu_offload_gb=f.get("cpu_offload_gb", 0), free_memory_gib=free_gib,
                    vllm_version=vllm_version, gpu_name=gpu_name, enforce_eager=bool(f.get("enforce_eager")),
                    block_size=f.get("block_size"), quantization=f.get("quantization"))

    p = run(flags)
    structural = any(r.startswith(("Total number", "AssertionError", "User-specified", "Free memory"))
                     for r in p.reasons)
    if not structural:
        flags, p = _tune(run, flags, p, pinned, preset.get("target_concurrency", 4), ladder, limit,
                         floor_len, floor_seqs, gpu_name)
    verdict = _verdict(p)
    out_flags = {k: v for k, v in flags.items() if not (k == "pipeline_parallel_size" and v == 1)}
    if out_flags.get("enforce_eager") is False:
        del out_flags["enforce_eager"]
    message = _message(verdict, p, gpu_name, count, preset_name)
    return {"flags": out_flags, "plan": p.to_dict(), "verdict": verdict, "preset": preset_name, "message": message}


def _check_pins(pinned: dict, device: dict) -> None:
    """Refuse pins vLLM would refuse: removed flags, values it has no name for, names it has no argument for."""
    for key, why in _REJECTED_FLAGS.items():
        if key in pinned:
            raise PlanError(f"pinned flag {key} is not accepted by vLLM ({why}); remove it from the inventory")
    if str(pinned.get("kv_cache_dtype", "auto")) in ("fp16", "fp32", "float32"):
        raise PlanError(f"pinned kv_cache_dtype={pinned['kv_cache_dtype']!r} is not a vLLM value; "
                        "use auto (= model dtype), float16, bfloat16 or fp8")
    # Any argument of the pinned vLLM may be pinned (vLLM's own list, data/vllm-args); the planner
    # models the memory-relevant ones and passes the rest through.
    from vllm_deploy import compat, vllm_args

    spec = vllm_args.for_pins(compat.load_versions(), "cpu" if device["kind"] == "cpu" else "gpu")
    unknown = sorted(set(pinned) - set(spec["flags"]))
    if unknown:
        guesses = {k: _closest(k, spec["flags"]) for k in unknown}
        hint = "; ".join(f"{k}: did you mean {g}?" for k, g in guesses.items() if g)
        raise PlanError(f"pinned flags {unknown} are not arguments of {spec['label']}; "
                        + (hint or "use snake_case vLLM names (max_model_len, max_num_seqs, ...)"))


def _start_flags(preset: dict, model: ModelInfo, device: dict, pinned: dict, count: int, total: float,
                 floor_len: int, floor_seqs: int) -> tuple[dict[str, Any], float | None]:
    """The preset's flags with the pins over them, TP over the instance's GPUs, the memory share cut to what is
    free, the length and sequences within the model's limit and the floors; and the free GiB vLLM will see."""
    flags: dict[str, Any] = dict(preset["flags"])
    tp = pinned.get("tensor_parallel_size")
    pp = int(pinned.get("pipeline_parallel_size") or 1)
    if tp is None:
        # All GPUs of the instance for TP, down to the largest size vLLM accepts for this model.
        tp = next((t for t in range(count // pp, 0, -1) if not _check_parallel(model, t)), 1)
    flags["tensor_parallel_size"] = int(tp)
    if pp > 1:
        flags["pipeline_parallel_size"] = pp
    flags.update(pinned)

    free_gib = None
    if device.get("memory_free_mib") is not None:
        # vLLM checks free memory after creating its CUDA context.
        free_gib = max(0.0, device["memory_free_mib"] / 1024 - CUDA_CONTEXT_GIB)
        if "gpu_memory_utilization" not in pinned and flags["gpu_memory_utilization"] * total > free_gib:
            flags["gpu_memory_utilization"] = max(0.5, int(free_gib / total * 100) / 100)

    limit = model.max_model_len_limit
    if "max_model_len" not in pinned:
        flags["max_model_len"] = max(min(flags["max_model_len"], limit), min(floor_len, limit))
    if "max_num_seqs" not in pinned:
        flags["max_num_seqs"] = max(flags["max_num_seqs"], floor_seqs)
    return flags, free_gib


def _tune(run, flags: dict, p: Plan, pinned: dict, target_conc: int, ladder: list, limit: int, floor_len: int,
          floor_seqs: int, gpu_name: str | None) -> tuple[dict, Plan]:
    """Fewer sequences while the sampler's warm-up is at risk; then a longer context while target_conc requests
    still fit, or the degrade steps (_lower) when nothing fits. Pinned flags never move."""
    # Sampler warm-up risk: fewer sequences shrink the profile and the warm-up (never below the floor).
    while ("max_num_seqs" not in pinned and any("warming up sampler" in w for w in p.warnings)
           and flags["max_num_seqs"] // 2 >= floor_seqs and flags["max_num_seqs"] > 16):
        flags["max_num_seqs"] //= 2
        p = run(flags)
    if "max_model_len" in pinned:
        return flags, p
    if not p.fits:
        q, lowered = _lower(run, flags, p, floor_len, floor_seqs, pinned, gpu_name)
        # keep the preset's flags when degrading does not help: the reason stays readable
        return (lowered, q) if q.fits else (flags, p)
    # Raise while one more rung still leaves room for target_concurrency requests.
    for length in [n for n in ladder if flags["max_model_len"] < n <= limit] + (
            [limit] if limit not in ladder and limit > flags["max_model_len"] else []):
        trial = dict(flags, max_model_len=length)
        q = run(trial)
        if q.fits and q.max_concurrency >= target_conc and _verdict(q) == "fits":
            flags, p = trial, q
        else:
            break
    return flags, p


def _lower(run, flags: dict, p: Plan, floor_len: int, floor_seqs: int, pinned: dict, gpu_name: str | None):
    """Degrade ladder for presets: max_model_len to what fits, then fewer sequences, then an fp8 KV cache."""
    for _ in range(3):
        if p.fits:
            return p, flags
        fit = p.max_model_len_fit
        if fit >= floor_len and fit > 0:
            length = fit - fit % 1024 if fit >= 2048 else fit - fit % 16 or fit
            trial = dict(flags, max_model_len=max(length, floor_len))
            q = run(trial)
            if q.fits:
                return q, trial
        if "max_num_seqs" not in pinned and flags["max_num_seqs"] // 2 >= floor_seqs and flags["max_num_seqs"] > 8:
            flags = dict(flags, max_num_seqs=flags["max_num_seqs"] // 2)
            p = run(flags)
            continue
        if "kv_cache_dtype" not in pinned and flags.get("kv_cache_dtype", "auto") == "auto" and _fp8_kv_ok(gpu_name):
            flags = dict(flags, kv_cache_dtype="fp8")
            p = run(flags)
            continue
        break
    return p, flags


def _message(verdict: str, p: Plan, gpu_name: str | None, count: int, preset: str) -> str:
    where = f"{count}x {gpu_name or 'GPU'}" if p.device == "gpu" else "CPU"
    if verdict == "no_fit":
        return f"Does not fit on {where}: {p.reasons[0] if p.reasons else 'no KV cache memory'}"
    head = "Fits" if verdict == "fits" else "Fits within the planner's 3% margin (may fail)"
    return (f"{head} on {where} ({preset}): max_model_len {p.max_model_len}, {p.kv_cache_tokens:,} KV tokens, "
            f"{p.max_concurrency:.1f}x concurrency, {p.available_kv_gib:.1f} GiB KV cache")


def _choose_cpu(model: ModelInfo, device: dict, pinned: dict, floor_len: int, ladder: list, vllm_version) -> dict:
    preset = _load("presets.yaml")["presets"]["cpu"]
    space = device.get("kv_cache_space_gib", preset["env"]["VLLM_CPU_KVCACHE_SPACE"])
    flags = dict(preset["flags"])
    flags.update({k: v for k, v in pinned.items() if k not in ("gpu_memory_utilization", "tensor_parallel_size")})
    limit = model.max_model_len_limit
    if "max_model_len" not in pinned:
        flags["max_model_len"] = max(min(flags["max_model_len"], limit), min(floor_len, limit))
    p = plan_cpu(model, kv_cache_space_gib=space, max_model_len=flags["max_model_len"],
                 max_num_seqs=flags.get("max_num_seqs"), vllm_version=vllm_version)
    if not p.fits and "max_model_len" not in pinned and p.max_model_len_fit >= floor_len:
        flags["max_model_len"] = p.max_model_len_fit
        p = plan_cpu(model, kv_cache_space_gib=space, max_model_len=flags["max_model_len"],
                     max_num_seqs=flags.get("max_num_seqs"), vllm_version=vllm_version)
    verdict = _verdict(p)
    flags.pop("kv_cache_dtype", None)   # the CPU backend falls back to auto anyway
    msg = _message(verdict, p, None, 1, "cpu")
    return {"flags": flags, "plan": p.to_dict(), "verdict": verdict, "preset": "cpu", "message": msg,
            "env": {"VLLM_CPU_KVCACHE_SPACE": space}}
