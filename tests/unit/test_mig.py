"""An instance pinned to a MIG device: refused where it cannot work (beside other GPUs, a device the node does
not have, a whole GPU in MIG mode, two engines on one GPU instance's memory), pinned by its UUID in the unit,
and planned with the slice's memory. The node facts come from real captures of GPUs in MIG mode
(tests/fixtures/calibration/nvidia-smi/42- to 45-, nvidia_gpu_exporter; values in their .meta.yaml)."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import calibration_dir, model_config_path

from vllm_deploy import instances
from vllm_deploy.nvidia_smi import gpu_facts

MODELS = {"qwen": {"path": "/srv/models/qwen"}}
DEFAULTS = {"hf_home": "h", "cache_root": "c", "engine": "gpu", "plan": True, "floors": {}}


def _capture(name: str) -> tuple[str, dict]:
    d = calibration_dir("nvidia-smi")
    return (d / name).read_text(), yaml.safe_load((d / name.replace(".txt", ".meta.yaml")).read_text())


def _node(listing: str, table: str, csv: str | None = None) -> dict:
    """gpu_facts as the role sets them from --query-gpu (or the table), -L and the table."""
    list_text, meta = _capture(listing)
    table_text, _ = _capture(table)
    facts = gpu_facts(_capture(csv)[0] if csv else table_text, "", 0, True, list_text, table_text)
    assert facts["error"] is None, facts["error"]
    return facts, meta


H100, H100_META = _node("42-h100-x1-mig4-list.txt", "42-h100-x1-mig4-table.txt", "43-h100-x1-mig4-csv.txt")
H200, H200_META = _node("44-h200-x1-mig5-shared-gi-list.txt", "44-h200-x1-mig5-shared-gi-table.txt")
SLICES = [d["uuid"] for d in H100_META["gpus"][0]["mig_devices"]]
SHARED = [d["uuid"] for d in H200_META["gpus"][0]["mig_devices"]]


def inst(name, gpus, port, **kw):
    return {"name": name, "model": "qwen", "gpus": gpus, "port": port, **kw}


def errors(instances_, facts=None):
    kw = {}
    if facts is not None:
        kw = dict(gpus=facts["gpus"], mig_devices=facts["mig_devices"], mig_gpus=facts["mig_gpus"])
    return instances.validate_inventory(MODELS, instances_, host="node1", **kw)


def test_mig_pins_that_fit_pass_play_1_and_the_facts_play():
    fleet = [inst("a", [SLICES[0]], 8000), inst("b", [SLICES[1]], 8001), inst("c", [SLICES[2]], 8002)]
    assert errors(fleet) == []
    assert errors(fleet, H100) == []


def test_a_mig_device_beside_other_gpus_is_refused_in_play_1():
    (line,) = errors([inst("a", [SLICES[0], SLICES[1]], 8000)])
    assert line.startswith("node1: vllm_instances[0].gpus: a MIG device must be the instance's only GPU")
    assert "pin one MIG device per instance" in line
    (line,) = errors([inst("a", [0, SLICES[0]], 8000)])
    assert "must be the instance's only GPU" in line


def test_a_mig_device_the_node_lacks_is_named_with_what_it_has():
    (line,) = errors([inst("a", ["MIG-11111111-2222-3333-4444-555555555555"], 8000)], H100)
    assert "MIG device MIG-11111111-2222-3333-4444-555555555555 does not exist on this node" in line
    assert f"{SLICES[0]} (3g.40gb on GPU 0)" in line and "nvidia-smi -L" in line


@pytest.mark.parametrize("whole", [0, "GPU-00000000-0000-0000-0000-000000000000"])
def test_a_whole_gpu_in_mig_mode_is_refused(whole):
    (line,) = errors([inst("a", [whole], 8000)], H100)
    assert f"GPU {whole} is in MIG mode" in line and SLICES[0] in line


def test_two_engines_on_one_gpu_instance_are_refused():
    """H200 capture: MIG devices 0 and 1 are compute instances of GPU instance 2 (71424 MiB shared)."""
    (line,) = errors([inst("a", [SHARED[0]], 8000), inst("b", [SHARED[1]], 8001)], H200)
    assert line.startswith("node1: vllm_instances[1].gpus: MIG device " + SHARED[1])
    assert "shares GPU instance 2 of GPU 0 (its 71424 MiB)" in line and "instance a" in line
    assert errors([inst("a", [SHARED[0]], 8000), inst("b", [SHARED[2]], 8001)], H200) == []


def test_the_same_mig_device_twice_is_refused():
    (line,) = errors([inst("a", [SLICES[0]], 8000), inst("b", [SLICES[0]], 8001)], H100)
    assert f"GPU {SLICES[0]} is already pinned to instance a" in line


def test_facts_without_mig_lists_do_not_judge_mig_pins():
    """The driver role's check reads --query-gpu only: it cannot know MIG devices, so it does not refuse them."""
    assert instances.validate_inventory(MODELS, [inst("a", [SLICES[0]], 8000)], host="node1", gpus=H100["gpus"]) == []


def test_unit_pins_the_mig_uuid_and_the_plan_uses_the_slice_memory():
    config = json.loads(model_config_path("Qwen__Qwen2.5-7B-Instruct").read_text())
    facts = {"config": config, "weights_bytes": 15_231_233_024}
    rec_small, rec_big = instances.build_instances(
        [inst("small", [SLICES[2]], 8000), inst("big", [SLICES[0]], 8001)], MODELS,
        gpu_facts=H100, model_facts={"qwen": facts}, defaults=DEFAULTS)
    assert rec_big["env"]["CUDA_VISIBLE_DEVICES"] == SLICES[0] and rec_big["devices"] == [SLICES[0]]
    assert "tensor_parallel_size" not in rec_big["flags"]
    # 40448 MiB slice: torch sees about 40448/1024 - 0.5 GiB, not the 80 GB board.
    assert rec_big["plan"]["gpu_total_gib"] == pytest.approx(40448 / 1024 - 0.5, abs=0.01)
    # The 9984 MiB slice cannot hold 14 GiB of bf16 weights: the planner says so instead of planning 80 GB.
    assert rec_small["plan"]["gpu_total_gib"] == pytest.approx(9984 / 1024 - 0.5, abs=0.01)
    assert rec_small["verdict"] == "no_fit"
    assert rec_big["verdict"] in ("fits", "margin")
