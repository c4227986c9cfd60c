"""Preflight: what would make an instance fail minutes into its start, checked before any unit changes.

Three checks per instance and pinned GPU, all from read-only observations of the node:

* foreign_process: a compute process on the GPU that is not one of our vLLM units
  (`nvidia-smi --query-compute-apps`, owners from `ps -eo pid=,unit=`).
* free_memory: vLLM refuses to start when the free memory it sees after creating its CUDA context is
  below gpu_memory_utilization x total ("Free memory on device (X/Y GiB) on startup is less than
  desired GPU memory utilization (U, Z GiB)"). Memory that this deploy releases before the instance
  starts counts as free: the instance's own previous run (restarted) and units of instances no
  longer in the inventory (vllm_serve stops them first). Other current instances keep theirs.
* bare_alloc: a plain torch allocation + kernel on each pinned GPU through the node's venv, so that
  driver/CUDA/torch problems surface here with the GPU named, not deep inside vLLM's traceback.

Pure functions (standard library only); the vllm_preflight role runs the commands and the
`vllm_preflight_*` filters call these. Problems are host-free; format_problem adds the host.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from vllm_deploy.nvidia_smi import diagnose_failure, parse_compute_apps, query_argv
from vllm_deploy.planner import CUDA_CONTEXT_GIB, default_gpu_memory_utilization

CHECKS = ("foreign_process", "free_memory", "bare_alloc", "gpu_missing", "query_failed")
COMPUTE_APPS_COMMAND = " ".join(query_argv("compute-apps"))
# Units vllm_serve writes (instances.build_instance: unit = "vllm-<name>").
_OUR_UNIT_RE = re.compile(r"^vllm-(?P<name>[a-z0-9][a-z0-9-]{0,47})\.service$")
CUDA_CONTEXT_MIB = int(CUDA_CONTEXT_GIB * 1024)
ALLOC_MARKER = "VLLM_PREFLIGHT "


@dataclass
class Problem:
    instance: str | None
    gpu: int | str | None      # the nvidia-smi index when known, else the inventory's reference
    check: str                 # one of CHECKS
    message: str               # one line, with the numbers
    fix: str
    figures: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _mib(value: float) -> str:
    return f"{value:.0f} MiB ({value / 1024:.2f} GiB)"


def _gpu_label(gpu: dict | None, ref: Any) -> str:
    if not gpu:
        return f"GPU {ref}"
    label = f"GPU {gpu.get('index')}"
    details = [d for d in (gpu.get("name"), gpu.get("uuid") if not isinstance(ref, int) else None) if d]
    return f"{label} ({', '.join(details)})" if details else label


def _gpu_lookup(gpus: list[dict]) -> dict:
    by_ref: dict = {}
    for g in gpus or []:
        if g.get("index") is not None:
            by_ref[g["index"]] = g
            by_ref[str(g["index"])] = g
        if g.get("uuid"):
            by_ref[g["uuid"]] = g
    return by_ref


def parse_pid_units(text: str) -> dict[int, str]:
    """`ps -eo pid=,unit=` → {pid: unit}; processes outside any unit ("-") are left out."""
    units: dict[int, str] = {}
    for line in (text or "").splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0].isdigit() and parts[1].strip() not in ("", "-"):
            units[int(parts[0])] = parts[1].strip()
    return units


def owner(pid: int | None, pid_units: dict[int, str], instance_names: set[str]) -> tuple[str, str | None]:
    """(kind, detail) for a GPU process: ("instance", name), ("stale", name), ("foreign", unit or None).

    vLLM's engine-core and TP workers are children in the unit's cgroup, so they carry its unit too.
    """
    unit = pid_units.get(pid) if pid is not None else None
    m = _OUR_UNIT_RE.match(unit or "")
    if m:
        return ("instance" if m.group("name") in instance_names else "stale"), m.group("name")
    return "foreign", unit


def _apps(compute_apps: list[dict] | str) -> list[dict]:
    return parse_compute_apps(compute_apps) if isinstance(compute_apps, str) else list(compute_apps or [])


def _pinned(record: dict, by_ref: dict) -> list[tuple[Any, dict | None]]:
    # MIG devices are not in the --query-gpu answer preflight reads (their memory comes from the table);
    # the GPU facts play checked they exist, and they are left out of the checks here.
    return [(ref, by_ref.get(ref)) for ref in record.get("devices") or []
            if not (isinstance(ref, str) and ref.startswith("MIG-"))]


def _process_text(app: dict, unit: str | None) -> str:
    mem = app.get("used_memory_mib")
    text = f"PID {app.get('pid')} {app.get('process_name') or '?'} {'?' if mem is None else mem} MiB"
    return text + (f" [{unit}]" if unit else "")


def foreign_processes(records: list[dict], gpus: list[dict], compute_apps: list[dict] | str,
                      pid_units: dict[int, str]) -> list[Problem]:
    """One problem per instance and pinned GPU that runs compute processes not owned by our units."""
    by_ref = _gpu_lookup(gpus)
    names = {r["name"] for r in records}
    apps = _apps(compute_apps)
    problems = []
    for record in records:
        for ref, gpu in _pinned(record, by_ref):
            if gpu is None:
                continue
            found = []
            for app in apps:
                if app.get("gpu_uuid") != gpu.get("uuid"):
                    continue
                kind, unit = owner(app.get("pid"), pid_units, names)
                if kind == "foreign":
                    found.append((app, unit))
            if not found:
                continue
            held = sum(a.get("used_memory_mib") or 0 for a, _ in found)
            pids = " ".join(str(a.get("pid")) for a, _ in found)
            problems.append(Problem(
                instance=record["name"], gpu=gpu.get("index"), check="foreign_process",
                message=(f"{_gpu_label(gpu, ref)}: {len(found)} foreign compute "
                         f"process{'es' if len(found) > 1 else ''} hold {held} MiB: "
                         + "; ".join(_process_text(a, u) for a, u in found)),
                fix=(f"stop them (e.g. `kill {pids}` once their owners agree) or pin the instance to GPUs "
                     "without other users (`nvidia-smi` lists them); vLLM sizes its KV cache from memory "
                     "it assumes is its own"),
                figures={"processes": [{"pid": a.get("pid"), "process_name": a.get("process_name"),
                                        "used_memory_mib": a.get("used_memory_mib"), "unit": u}
                                       for a, u in found],
                         "held_mib": held},
            ))
    return problems


def gpu_memory_utilization(record: dict, default_utilization: float | None = None,
                           vllm_version: str | None = None) -> float:
    """The fraction vLLM will request: the record's flag, else vLLM's default for its version."""
    value = (record.get("flags") or {}).get("gpu_memory_utilization")
    if value is not None:
        return float(value)
    if default_utilization is not None:
        return float(default_utilization)
    return default_gpu_memory_utilization(vllm_version)


def free_memory_problems(records: list[dict], gpus: list[dict], compute_apps: list[dict] | str,
                         pid_units: dict[int, str], default_utilization: float | None = None,
                         vllm_version: str | None = None) -> list[Problem]:
    """Pinned GPUs where free memory (plus what this deploy releases first) − the CUDA context < util × total."""
    by_ref = _gpu_lookup(gpus)
    names = {r["name"] for r in records}
    apps = _apps(compute_apps)
    problems = []
    for record in records:
        util = gpu_memory_utilization(record, default_utilization, vllm_version)
        for ref, gpu in _pinned(record, by_ref):
            if gpu is None or gpu.get("memory_free_mib") is None or not gpu.get("memory_total_mib"):
                continue  # unknown memory (MIG, vGPU): nothing to compare; the bare run still runs
            total = gpu["memory_total_mib"]
            free = gpu["memory_free_mib"]
            released = 0
            others: dict[str, int] = {}
            for app in apps:
                if app.get("gpu_uuid") != gpu.get("uuid"):
                    continue
                kind, who = owner(app.get("pid"), pid_units, names)
                mem = app.get("used_memory_mib") or 0
                if (kind == "instance" and who == record["name"]) or kind == "stale":
                    released += mem
                elif kind == "instance":
                    others[who] = others.get(who, 0) + mem
            available = free + released
            usable = available - CUDA_CONTEXT_MIB
            requested = util * total
            if usable >= requested:
                continue
            fits = max(0.0, math.floor(usable / total * 100) / 100)
            if fits * total > usable:
                fits -= 0.01
            notes = []
            if released:
                notes.append(f"incl. {released} MiB this deploy releases first")
            if others:
                notes.append("our other instances hold " + ", ".join(f"{n} {m} MiB" for n, m in sorted(others.items())))
            note = f" ({'; '.join(notes)})" if notes else ""
            problems.append(Problem(
                instance=record["name"], gpu=gpu.get("index"), check="free_memory",
                message=(f"{_gpu_label(gpu, ref)}: {_mib(available)} of {_mib(total)} free{note}, "
                         f"minus ~{CUDA_CONTEXT_MIB} MiB for vLLM's CUDA context, is below "
                         f"gpu_memory_utilization {util:g} x {total} MiB = {_mib(requested)}: vLLM would stop "
                         "with 'Free memory on device ... on startup is less than desired GPU memory utilization'"),
                fix=(f"free the GPU (stop what holds its {total - available} MiB) or set flags.gpu_memory_utilization "
                     f"to {fits:.2f} or lower on instance {record['name']}" if fits > 0 else
                     f"free the GPU (stop what holds its {total - available} MiB) or pin instance "
                     f"{record['name']} to another GPU"),
                figures={"free_mib": free, "released_mib": released, "available_mib": available,
                         "total_mib": total, "cuda_context_mib": CUDA_CONTEXT_MIB,
                         "gpu_memory_utilization": util, "requested_mib": round(requested, 1),
                         "other_instances_mib": others, "max_utilization": round(fits, 2)},
            ))
    return problems


def missing_gpus(records: list[dict], gpus: list[dict]) -> list[Problem]:
    """Pinned GPUs nvidia-smi does not list (the gpu facts play asserts this too; kept for direct callers)."""
    by_ref = _gpu_lookup(gpus)
    have = ", ".join(str(g.get("index")) for g in gpus or []) or "none"
    return [Problem(instance=r["name"], gpu=ref, check="gpu_missing",
                    message=f"GPU {ref} pinned to instance {r['name']} is not on this node (nvidia-smi lists: {have})",
                    fix="pin GPUs the node has, or fix the driver if GPUs are missing (dmesg: Xid 79 = fell off the bus)")
            for r in records for ref, g in _pinned(r, by_ref) if g is None]


def problems(records: list[dict], gpus: list[dict], compute_apps: list[dict] | str,
             pid_units: dict[int, str] | str, default_utilization: float | None = None,
             vllm_version: str | None = None) -> list[Problem]:
    """Every memory and ownership problem for the node's GPU instances (the bare run is separate)."""
    if isinstance(pid_units, str):
        pid_units = parse_pid_units(pid_units)
    apps = _apps(compute_apps)
    gpu_records = [r for r in records if r.get("devices")]
    return (missing_gpus(gpu_records, gpus)
            + foreign_processes(gpu_records, gpus, apps, pid_units)
            + free_memory_problems(gpu_records, gpus, apps, pid_units, default_utilization, vllm_version))


