"""The degrade ladder: what to change next when vLLM will not start for lack of memory.

The order is the one people climb by hand at 1 a.m. (and the seed posts describe): shorten the
context to what vLLM says fits, halve the batch, give the engine less of the GPU, drop CUDA graphs.
Each step changes one flag, never below the inventory's floors, and is tried once.
"""

from __future__ import annotations

from typing import Any

# What the deploy does with each diagnosis category (vllm_deploy.diagnose attaches it to every diagnosis):
# "ladder"   a memory failure: the degrade ladder climbs when vllm_serve_auto_degrade is on, else rollback;
# "refuse"   a configuration or node the deploy refuses before it starts vLLM again (planner, gpu_facts),
#            so the failed start itself is rolled back;
# "rollback" nothing a flag rung can change: the previous version is restored and the fix is reported.
ACTIONS = {
    "kv_cache_too_small": "ladder", "no_kv_memory": "ladder", "free_memory_below_request": "ladder",
    "cuda_oom_weights": "ladder", "cuda_oom_after_kv": "ladder", "cuda_oom_runtime": "ladder", "cuda_oom": "ladder",
    "tp_not_divisible": "refuse", "max_len_over_model_limit": "refuse", "driver_mismatch_or_no_driver": "refuse",
    "nccl_error": "rollback", "shm_too_small": "rollback", "port_in_use": "rollback",
    "model_not_found_or_auth": "rollback", "trust_remote_code_required": "rollback",
    "unsupported_dtype_or_gpu": "rollback", "model_not_supported": "rollback", "lost_rank": "rollback",
    "config_rejected": "rollback",
    "unknown": "rollback",
}
ACTION_TEXT = {
    "ladder": ("degrade ladder when vllm_serve_auto_degrade is on (max_model_len, max_num_seqs, "
               "gpu_memory_utilization, enforce_eager; one rung at a time, never below the floors), else rollback"),
    "refuse": "rollback now; the {by} refuses this before vLLM is started again",
    "rollback": "rollback to the previous version (no flag rung fixes this)",
}
REFUSED_BY = {"tp_not_divisible": "planner (vllm_plan, with vllm_plan_enforce on, the default)",
              "max_len_over_model_limit": "planner (vllm_plan, with vllm_plan_enforce on, the default)",
              "driver_mismatch_or_no_driver": "GPU facts play (gpu_facts, driver checks)"}
# Where a category is wider than the check that refuses it, what is refused and what is not: planner._check_parallel
# divides the language model's heads, KV heads, padded vocabulary and MLP width (config.json) by the TP size and the
# validation play (instances._parallel) matches TP x PP to the pinned GPUs; nothing knows a checkpoint's quantization
# groups, its experts or a vision tower's heads, so such a layout fails again until its flags change.
REFUSAL_TEXT = {
    "tp_not_divisible": ("rollback now; before vLLM is started again the {by} refuses a TP size that does not divide "
                         "the attention heads, KV heads, vocabulary or MLP width, and the validation play a TP x PP "
                         "other than the pinned GPUs; a quantized layer's groups, the experts' split or a vision "
                         "tower's heads nothing checks: change the flags"),
}
MEMORY_CATEGORIES = frozenset(c for c, action in ACTIONS.items() if action == "ladder")
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


def action_for(category: str) -> dict[str, str]:
    """{"action": ladder|refuse|rollback, "text": what the deploy does} for a diagnosis category."""
    action = ACTIONS.get(category, "rollback")
    text = REFUSAL_TEXT.get(category, ACTION_TEXT[action])
    return {"action": action, "text": text.format(by=REFUSED_BY.get(category, "deploy"))}


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
