"""The driver/CUDA/torch/vLLM gate, table-driven. Expected driver→CUDA values come from the real
nvidia-smi captures' own "CUDA Version" header (tests/fixtures/calibration/nvidia-smi/*.meta.yaml)."""

from __future__ import annotations

import copy

import pytest

from vllm_deploy.compat import check, load_versions, max_cuda_for_driver, min_driver_for_cuda, torch_matches


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


def test_shipped_pins_are_coherent_for_gpu_nodes():
    # versions.yaml ships NVIDIA's 580 branch with the CUDA 13.0 torch.
    assert check(load_versions(), profile="gpu") == []


def test_debian_535_with_cuda13_torch_is_refused_for_gpu_nodes():
    # Debian's 535 driver with a CUDA 13.0 torch — impossible on a GPU node.
    found = check(versions(nvidia_driver__source="debian"), profile="gpu")
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


def test_debian_toolkit_is_checked_as_cuda_11():
    # Debian's nvidia-cuda-toolkit 11.8 runs on 535; NVIDIA's 13.0 toolkit does not.
    debian = versions(nvidia_driver__source="debian")
    assert "cuda_toolkit_vs_driver" not in rules(check(debian, profile="gpu"))
    repo_toolkit = versions(nvidia_driver__source="debian", cuda_toolkit__source="nvidia_repo")
    assert "cuda_toolkit_vs_driver" in rules(check(repo_toolkit, profile="gpu"))


DEBIAN_535 = {"nvidia_driver__source": "debian"}


@pytest.mark.parametrize("changes,kwargs,expected", [
    # The driver-upgrade scenario: Debian's 535 serving with the CPU build is accepted.
    (DEBIAN_535, {"engine": "cpu", "driver_install": True}, []),
    # ...but not with the GPU build: the pinned driver cannot run CUDA 13.
    (DEBIAN_535, {"engine": "gpu"}, ["pinned_driver_vs_torch_cuda"]),
    # auto + a driver to install (or instances pinning GPUs) means the GPU build is intended.
    (DEBIAN_535, {"engine": "auto", "driver_install": True}, ["pinned_driver_vs_torch_cuda"]),
    (DEBIAN_535, {"engine": "auto", "gpu_instances": True}, ["pinned_driver_vs_torch_cuda"]),
    # auto without GPU intent: nothing GPU-specific is known yet (node_gate checks after facts).
    (DEBIAN_535, {"engine": "auto"}, []),
    # The toolkit rule counts only where the toolkit is installed, whatever the engine.
    ({**DEBIAN_535, "cuda_toolkit__source": "nvidia_repo"}, {"engine": "cpu", "driver_install": True}, []),
    ({**DEBIAN_535, "cuda_toolkit__source": "nvidia_repo"},
     {"engine": "cpu", "driver_install": True, "cuda_toolkit_install": True}, ["cuda_toolkit_vs_driver"]),
    # A branch/version typo is refused even on a CPU-serving node that installs the driver.
    ({"nvidia_driver__version": "570.195.03"}, {"engine": "cpu", "driver_install": True}, ["driver_branch_version"]),
    ({}, {"engine": "gpu", "cuda_toolkit_install": True}, []),
])
def test_pin_gate(changes, kwargs, expected):
    from vllm_deploy.compat import pin_gate
    assert rules(pin_gate(versions(**changes), **kwargs)) == expected


@pytest.mark.parametrize("engine,driver,gpus,expected", [
    ("gpu", "580.82.07", [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}], []),
    ("gpu", "535.183.01", [{"index": 0, "name": "NVIDIA GeForce RTX 4090"}], ["node_driver_vs_torch_cuda"]),
    ("gpu", "580.82.07", [{"index": 0, "name": "Tesla V100-PCIE-16GB"}], ["gpu_arch_vs_cuda"]),
    ("cpu", "535.183.01", [{"index": 0, "name": "NVIDIA GeForce RTX 4090"}], []),
])
def test_node_gate(engine, driver, gpus, expected):
    from vllm_deploy.compat import node_gate
    assert rules(node_gate(load_versions(), engine=engine, driver_version=driver, gpus=gpus)) == expected


@pytest.mark.parametrize("installed, pin, matches", [
    ("2.14.0+cu130", "2.14.0", True),     # PyPI's CUDA torch carries its CUDA as a local label
    ("2.13.0+cpu", "2.13.0+cpu", True),
    ("2.13.0", "2.13.0+cpu", False),      # a labelled pin wants that build, not the default one
    ("2.14.1", "2.14.0", False),
    ("2.14.0", "2.14.0", True),
    ("2.13.0+cu128", "2.13.0+cpu", False),
    ("2.14.0+cu130\n", "2.14.0", True),   # a command's stdout with its newline
    ("", "2.14.0", False),                # torch not installed (the version read failed)
    (None, "2.14.0", False),
])
def test_torch_matches(installed, pin, matches):
    assert torch_matches(installed, pin) is matches


@pytest.mark.parametrize("pin", ["", None])
def test_torch_matches_needs_a_pin(pin):
    with pytest.raises(ValueError, match="torch pin"):
        torch_matches("2.14.0", pin)
