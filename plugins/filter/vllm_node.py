"""Filters for what is on a node: GPU facts from nvidia-smi, the driver's packages, the compatibility of
the node with the pins, the preflight's GPU checks, the cores a container node owns.

Registered by @_filter (plugins/plugin_utils/_filters.py); an error names the filter."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_deploy.fleet.plugins.plugin_utils._filters import FilterRegistry, expect

_filter = FilterRegistry()


@_filter
def vllm_gpu_facts(stdout, stderr="", rc=0, present=True, list_stdout=None, table_stdout=None):
    """nvidia-smi --query-gpu CSV (or its failure), and optionally `nvidia-smi -L` with the plain table →
    gpu_count, gpus, driver_version, profile, error, mig_devices, mig_gpus."""
    from vllm_deploy import nvidia_smi

    return nvidia_smi.gpu_facts(stdout or "", stderr or "", int(rc), bool(present), list_stdout or None,
                                table_stdout or None)


@_filter
def vllm_nvidia_smi_argv(query, binary="nvidia-smi"):
    """'gpus' / 'compute-apps' → the nvidia-smi CSV query's argv, in the field order the parsers read."""
    from vllm_deploy import nvidia_smi

    expect(query, (str,), "the query")
    return nvidia_smi.query_argv(query, binary)


@_filter
def vllm_nvidia_smi_fields(query):
    """'gpus' / 'compute-apps' / 'metrics' → the fields of that query, in its CSV column order."""
    from vllm_deploy import nvidia_smi

    expect(query, (str,), "the query")
    return nvidia_smi.query_fields(query)


@_filter
def vllm_compat_node_violations(versions, engine, gpu_facts, cuda_toolkit_install=False):
    """The node's driver and GPUs (gpu_facts) against the GPU build's CUDA, each as "[rule] message"."""
    from vllm_deploy import compat

    facts = gpu_facts or {}
    return [str(v) for v in compat.node_gate(versions, engine=str(engine), driver_version=facts.get("driver_version"),
                                             gpus=facts.get("gpus") or [],
                                             cuda_toolkit_install=bool(cuda_toolkit_install))]


@_filter
def vllm_driver_state(dpkg_stdout, pinned_version, anchor="nvidia-smi"):
    """dpkg-query output → installed/at-pin/held driver packages and whether this is an upgrade."""
    from vllm_deploy import driver

    return driver.driver_state(dpkg_stdout or "", pinned_version, anchor=anchor)


@_filter
def vllm_nvidia_repo_distro(distribution, major_version):
    """'Ubuntu', '22' → 'ubuntu2204' (the directory in NVIDIA's CUDA apt repository)."""
    from vllm_deploy import driver

    return driver.nvidia_repo_distro(distribution, major_version)


@_filter
def vllm_upstream_version(version):
    """'535.261.03-1' → '535.261.03' (what nvidia-smi reports as driver_version)."""
    from vllm_deploy import driver

    expect(version, (str, int, float), "version")
    return driver.upstream_version(version)


@_filter
def vllm_dpkg_query_argv(packages):
    """Package names or patterns → argv of `dpkg-query -W` in the format vllm_driver_state reads."""
    from vllm_deploy import driver

    return driver.dpkg_query_argv(packages)


@_filter
def vllm_dpkg_installed_version(dpkg_stdout, package):
    """vllm_dpkg_query_argv output → the installed version of one package ("" when not installed)."""
    from vllm_deploy import driver

    expect(dpkg_stdout, (str,), "the dpkg-query output")
    return driver.installed_version(dpkg_stdout or "", str(package))


@_filter
def vllm_torch_matches(installed, pin):
    """Whether the installed torch version is the pin (a pin without a local label ignores +cu130)."""
    from vllm_deploy import compat

    expect(installed, (str,), "the installed torch version")
    return compat.torch_matches(installed, pin)


@_filter
def vllm_preflight_problems(records, gpu_facts, compute_apps, pid_units, vllm_version=None):
    """Foreign processes and short free memory on each instance's pinned GPUs → [problem dicts].

    compute_apps / pid_units: the registered results (or stdout) of the role's nvidia-smi and ps runs;
    vllm_version picks vLLM's default gpu_memory_utilization where the flags leave it open.
    """
    from vllm_deploy import preflight

    return [p.to_dict() for p in preflight.problems_from_results(
        records or [], gpu_facts or {}, compute_apps, pid_units, vllm_version=vllm_version or None)]


@_filter
def vllm_preflight_alloc_argv(records, gpu_facts, python, alloc_mib=256, timeout_s=300):
    """argv of the bare CUDA allocation on every pinned GPU, through the node's venv."""
    from vllm_deploy import preflight

    indexes = preflight.alloc_gpu_indexes(records or [], (gpu_facts or {}).get("gpus", []))
    return preflight.alloc_argv(str(python), indexes, int(alloc_mib), int(timeout_s)) if indexes else []


@_filter
def vllm_preflight_alloc_problems(result, records, gpu_facts, alloc_mib=256, timeout_s=300):
    """The bare run's registered result → [problem dicts] for the GPUs that failed or never answered."""
    from vllm_deploy import preflight

    result = result or {}
    return [p.to_dict() for p in preflight.alloc_problems(
        records or [], (gpu_facts or {}).get("gpus", []), result.get("stdout", ""), result.get("stderr", ""),
        int(result.get("rc", 0) or 0), int(alloc_mib), int(timeout_s))]


@_filter
def vllm_preflight_lines(problems, host):
    """Problems → one line each: host, instance, GPU, the numbers, the fix."""
    from vllm_deploy import preflight

    try:
        return [preflight.format_problem(p, str(host)) for p in problems or []]
    except KeyError as exc:
        raise AnsibleFilterError(f"vllm_preflight_lines: a problem lacks {exc}") from exc


@_filter
def vllm_node_cpu_share(allowed, nodes, index):
    """The cores container node `index` of `nodes` on one machine owns (Docker's --cpuset-cpus), from the
    machine's allowed core list ('0-3' or [0, 1, 2, 3])."""
    from vllm_deploy import cpus

    expect(allowed, (str, list), "the machine's cores")
    return cpus.node_share(allowed, int(nodes), int(index))


class FilterModule:
    def filters(self):
        return _filter.filters()
