"""The driver/CUDA/torch/vLLM gate, table-driven. Expected driver→CUDA values come from the real
nvidia-smi captures' own "CUDA Version" header (shared/calibration/nvidia-smi/*.meta.yaml)."""

from __future__ import annotations

import copy

import pytest

from vllm_deploy.compat import check, load_versions, max_cuda_for_driver, min_driver_for_cuda


def versions(**changes):
    v = copy.deepcopy(load_versions())
    for path, value in changes.items():
        node = v
        *parents, leaf = path.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return v


GOOD_GPU = {"nvidia_driver__source": "nvidia_repo", "nvidia_driver__branch": "580",
            "nvidia_driver__version": "580.95.05"}


@pytest.mark.parametrize("driver,cuda", [
    ("535.216.01", "12.2"),   # 01-a100 capture: "CUDA Version: 12.2"
    ("525.125.06", "12.0"),   # 03-l4 capture
    ("535.183.01", "12.2"),   # 06-rtx4090 capture
    ("550.90.07", "12.4"),    # 16-h100 capture
    ("580.82.07", "13.0"),    # 13-h100 csv (580 branch)
    ("470.82.01", None),      # older than any table entry
    (None, None),
])
def test_max_cuda_for_driver(driver, cuda):
    assert max_cuda_for_driver(driver) == cuda


@pytest.mark.parametrize("cuda,driver", [("12.8", "525.60.13"), ("12.0", "525.60.13"), ("13.0", "580.65.06")])
def test_min_driver_for_cuda(cuda, driver):
    assert min_driver_for_cuda(cuda) == driver


def rules(violations):
    return sorted({v.rule for v in violations})


def test_shipped_pins_are_refused_for_gpu_nodes():
    # versions.yaml: Debian's 535 driver with a CUDA 13.0 torch — impossible on a GPU node.
    found = check(load_versions(), profile="gpu")
    assert "pinned_driver_vs_torch_cuda" in rules(found)
    msg = next(v.message for v in found if v.rule == "pinned_driver_vs_torch_cuda")
    assert msg.startswith("pinned_driver_vs_torch_cuda:")
    for needle in ("535.261.03", "13.0", "2.14.0", "nvidia_repo", "580", "12.x"):
        assert needle in msg


def test_shipped_pins_are_fine_for_cpu_nodes():
    assert check(load_versions(), profile="cpu") == []


@pytest.mark.parametrize("changes,kwargs,expected", [
    (GOOD_GPU, {}, []),
    (GOOD_GPU, {"driver_version": "580.82.07"}, []),
    (GOOD_GPU, {"driver_version": "535.183.01"}, ["cuda_toolkit_vs_driver", "node_driver_vs_torch_cuda"]),
    ({**GOOD_GPU, "vllm__gpu__torch": "2.13.0"}, {}, ["vllm_torch_pair"]),
    ({**GOOD_GPU, "vllm__gpu__version": "0.99.0"}, {}, ["vllm_torch_pair"]),
    ({**GOOD_GPU, "vllm__gpu__torch_cuda": "12.8"}, {}, ["torch_cuda_build"]),
    ({**GOOD_GPU, "nvidia_driver__version": "570.195.03"}, {},
     ["cuda_toolkit_vs_driver", "driver_branch_version", "pinned_driver_vs_torch_cuda"]),
    ({"vllm__cpu__torch": "2.13.0"}, {"profile": "cpu"}, ["cpu_torch_build", "vllm_torch_pair"]),
    (GOOD_GPU, {"gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}]}, []),
    (GOOD_GPU, {"gpus": [{"index": 0, "name": "Tesla V100-PCIE-16GB"}]}, ["gpu_arch_vs_cuda"]),
    (GOOD_GPU, {"gpus": [{"index": 0, "name": "NVIDIA B200", "compute_cap": "10.0"}]}, []),
])
def test_matrix(changes, kwargs, expected):
    assert rules(check(versions(**changes), **kwargs)) == expected


def test_blackwell_needs_cuda_128_and_r570():
    v = versions(**{**GOOD_GPU, "vllm__gpu__torch_cuda": "12.6", "vllm__gpu__version": "0.33.0"})
    found = check(v, driver_version="560.35.03",
                  gpus=[{"index": 0, "name": "NVIDIA GeForce RTX 5090", "compute_cap": "12.0"}])
    assert "gpu_arch_vs_cuda" in rules(found) and "gpu_arch_vs_driver" in rules(found)
    msg = next(v.message for v in found if v.rule == "gpu_arch_vs_cuda")
    assert "blackwell" in msg and "12.8" in msg


def test_ada_name_not_mistaken_for_ampere():
    from vllm_deploy.compat import gpu_architecture
    assert gpu_architecture({"name": "NVIDIA RTX 6000 Ada Generation"})["name"] == "ada"
    assert gpu_architecture({"name": "NVIDIA L40S"})["name"] == "ada"
    assert gpu_architecture({"name": "NVIDIA RTX A6000"})["name"] == "ampere"
