"""The degrade ladder: what to change next when vLLM will not start for lack of memory.

The order is the one people climb by hand at 1 a.m. (and the seed posts describe): shorten the
context to what vLLM says fits, halve the batch, give the engine less of the GPU, drop CUDA graphs.
Each step changes one flag, never below the inventory's floors, and is tried once.
"""

from __future__ import annotations

from typing import Any

MEMORY_CATEGORIES = frozenset({
    "kv_cache_too_small", "no_kv_memory", "free_memory_below_request",
    "cuda_oom_weights", "cuda_oom_after_kv", "cuda_oom_runtime",
})
STEPS = ("max_model_len", "max_num_seqs", "gpu_memory_utilization", "enforce_eager")
DEFAULT_MAX_NUM_SEQS = 256          # vLLM's default on most GPUs (1024 on >=70 GiB non-A100 cards)
DEFAULT_UTILIZATION = 0.9
UTILIZATION_STEP = 0.05


def next_step(flags: dict[str, Any], diagnosis: dict[str, Any], *, engine: str,
              floors: dict[str, Any] | None = None, tried: list[str] | None = None) -> dict[str, Any] | None:
    """The next rung for a failed start, or None when the failure is not about memory or the ladder is spent.

    Returns {"step", "flags" (all flags after the change), "change": "flag: old -> new", "reason"}.
    """
    if diagnosis.get("category") not in MEMORY_CATEGORIES:
        return None
    floors = {k: v for k, v in (floors or {}).items() if v is not None}
    tried = list(tried or [])
    figures = diagnosis.get("figures") or {}
    for step in STEPS:
        if step in tried:
            continue
        new = _apply(step, dict(flags), figures, engine, floors)
        if new is not None:
            old = flags.get(step)
            return {
                "step": step,
                "flags": new,
                "change": f"{step}: {old if old is not None else 'default'} -> {new[step]}",
                "reason": diagnosis.get("summary", diagnosis.get("category")),
            }
        tried.append(step)
    return None


def _apply(step: str, flags: dict[str, Any], figures: dict[str, Any], engine: str,
           floors: dict[str, Any]) -> dict[str, Any] | None:
    if step == "max_model_len":
        current = flags.get("max_model_len") or figures.get("max_model_len")
        if not current:
            return None
        target = figures.get("estimated_max_model_len") or int(current) // 2
        target = max(int(target), int(floors.get("max_model_len", 1)))
        if target >= int(current):
            return None
        flags["max_model_len"] = target
        return flags
    if step == "max_num_seqs":
        current = int(flags.get("max_num_seqs") or figures.get("max_num_seqs") or DEFAULT_MAX_NUM_SEQS)
        target = max(current // 2, int(floors.get("max_num_seqs", 1)))
        if target >= current:
            return None
        flags["max_num_seqs"] = target
        return flags
    if engine != "gpu":  # the CPU engine sizes its KV cache from VLLM_CPU_KVCACHE_SPACE, and has no CUDA graphs
        return None
    if step == "gpu_memory_utilization":
        current = float(flags.get("gpu_memory_utilization") or figures.get("gpu_memory_utilization") or DEFAULT_UTILIZATION)
        target = current - UTILIZATION_STEP
        free, total = figures.get("free_gib"), figures.get("total_gib")
        if free and total:  # never ask for more than is free (vLLM's own startup check)
            target = min(target, float(free) / float(total) - 0.01)
        target = round(max(target, float(floors.get("gpu_memory_utilization", 0.5))), 2)
        if target >= current:
            return None
        flags["gpu_memory_utilization"] = target
        return flags
    if step == "enforce_eager":
        if flags.get("enforce_eager"):
            return None
        flags["enforce_eager"] = True
        return flags
    raise ValueError(f"unknown ladder step {step!r}")


def is_memory_failure(diagnosis: dict[str, Any] | None) -> bool:
    """Whether a diagnosis is one the ladder can act on (it lowers memory use; others roll back)."""
    return (diagnosis or {}).get("category") in MEMORY_CATEGORIES


def backups_of(entries: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The files this run replaced for instance `name`, from the registered results of the tasks that
    rendered them with `backup: true`: [{kind, src (Ansible's timestamped backup), dest, mode, name}].

    `entries` are {kind, result (a loop's registered result), dest, mode, name}; files that did not
    change, or were created new, have no backup and are left out."""
    out = []
    for entry in entries:
        results = (entry.get("result") or {}).get("results") or []
        mine = next((r for r in results if (r.get("item") or {}).get("name") == name), {})
        if mine.get("backup_file"):
            out.append({"kind": entry["kind"], "src": mine["backup_file"], "dest": entry["dest"],
                        "mode": entry["mode"], "name": entry["name"]})
    return out