# --- the bare run --------------------------------------------------------------------------------
# argv: ALLOC_MIB GPU_INDEX... ; one marked JSON line per GPU. fill_ launches a kernel, so a torch build
# without this GPU's architecture fails here ("no kernel image is available"), not only the allocator.
ALLOC_SNIPPET = r"""
import json, sys
mib, gpus = int(sys.argv[1]), [int(a) for a in sys.argv[2:]]
def out(**kw):
    print("VLLM_PREFLIGHT " + json.dumps(kw), flush=True)
try:
    import torch
except Exception as exc:
    for g in gpus:
        out(gpu=g, ok=False, error="import torch failed: %s: %s" % (type(exc).__name__, exc))
    sys.exit(1)
bad = 0
for g in gpus:
    try:
        x = torch.empty(mib << 20, dtype=torch.uint8, device="cuda:%d" % g)
        x.fill_(1)
        n = min(x.numel(), 1 << 20)
        if int(x[:n].sum().item()) != n:
            raise RuntimeError("allocated memory read back wrong values")
        torch.cuda.synchronize(g)
        free, total = torch.cuda.mem_get_info(g)
        out(gpu=g, ok=True, name=torch.cuda.get_device_name(g), free_mib=free >> 20, total_mib=total >> 20,
            torch=torch.__version__, cuda=torch.version.cuda)
        del x
        torch.cuda.empty_cache()
    except Exception as exc:
        bad += 1
        out(gpu=g, ok=False, error=("%s: %s" % (type(exc).__name__, exc)).strip())
sys.exit(1 if bad else 0)
"""

