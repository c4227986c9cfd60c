"""Preflight checks against real captures, replayed by the nvidia-smi stand-in as a subprocess.

Inputs: tests/fixtures/nvidia-smi-standin (06-rtx4090-x4-table: a shared workstation, four python jobs on
every GPU, GPU 0 at 17466/24564 MiB; 01-a100-sxm4-80gb-x4-table: one 3606 MiB process on GPU 0, GPUs
1-3 idle). Expected figures come from the captures' hand-written .meta.yaml, never from the code.
"""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from conftest import STANDIN_DIR, calibration_dir, filter_plugins
from vllm_deploy import planner, preflight
from vllm_deploy.nvidia_smi import gpu_facts, query_argv

filters = SimpleNamespace(**filter_plugins())

STANDIN = STANDIN_DIR / "nvidia-smi"
# The argv the preflight role runs (its filter vllm_nvidia_smi_argv), without the binary.
APPS_ARGS = tuple(query_argv("compute-apps")[1:])
GPU_ARGS = tuple(query_argv("gpus")[1:])
# planner.CUDA_CONTEXT_GIB: the CUDA context vLLM has before its free-memory snapshot (H100: 78.68 of 79.19 free).
CONTEXT_MIB = 512


def standin(tmp_path, dataset, *args):
    fixture = tmp_path / f"fixture-{dataset}"
    fixture.write_text(f"{dataset}\n")
    env = {"NVIDIA_SMI_STANDIN_FIXTURE": str(fixture), "NVIDIA_SMI_STANDIN_DATA": str(STANDIN_DIR / "data"),
           "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, str(STANDIN), *args], env=env, capture_output=True, text=True, timeout=30)


@pytest.fixture
def node(tmp_path):
    """(meta, gpu facts, compute-apps stdout) of a dataset, as the role would see them on the node."""
    def load(dataset):
        meta = yaml.safe_load((calibration_dir("nvidia-smi") / f"{dataset}.meta.yaml").read_text())
        q = standin(tmp_path, dataset, *GPU_ARGS)
        apps = standin(tmp_path, dataset, *APPS_ARGS)
        assert q.returncode == 0 and apps.returncode == 0, q.stderr + apps.stderr
        return meta, gpu_facts(q.stdout, q.stderr, q.returncode, present=True), apps.stdout
    return load


def record(name, devices, **flags):
    return {"name": name, "unit": f"vllm-{name}", "devices": devices, "flags": flags, "plan": {}, "verdict": "pinned"}


def meta_procs(meta, gpu):
    return [p for p in meta["processes"] if p["gpu"] == gpu]


def free_of(meta, gpu):
    g = meta["gpus"][gpu]
    return g["memory_total_mib"] - g["memory_used_mib"]


def test_cuda_context_matches_planner():
    assert planner.CUDA_CONTEXT_GIB * 1024 == CONTEXT_MIB == preflight.CUDA_CONTEXT_MIB


# --- foreign processes ----------------------------------------------------------------------------
@pytest.mark.parametrize("units, ours", [
    ({}, set()),                                                         # nothing is ours
    ({1381232: "vllm-qwen.service"}, {1381232}),                         # our own previous run
    ({1381232: "vllm-other.service"}, {1381232}),                        # our other instance
    ({1381232: "vllm-gone.service"}, {1381232}),                         # an instance no longer in the inventory
    ({1381232: "user@1000.service", 1396404: "session-4.scope"}, set()),  # a user's jobs
])
def test_foreign_processes_rtx4090_gpu0(node, units, ours):
    meta, facts, apps = node("06-rtx4090-x4-table")
    records = [record("qwen", [0]), record("other", [1])]
    problems = [p for p in preflight.problems(records, facts["gpus"], apps, units, vllm_version="0.19.0")
                if p.check == "foreign_process"]
    qwen = [p for p in problems if p.instance == "qwen"]
    assert len(qwen) == 1 and qwen[0].gpu == 0
    want = [(p["pid"], p["name"], p["memory_mib"]) for p in meta_procs(meta, 0) if p["pid"] not in ours]
    got = [(p["pid"], p["process_name"], p["used_memory_mib"]) for p in qwen[0].figures["processes"]]
    assert got == want
    assert qwen[0].figures["held_mib"] == sum(m for _, _, m in want)
    assert [p["unit"] for p in qwen[0].figures["processes"]] == [units.get(pid) for pid, _, _ in want]
    for pid, name, mib in want:
        assert f"PID {pid} {name} {mib} MiB" in qwen[0].message
    for pid in ours:
        assert f"PID {pid} " not in qwen[0].message
    assert "GPU 0 (NVIDIA GeForce RTX 4090)" in qwen[0].message


def test_no_foreign_process_when_all_are_ours(node):
    meta, facts, apps = node("06-rtx4090-x4-table")
    units = {p["pid"]: "vllm-big.service" for p in meta["processes"]}
    problems = preflight.problems([record("big", [0, 1, 2, 3])], facts["gpus"], apps, units, vllm_version="0.19.0")
    assert [p for p in problems if p.check == "foreign_process"] == []


# --- free memory ----------------------------------------------------------------------------------
def test_free_memory_rtx4090_gpu0_below_request(node):
    meta, facts, apps = node("06-rtx4090-x4-table")
    problems = preflight.free_memory_problems([record("qwen", [0], gpu_memory_utilization=0.9)],
                                              facts["gpus"], apps, {})
    assert len(problems) == 1
    p = problems[0]
    total, free = meta["gpus"][0]["memory_total_mib"], free_of(meta, 0)      # 24564, 7098
    assert (p.instance, p.gpu, p.check) == ("qwen", 0, "free_memory")
    assert p.figures["free_mib"] == free and p.figures["available_mib"] == free
    assert p.figures["total_mib"] == total and p.figures["released_mib"] == 0
    assert p.figures["requested_mib"] == pytest.approx(0.9 * total)
    assert f"{free} MiB" in p.message and f"{total} MiB" in p.message
    assert f"{0.9 * total:.0f} MiB" in p.message and "gpu_memory_utilization 0.9" in p.message
    fits = math.floor((free - CONTEXT_MIB) / total * 100) / 100                # 0.26
    assert p.figures["max_utilization"] == fits
    assert f"gpu_memory_utilization to {fits:.2f}" in p.fix


@pytest.mark.parametrize("version, util", [("0.19.0", 0.9), ("0.21.0", 0.92)])
def test_free_memory_default_utilization_follows_vllm_version(node, version, util):
    _, facts, apps = node("06-rtx4090-x4-table")
    [p] = preflight.free_memory_problems([record("qwen", [1])], facts["gpus"], apps, {}, vllm_version=version)
    assert p.figures["gpu_memory_utilization"] == util


def test_own_instance_memory_counts_as_free(node):
    """A TP-4 instance whose previous run holds the four python processes: restarting it frees them."""
    meta, facts, apps = node("06-rtx4090-x4-table")
    units = {p["pid"]: "vllm-big.service" for p in meta["processes"]}
    records = [record("big", [0, 1, 2, 3], gpu_memory_utilization=0.9)]
    assert preflight.free_memory_problems(records, facts["gpus"], apps, units) == []
    # Without the ownership the same node fails on every GPU.
    assert [p.gpu for p in preflight.free_memory_problems(records, facts["gpus"], apps, {})] == [0, 1, 2, 3]
    # At 0.99 even the released memory is short; the figures show what was counted.
    short = preflight.free_memory_problems([record("big", [0, 1, 2, 3], gpu_memory_utilization=0.99)],
                                           facts["gpus"], apps, units)
    assert [p.gpu for p in short] == [0, 1, 2, 3]
    for p in short:
        held = sum(q["memory_mib"] for q in meta_procs(meta, p.gpu))
        assert p.figures["released_mib"] == held
        assert p.figures["available_mib"] == free_of(meta, p.gpu) + held
        assert f"incl. {held} MiB this deploy releases first" in p.message


def test_other_instance_memory_stays_used(node):
    """Another of our instances keeps running while this one (re)starts: its memory is not free."""
    meta, facts, apps = node("06-rtx4090-x4-table")
    units = {p["pid"]: "vllm-other.service" for p in meta_procs(meta, 0)}
    held = sum(p["memory_mib"] for p in meta_procs(meta, 0))                 # 17442
    # 0.3 x 24564 = 7369 MiB: more than GPU 0's 7098 free, far less than 7098 + 17442.
    [p] = preflight.free_memory_problems([record("qwen", [0], gpu_memory_utilization=0.3), record("other", [1])],
                                         facts["gpus"], apps, units)
    assert p.figures["released_mib"] == 0 and p.figures["available_mib"] == free_of(meta, 0)
    assert p.figures["other_instances_mib"] == {"other": held}
    assert f"our other instances hold other {held} MiB" in p.message


def test_a100_idle_gpu_passes_and_busy_gpu_names_the_process(node):
    meta, facts, apps = node("01-a100-sxm4-80gb-x4-table")
    records = [record("idle", [1], gpu_memory_utilization=0.9), record("busy", [0], gpu_memory_utilization=0.9)]
    problems = preflight.problems(records, facts["gpus"], apps, {})
    assert [p for p in problems if p.instance == "idle"] == []
    [p] = [p for p in problems if p.instance == "busy"]
    [proc] = meta_procs(meta, 0)
    assert p.check == "foreign_process"            # 81920 - 3616 = 78304 MiB free covers 0.9 x 81920 + 512
    assert f"PID {proc['pid']} {proc['name']} {proc['memory_mib']} MiB" in p.message


def test_uuid_pins_resolve_like_indexes(node):
    _, facts, apps = node("06-rtx4090-x4-table")
    uuid = next(g["uuid"] for g in facts["gpus"] if g["index"] == 0)
    by_uuid = preflight.problems([record("qwen", [uuid], gpu_memory_utilization=0.9)], facts["gpus"], apps, {})
    by_index = preflight.problems([record("qwen", [0], gpu_memory_utilization=0.9)], facts["gpus"], apps, {})
    assert [(p.check, p.gpu, p.figures.get("held_mib"), p.figures.get("free_mib")) for p in by_uuid] == \
           [(p.check, p.gpu, p.figures.get("held_mib"), p.figures.get("free_mib")) for p in by_index]
    assert uuid in by_uuid[0].message


def test_cpu_instances_and_missing_gpus(node):
    _, facts, apps = node("01-a100-sxm4-80gb-x4-table")
    problems = preflight.problems([record("cpu", []), record("ghost", [7])], facts["gpus"], apps, {})
    assert [(p.instance, p.check, p.gpu) for p in problems] == [("ghost", "gpu_missing", 7)]


def test_ps_unit_parsing():
    # `ps -eo pid=,unit=` layout: right-aligned PID, "-" outside any unit.
    text = "      1 init.scope\n   1381232 vllm-qwen.service\n    512 -\n   1396404 session-4.scope\n"
    assert preflight.parse_pid_units(text) == {1: "init.scope", 1381232: "vllm-qwen.service",
                                               1396404: "session-4.scope"}
    assert preflight.owner(1381232, preflight.parse_pid_units(text), {"qwen"}) == ("instance", "qwen")
    assert preflight.owner(1381232, preflight.parse_pid_units(text), set()) == ("stale", "qwen")
    assert preflight.owner(1396404, preflight.parse_pid_units(text), {"qwen"}) == ("foreign", "session-4.scope")
    assert preflight.owner(512, preflight.parse_pid_units(text), {"qwen"}) == ("foreign", None)


# --- failed queries (the filter takes the role's registered results) ------------------------------
def test_failed_compute_apps_query_is_one_problem(tmp_path, node):
    _, facts, _ = node("06-rtx4090-x4-table")
    failed = standin(tmp_path, "27-rtx3090-nodriver-error", *APPS_ARGS)
    assert failed.returncode != 0
    result = {"stdout": failed.stdout, "stderr": failed.stderr, "rc": failed.returncode}
    problems = filters.vllm_preflight_problems([record("qwen", [0])], facts, result, {"stdout": "", "rc": 0},
                                               "0.19.0")
    assert [p["check"] for p in problems] == ["query_failed"]
    assert "communicate with the NVIDIA driver" in problems[0]["message"] + failed.stdout
    assert problems[0]["fix"]


def test_filter_lines_name_host_instance_gpu_numbers_and_fix(node):
    meta, facts, apps = node("06-rtx4090-x4-table")
    problems = filters.vllm_preflight_problems([record("qwen", [0], gpu_memory_utilization=0.9)], facts,
                                               {"stdout": apps, "rc": 0}, {"stdout": "", "rc": 0}, "0.19.0")
    lines = filters.vllm_preflight_lines(problems, "gpu-a")
    assert len(lines) == 2
    for line in lines:
        assert line.startswith("gpu-a: instance qwen, ") and "GPU 0" in line and ". Fix: " in line
    assert any(f"{free_of(meta, 0)} MiB" in line for line in lines)
    assert any("PID 1381232 python 7096 MiB" in line for line in lines)


# --- the bare run -------------------------------------------------------------------------------------
def test_alloc_argv_unsets_cuda_visible_devices_and_resolves_uuids(node):
    _, facts, _ = node("06-rtx4090-x4-table")
    uuid2 = next(g["uuid"] for g in facts["gpus"] if g["index"] == 2)
    records = [record("a", [uuid2]), record("b", [0]), record("cpu", [])]
    argv = filters.vllm_preflight_alloc_argv(records, facts, "/opt/vllm/venv/bin/python", 256, 300)
    assert argv[:3] == ["timeout", "--kill-after=10", "300"]
    assert argv[3:7] == ["env", "-u", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER=PCI_BUS_ID"]
    assert argv[7:9] == ["/opt/vllm/venv/bin/python", "-c"]
    assert argv[-3:] == ["256", "0", "2"]
    assert filters.vllm_preflight_alloc_argv([record("cpu", [])], facts, "/x/python") == []


def run_snippet(tmp_path, fake_torch: str | None, gpus=(0, 1)):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ""}
    if fake_torch is not None:
        (tmp_path / "torch").mkdir()
        (tmp_path / "torch" / "__init__.py").write_text(fake_torch)
        env["PYTHONPATH"] = str(tmp_path)
    argv = preflight.alloc_argv(sys.executable, list(gpus), 256, 60)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=90)
    return {"stdout": proc.stdout, "stderr": proc.stderr, "rc": proc.returncode}


