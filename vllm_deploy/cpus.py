"""Which cores each CPU-engine instance's compute threads run on (VLLM_CPU_OMP_THREADS_BIND).

Why the deploy sets it: vLLM's CPU build binds by default (`auto`, vllm/utils/ompmultiprocessing.py)
to the cores of NUMA node 0, minus the last one it reserves for the engine's other processes. Every
engine on a node computes the same list, so two instances on a 2-core node both put their one
OpenMP thread on core 0 while core 1 idles; a restarting instance's torch-inductor compile (pinned
there too, its g++ children inherit the mask) competes with the instances that carry the load, and
each worker busy-polls its queue for 1 s after every step (shm_broadcast.py's SpinCondition), so a
busy engine takes the core from an idle-looking one. The gateway's first rollout test (all four
engines of two nodes on core 0) saw a node's engines stall together for over 60 s ("No available
shared memory broadcast block found").

So when a node runs more than one CPU instance, each gets its own share of the node's allowed cores
(contiguous, in inventory order; round-robin when there are more instances than cores), and an
instance's own `cpus` pins it explicitly. A lone instance keeps vLLM's NUMA-aware `auto`.
"""

from __future__ import annotations

import re
from typing import Any

# One rank's list ("0-3,8"), ranks separated by "|" (vLLM's own VLLM_CPU_OMP_THREADS_BIND syntax).
_RANK_RE = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")


def parse_cpu_list(text: str) -> list[int]:
    """'0-2,5' (Cpus_allowed_list of /proc/PID/status) -> [0, 1, 2, 5]; ValueError on anything else."""
    text = str(text).strip()
    if not _RANK_RE.fullmatch(text):
        raise ValueError(f"{text!r} is not a CPU list like 0-3,8")
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first:
            raise ValueError(f"{part!r}: a range must go up, e.g. 0-3")
        out.update(range(first, last + 1))
    return sorted(out)


def format_cpu_list(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    ordered = sorted(set(cpus))
    runs: list[list[int]] = []
    for cpu in ordered:
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def cpus_problem(value: Any) -> str | None:
    """Why an instance's `cpus` is not usable, or None: a list of core ids, or vLLM's string form."""
    if isinstance(value, list):
        if value and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            return None
        return f"must be a non-empty list of core ids (integers >= 0), got {value!r}"
    if isinstance(value, str) and all(_RANK_RE.fullmatch(rank) for rank in value.split("|")):
        try:
            for rank in value.split("|"):
                parse_cpu_list(rank)
        except ValueError as exc:
            return str(exc)
        return None
    return f"must be core ids as a list ([0, 1]) or a CPU list string ('0-3', '0-3|4-7' per rank), got {value!r}"


def _world_size(flags: dict[str, Any]) -> int:
    return int(flags.get("tensor_parallel_size", 1) or 1) * int(flags.get("pipeline_parallel_size", 1) or 1)


def _bind_value(cpus: list[int], world: int) -> str | None:
    """VLLM_CPU_OMP_THREADS_BIND for one instance: one list per local rank, or None (too few cores)."""
    if world <= 1:
        return format_cpu_list(cpus)
    if len(cpus) < world:
        return None
    size = len(cpus) // world
    return "|".join(format_cpu_list(cpus[r * size:(r + 1) * size]) for r in range(world))


def bindings(instances: list[dict[str, Any]], allowed: list[int] | None) -> dict[str, str]:
    """{instance name: VLLM_CPU_OMP_THREADS_BIND} for a CPU node's instances (`flags` as planned).

    `allowed` is the node's allowed core list; None or empty (not read, e.g. before the node was
    reached) leaves unpinned instances to vLLM's own binding."""
    out: dict[str, str] = {}
    free = list(allowed or [])
    unpinned = []
    for inst in instances:
        pinned = inst.get("cpus")
        if pinned is None:
            unpinned.append(inst)
            continue
        if isinstance(pinned, str):
            out[inst["name"]] = pinned
            taken = {c for rank in pinned.split("|") for c in parse_cpu_list(rank)}
        else:
            taken = set(pinned)
            value = _bind_value(sorted(taken), _world_size(inst.get("flags") or {}))
            if value is not None:
                out[inst["name"]] = value
        free = [c for c in free if c not in taken]
    if len(instances) < 2 or not unpinned or not free:
        return out
    if len(free) >= len(unpinned):
        base, extra = divmod(len(free), len(unpinned))
        start = 0
        for i, inst in enumerate(unpinned):
            size = base + (1 if i < extra else 0)
            value = _bind_value(free[start:start + size], _world_size(inst.get("flags") or {}))
            start += size
            if value is not None:
                out[inst["name"]] = value
    else:
        for i, inst in enumerate(unpinned):
            if _world_size(inst.get("flags") or {}) == 1:
                out[inst["name"]] = str(free[i % len(free)])
    return out


def node_share(allowed: Any, nodes: int, index: int) -> str:
    """The cores node `index` of `nodes` containers on one machine owns (Docker's --cpuset-cpus).

    `allowed` is the machine's allowed core list ('0-3' or [0, 1, 2, 3]). Contiguous shares in node
    order, as even as they go; with more nodes than cores, node i gets core i mod n. Staging nodes
    that share every core stall each other's engines (see the module docstring)."""
    cores = parse_cpu_list(allowed) if isinstance(allowed, str) else sorted(set(int(c) for c in allowed))
    if not cores or nodes < 1 or not 0 <= index < nodes:
        raise ValueError(f"no share for node {index} of {nodes} on cores {allowed!r}")
    if nodes > len(cores):
        return str(cores[index % len(cores)])
    base, extra = divmod(len(cores), nodes)
    start = index * base + min(index, extra)
    return format_cpu_list(cores[start:start + base + (1 if index < extra else 0)])