# (pattern, fix) for torch/CUDA errors of the bare run; the first match wins.
_ALLOC_FIXES = (
    (re.compile(r"import torch failed|No module named ['\"]?torch", re.I),
     "the venv has no working torch: re-run the provision tags (role python_stack) for this node"),
    (re.compile(r"not compiled with CUDA", re.I),
     "the venv holds the CPU build of torch: set vllm_engine to gpu (or auto) and re-run role python_stack"),
    (re.compile(r"driver (on your system )?is too old|driver version is insufficient", re.I),
     "the NVIDIA driver is older than the CUDA runtime torch was built for: upgrade the driver "
     "(or pin a torch/vLLM build for this driver's CUDA version)"),
    (re.compile(r"no kernel image is available|not compatible with the current PyTorch installation", re.I),
     "this torch build has no kernels for this GPU's architecture: install a torch/vLLM build that lists "
     "its compute capability (torch.cuda.get_arch_list())"),
    (re.compile(r"Found no NVIDIA driver|no CUDA-capable device|CUDA driver initialization failed", re.I),
     "torch cannot reach the driver: check `nvidia-smi` and `lsmod | grep nvidia_uvm` "
     "(load it with `modprobe nvidia-uvm`), then /dev/nvidia* permissions"),
    (re.compile(r"busy or unavailable", re.I),
     "the GPU is in an exclusive compute mode and held by another process: stop it, or "
     "`nvidia-smi -i <gpu> -c DEFAULT`"),
    (re.compile(r"out of memory", re.I),
     "the GPU is full: stop the processes holding it (nvidia-smi) or pin another GPU"),
    (re.compile(r"invalid device ordinal", re.I),
     "CUDA sees fewer GPUs than nvidia-smi: check CUDA_DEVICE_ORDER / a GPU fallen off the bus (dmesg Xid 79)"),
    (re.compile(r"timed out", re.I),
     "the GPU hangs on first use: check `dmesg | grep -i xid`; a reset (`nvidia-smi -r -i <gpu>`) or reboot usually clears it"),
)
_GENERIC_ALLOC_FIX = ("run the same allocation by hand (`<venv>/bin/python -c \"import torch; "
                      "torch.ones(1, device='cuda:<gpu>')\"`) and check `dmesg | grep -i -E 'nvrm|xid'`")