def test_bare_run_without_torch_names_each_gpu(tmp_path, node):
    """The real snippet in an interpreter without torch (this test venv has none)."""
    try:
        import torch  # noqa: F401
        pytest.skip("torch is installed here; the no-torch path needs an interpreter without it")
    except ImportError:
        pass
    _, facts, _ = node("06-rtx4090-x4-table")
    result = run_snippet(tmp_path, None)
    assert result["rc"] == 1
    problems = filters.vllm_preflight_alloc_problems(result, [record("a", [0]), record("b", [1])], facts, 256, 60)
    assert [(p["instance"], p["gpu"]) for p in problems] == [("a", 0), ("b", 1)]
    assert all("import torch failed" in p["message"] and "python_stack" in p["fix"] for p in problems)


# torch's own wordings: c10/cuda (TORCH_CHECK "Found no NVIDIA driver ...") and the too-old-driver
# RuntimeError as logged in public issues ("found version 12080" = a CUDA 12.8 driver).
NO_DRIVER = ("Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a "
             "driver from http://www.nvidia.com/Download/index.aspx")
TOO_OLD = "The NVIDIA driver on your system is too old (found version 12080)"


@pytest.mark.parametrize("error, fix_word", [(NO_DRIVER, "nvidia_uvm"), (TOO_OLD, "upgrade the driver")])
def test_bare_run_torch_errors_map_to_fixes(tmp_path, node, error, fix_word):
    fake = f"def empty(*a, **k):\n    raise RuntimeError({error!r})\nuint8 = 'uint8'\n__version__ = 'fake'\n"
    _, facts, _ = node("06-rtx4090-x4-table")
    result = run_snippet(tmp_path, fake)
    problems = preflight.alloc_problems([record("a", [0, 1])], facts["gpus"], result["stdout"], result["stderr"],
                                        result["rc"])
    assert [p.gpu for p in problems] == [0, 1]
    assert all(f"RuntimeError: {error}" in p.message and fix_word in p.fix for p in problems)