def alloc_gpu_indexes(records: list[dict], gpus: list[dict]) -> list[int]:
    """nvidia-smi indexes of every GPU pinned on the node (UUIDs resolved), sorted, once each."""
    by_ref = _gpu_lookup(gpus)
    return sorted({by_ref[ref]["index"] for r in records for ref in r.get("devices") or [] if ref in by_ref})


def alloc_argv(python: str, gpu_indexes: list[int], alloc_mib: int = 256, timeout_s: int = 300) -> list[str]:
    """argv for the bare run: CUDA_VISIBLE_DEVICES unset, CUDA numbering as nvidia-smi's (PCI bus order)."""
    return (["timeout", "--kill-after=10", str(int(timeout_s)),
             "env", "-u", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER=PCI_BUS_ID",
             python, "-c", ALLOC_SNIPPET, str(int(alloc_mib))]
            + [str(int(i)) for i in gpu_indexes])


def parse_alloc_output(stdout: str) -> dict[int, dict]:
    """{gpu index: {ok, error | name, free_mib, total_mib, torch, cuda}} from the marked lines."""
    results: dict[int, dict] = {}
    for line in (stdout or "").splitlines():
        if line.startswith(ALLOC_MARKER):
            try:
                row = json.loads(line[len(ALLOC_MARKER):])
            except ValueError:
                continue
            if isinstance(row, dict) and isinstance(row.get("gpu"), int):
                results[row["gpu"]] = row
    return results


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def alloc_problems(records: list[dict], gpus: list[dict], stdout: str, stderr: str = "", rc: int = 0,
                   alloc_mib: int = 256, timeout_s: int = 300) -> list[Problem]:
    """A problem per pinned GPU whose bare allocation failed (or never reported: crash, timeout)."""
    by_ref = _gpu_lookup(gpus)
    results = parse_alloc_output(stdout)
    by_index: dict[int, list[str]] = {}
    for r in records:
        for ref in r.get("devices") or []:
            if ref in by_ref:
                by_index.setdefault(by_ref[ref]["index"], []).append(r["name"])
    problems = []
    for index in sorted(by_index):
        row = results.get(index)
        if row and row.get("ok"):
            continue
        if row:
            error = str(row.get("error") or "failed").splitlines()[0][:300]
        elif rc in (124, 137):
            error = f"timed out after {timeout_s} s ({_last_line(stderr)})"
        else:
            error = f"no result (rc={rc}): {_last_line(stderr or stdout)}"
        fix = next((f for p, f in _ALLOC_FIXES if p.search(error)), _GENERIC_ALLOC_FIX)
        gpu = by_ref.get(index)
        for name in by_index[index]:
            problems.append(Problem(
                instance=name, gpu=index, check="bare_alloc",
                message=f"{_gpu_label(gpu, index)}: a bare {alloc_mib} MiB torch allocation failed: {error}",
                fix=fix, figures={"alloc_mib": alloc_mib, "rc": rc, "error": error},
            ))
    return problems


def format_problem(problem: Problem | dict, host: str) -> str:
    """One line: host, instance, GPU, the numbers, the fix."""
    p = problem.to_dict() if isinstance(problem, Problem) else problem
    who = f"instance {p['instance']}, " if p.get("instance") else ""
    return f"{host}: {who}[{p['check']}] {p['message']}. Fix: {p['fix']}"


def _result(value: Any) -> tuple[str, str, int]:
    """(stdout, stderr, rc) from a registered command result or plain stdout."""
    if isinstance(value, dict):
        return value.get("stdout") or "", value.get("stderr") or "", int(value.get("rc") or 0)
    return value or "", "", 0


def problems_from_results(records: list[dict], gpu_facts: dict, compute_apps: Any, pid_units: Any,
                          vllm_version: str | None = None) -> list[Problem]:
    """problems() from what the role ran: GPU facts (fresh query), the compute-apps and ps results.

    A failed query is itself a problem: without it nothing can be said about the GPUs' users.
    """
    failed = []
    if (gpu_facts or {}).get("error"):
        err = gpu_facts["error"]
        failed.append(Problem(None, None, "query_failed",
                              f"nvidia-smi --query-gpu failed ({err.get('category')}): {err.get('message')}",
                              err.get("fix") or "run nvidia-smi by hand on the node"))
    apps_out, apps_err, apps_rc = _result(compute_apps)
    if apps_rc != 0:
        diag = diagnose_failure(apps_out, apps_err, apps_rc) or {}
        failed.append(Problem(None, None, "query_failed",
                              f"`{COMPUTE_APPS_COMMAND}` failed (rc={apps_rc}): "
                              f"{diag.get('message') or _last_line(apps_err or apps_out)}",
                              diag.get("fix") or "run the query by hand on the node"))
    ps_out, ps_err, ps_rc = _result(pid_units)
    if ps_rc != 0:
        failed.append(Problem(None, None, "query_failed",
                              f"`ps -eo pid=,unit=` failed (rc={ps_rc}): {_last_line(ps_err or ps_out)}",
                              "install procps with systemd support (Debian's procps has it)"))
    if failed:
        return failed
    return problems(records, (gpu_facts or {}).get("gpus", []), apps_out, ps_out, vllm_version=vllm_version)