def test_bare_run_success_path_reports_the_gpu(tmp_path, node):
    """Exercise the snippet's success path with a stand-in torch (memory figures: the A100 capture's idle GPU)."""
    meta, facts, _ = node("01-a100-sxm4-80gb-x4-table")
    total = meta["gpus"][1]["memory_total_mib"]
    fake = (
        "uint8 = 'uint8'\n__version__ = 'fake'\n"
        "class _T:\n    def __init__(self, n): self.n = n\n    def numel(self): return self.n\n"
        "    def fill_(self, v): return self\n    def __getitem__(self, s): return _T(min(self.n, s.stop))\n"
        "    def sum(self): return self\n    def item(self): return self.n\n"
        "def empty(n, dtype=None, device=None): return _T(n)\n"
        "class cuda:\n    @staticmethod\n    def synchronize(g): pass\n"
        f"    @staticmethod\n    def mem_get_info(g): return ({total} << 20, {total} << 20)\n"
        f"    @staticmethod\n    def get_device_name(g): return {meta['gpus'][1]['name']!r}\n"
        "    @staticmethod\n    def empty_cache(): pass\n"
        "class version:\n    cuda = '12.2'\n"
    )
    result = run_snippet(tmp_path, fake, gpus=(1,))
    assert result["rc"] == 0, result["stderr"]
    rows = preflight.parse_alloc_output(result["stdout"])
    assert rows[1]["ok"] and rows[1]["total_mib"] == total and rows[1]["name"] == meta["gpus"][1]["name"]
    assert preflight.alloc_problems([record("a", [1])], facts["gpus"], result["stdout"], "", 0) == []


@pytest.mark.parametrize("rc, stderr, expect", [
    (124, "", "timed out after 300 s"),
    (-11, "", "no result (rc=-11)"),
])
def test_bare_run_without_output(node, rc, stderr, expect):
    _, facts, _ = node("06-rtx4090-x4-table")
    [p] = preflight.alloc_problems([record("a", [3])], facts["gpus"], "", stderr, rc)
    assert p.gpu == 3 and expect in p.message and p.fix


def test_preflight_module_needs_no_third_party_imports():
    tree = ast.parse(Path(preflight.__file__).read_text())
    imports = {(n.module if isinstance(n, ast.ImportFrom) else n.names[0].name).split(".")[0]
               for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))}
    assert imports <= {"__future__", "json", "math", "re", "dataclasses", "typing", "vllm_deploy"}
    assert json.loads(json.dumps(preflight.Problem("a", 0, "free_memory", "m", "f").to_dict()))["check"] == "free_memory"
