"""Ansible filters over the vllm_deploy package: plain functions, AnsibleFilterError on bad input."""

from __future__ import annotations

import os
import sys

from ansible.errors import AnsibleFilterError

# The package of this plugin's own checkout wins over an installed one: a second worktree run with
# another checkout's venv (or an older `pip install`) must not filter with stale rules.
_CHECKOUT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
if os.path.isfile(os.path.join(_CHECKOUT, "vllm_deploy", "__init__.py")) and _CHECKOUT not in sys.path:
    sys.path.insert(0, _CHECKOUT)



from vllm_deploy import instances, ladder, models  # noqa: E402
from vllm_deploy import containers, instances, models  # noqa: E402


def vllm_inventory_errors(models, vllm_instances, host="", gpus=None):
    """Every problem with a host's vllm_models / vllm_instances, each naming the variable and the fix."""
    return instances.validate_inventory(models, vllm_instances, host=host, gpus=gpus)


def vllm_build_instances(vllm_instances, models, gpu_facts, model_facts, defaults):
    """The instance records (flags planned for the node's GPUs or CPU KV space) that the templates render."""
    try:
        return instances.build_instances(
            vllm_instances, models, gpu_facts=gpu_facts or {}, model_facts=model_facts or {}, defaults=defaults
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_build_instances: {exc}") from exc


def vllm_systemd_argv(argv):
    """argv quoted for a systemd ExecStart= line."""
    if not isinstance(argv, list):
        raise AnsibleFilterError(f"vllm_systemd_argv expects a list, got {type(argv).__name__}")
    return instances.systemd_quote([str(a) for a in argv])


def vllm_gpu_facts(stdout, stderr="", rc=0, present=True):
    """nvidia-smi --query-gpu CSV (or its failure) → gpu_count, gpus, driver_version, profile, error."""
    from vllm_deploy import nvidia_smi

    return nvidia_smi.gpu_facts(stdout or "", stderr or "", int(rc), bool(present))


def vllm_models_used(vllm_instances, vllm_models):
    """The models this host's instances serve, once each, defaults filled in."""
    try:
        return models.models_used(vllm_instances, vllm_models)
    except KeyError as exc:
        raise AnsibleFilterError(f"vllm_models_used: instance references unknown model {exc}") from exc


def vllm_tiny_model_argv(model, python, script):
    """argv that generates a `source: generate` model."""
    return models.generate_argv(model, python, script)


def vllm_model_facts(slurped, found):
    """{model: {config, weights_bytes}} from the slurp and find loop results."""
    try:
        return models.model_facts(slurped, found)
    except (KeyError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_model_facts: {exc}") from exc


def vllm_container_args(record):
    """The record's argv for the image's ENTRYPOINT (Compose `command:`)."""
    try:
        return containers.container_args(record)
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_container_args: {exc}") from exc


def vllm_container_env(record):
    """The record's environment as the container gets it (Compose `environment:`)."""
    try:
        return containers.container_env(record)
    except (KeyError, AttributeError) as exc:
        raise AnsibleFilterError(f"vllm_container_env: {exc}") from exc


def vllm_device_ids(record):
    """The record's GPUs as Compose `device_ids` strings."""
    try:
        return containers.device_ids(record)
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"vllm_device_ids: {exc}") from exc


def vllm_diagnose(text):
    """A vLLM server log → {category, summary, figures, fix}."""
    from vllm_deploy import diagnose

    return diagnose.diagnose(text or "").to_dict()


def vllm_degrade_step(flags, diagnosis, engine, floors=None, tried=None):
    """The degrade ladder's next rung for a failed start (None when not about memory or exhausted)."""
    return ladder.next_step(flags or {}, diagnosis or {}, engine=engine, floors=floors, tried=tried)


def vllm_record_degraded(record, flags):
    """The instance record a degrade-ladder rung runs: other flags, argv recomputed, marked degraded —
    the same record a later run rebuilds from the ladder's saved outcome, so the unit does not change."""
    return instances.apply_degraded(record, {"requested_flags": record["flags"], "flags": flags})


def vllm_preflight_problems(records, gpu_facts, compute_apps, pid_units, vllm_version=None):
    """Foreign processes and short free memory on each instance's pinned GPUs → [problem dicts].

    compute_apps / pid_units: the registered results (or stdout) of the role's nvidia-smi and ps runs;
    vllm_version picks vLLM's default gpu_memory_utilization where the flags leave it open.
    """
    from vllm_deploy import nvidia_smi, preflight

    try:
        return [p.to_dict() for p in preflight.problems_from_results(
            records or [], gpu_facts or {}, compute_apps, pid_units, vllm_version=vllm_version or None)]
    except (nvidia_smi.NvidiaSmiParseError, KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_preflight_problems: {exc}") from exc


def vllm_preflight_alloc_argv(records, gpu_facts, python, alloc_mib=256, timeout_s=300):
    """argv of the bare CUDA allocation on every pinned GPU, through the node's venv."""
    from vllm_deploy import preflight

    indexes = preflight.alloc_gpu_indexes(records or [], (gpu_facts or {}).get("gpus", []))
    return preflight.alloc_argv(str(python), indexes, int(alloc_mib), int(timeout_s)) if indexes else []


def vllm_preflight_alloc_problems(result, records, gpu_facts, alloc_mib=256, timeout_s=300):
    """The bare run's registered result → [problem dicts] for the GPUs that failed or never answered."""
    from vllm_deploy import preflight

    result = result or {}
    return [p.to_dict() for p in preflight.alloc_problems(
        records or [], (gpu_facts or {}).get("gpus", []), result.get("stdout", ""), result.get("stderr", ""),
        int(result.get("rc", 0) or 0), int(alloc_mib), int(timeout_s))]


def vllm_preflight_lines(problems, host):
    """Problems → one line each: host, instance, GPU, the numbers, the fix."""
    from vllm_deploy import preflight

    try:
        return [preflight.format_problem(p, str(host)) for p in problems or []]
    except KeyError as exc:
        raise AnsibleFilterError(f"vllm_preflight_lines: a problem lacks {exc}") from exc


def vllm_degraded_outcomes(slurped):
    """{instance: {requested_flags, flags}} from the slurped /etc/vllm/<instance>.degraded.json files."""
    return models.degraded_outcomes(slurped or [])


def vllm_compat_pin_violations(versions, engine="auto", driver_install=False, cuda_toolkit_install=False,
                               gpu_instances=False):
    """The pin-only compatibility rules for one host (before facts), each as "[rule] message"."""
    from vllm_deploy import compat

    if not isinstance(versions, dict):
        raise AnsibleFilterError(f"vllm_compat_pin_violations expects the versions mapping, got {type(versions).__name__}")
    return [str(v) for v in compat.pin_gate(versions, engine=str(engine), driver_install=bool(driver_install),
                                            cuda_toolkit_install=bool(cuda_toolkit_install),
                                            gpu_instances=bool(gpu_instances))]


def vllm_compat_node_violations(versions, engine, gpu_facts, cuda_toolkit_install=False):
    """The node's driver and GPUs (gpu_facts) against the GPU build's CUDA, each as "[rule] message"."""
    from vllm_deploy import compat

    facts = gpu_facts or {}
    return [str(v) for v in compat.node_gate(versions, engine=str(engine), driver_version=facts.get("driver_version"),
                                             gpus=facts.get("gpus") or [],
                                             cuda_toolkit_install=bool(cuda_toolkit_install))]


def vllm_driver_state(dpkg_stdout, pinned_version, anchor="nvidia-smi"):
    """dpkg-query output → installed/at-pin/held driver packages and whether this is an upgrade."""
    from vllm_deploy import driver

    try:
        return driver.driver_state(dpkg_stdout or "", pinned_version, anchor=anchor)
    except driver.DriverStateError as exc:
        raise AnsibleFilterError(f"vllm_driver_state: {exc}") from exc


def vllm_nvidia_repo_distro(distribution, major_version):
    """'Ubuntu', '22' → 'ubuntu2204' (the directory in NVIDIA's CUDA apt repository)."""
    from vllm_deploy import driver

    try:
        return driver.nvidia_repo_distro(distribution, major_version)
    except driver.DriverStateError as exc:
        raise AnsibleFilterError(f"vllm_nvidia_repo_distro: {exc}") from exc


def vllm_upstream_version(version):
    """'535.261.03-1' → '535.261.03' (what nvidia-smi reports as driver_version)."""
    from vllm_deploy import driver

    return driver.upstream_version(version)


def _hostvar(hostvars, host, name, default=None):
    """One variable of another host (templated), or default when that host does not define it."""
    try:
        value = hostvars[host].get(name, default)
    except (KeyError, AttributeError):
        return default
    return default if value is None else value


def vllm_gateway_backends(hostvars, hosts, gateway_host):
    """HAProxy's backend table: every instance record (vllm_plan_instances) of `hosts`, per served name."""
    from vllm_deploy import gateway

    fleet = {}
    missing = []
    for host in hosts or []:
        records = _hostvar(hostvars, host, "vllm_plan_instances")
        if records is None:
            missing.append(host)
            continue
        facts = _hostvar(hostvars, host, "ansible_facts", {}) or {}
        address = _hostvar(hostvars, host, "vllm_gateway_backend_address") or (facts.get("default_ipv4") or {}).get("address", "")
        fleet[host] = {"instances": list(records), "address": address}
    if missing:
        raise AnsibleFilterError(
            f"{gateway_host}: no instance records for {', '.join(missing)} (vllm_plan_instances) — run the deploy on every "
            f"serving host together with the gateway (e.g. -l gpu-nodes:vllm_gateway), or the gateway would drop their instances")
    try:
        return gateway.backend_table(fleet, str(gateway_host))
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"vllm_gateway_backends: an instance record lacks {exc}") from exc
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def vllm_gateway_engine_key_errors(hostvars, hosts, engine_key):
    """Hosts whose engines expect another key than the one the gateway adds (values never shown)."""
    from vllm_deploy import gateway

    keys = {h: str(_hostvar(hostvars, h, "vllm_api_key") or _hostvar(hostvars, h, "vault_vllm_api_key", "")) for h in hosts or []}
    return gateway.engine_key_mismatches(keys, str(engine_key or ""))


def vllm_gateway_models_list(table):
    """The body of the gateway's GET /v1/models."""
    from vllm_deploy import gateway

    return gateway.models_list(table or [])


def vllm_gateway_key_table(keys):
    """Client keys with their limits filled in (0 = no limit)."""
    from vllm_deploy import gateway

    try:
        return gateway.key_table(keys or [])
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_gateway_key_table: a key lacks {exc} (run the validation play)") from exc


def vllm_gateway_server_ref(record, host):
    """`backend/server` of an instance in the gateway's runtime API."""
    from vllm_deploy import gateway

    try:
        return gateway.server_ref(record, str(host))
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"vllm_gateway_server_ref: the instance record lacks {exc}") from exc


def vllm_gateway_node_records(vllm_instances, vllm_models):
    """{name, model: {name, served_name}} per instance, from the inventory (rebuild-node drains before planning)."""
    from vllm_deploy import gateway

    try:
        return gateway.node_records(vllm_instances or [], vllm_models or {})
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"vllm_gateway_node_records: {exc}") from exc


def vllm_gateway_exposure_errors(vllm_instances, default_bind, api_key, host=""):
    """Engines bound to 0.0.0.0 or :: without an API key, one line each."""
    from vllm_deploy import gateway

    return gateway.validate_exposure(vllm_instances, str(default_bind), str(api_key or ""), host=str(host))


def vllm_gateway_served_name_errors(vllm_models, host=""):
    """Served names the gateway cannot route on."""
    from vllm_deploy import gateway

    return gateway.validate_served_names(vllm_models, host=str(host))


def vllm_gateway_errors(keys, enabled, group, groups, max_body_bytes, max_tokens, drain_timeout, host=""):
    """The gateway's inputs: its group, the keys and their limits, body and max_tokens limits, drain timeout."""
    from vllm_deploy import gateway

    return gateway.validate_gateway(enabled=bool(enabled), group=str(group), groups=dict(groups or {}), keys=keys,
                                    max_body_bytes=max_body_bytes, max_tokens=max_tokens,
                                    drain_timeout=drain_timeout, host=str(host))


class FilterModule:
    def filters(self):
        return {
            "vllm_inventory_errors": vllm_inventory_errors,
            "vllm_build_instances": vllm_build_instances,
            "vllm_systemd_argv": vllm_systemd_argv,
            "vllm_gpu_facts": vllm_gpu_facts,
            "vllm_diagnose": vllm_diagnose,
            "vllm_models_used": vllm_models_used,
            "vllm_tiny_model_argv": vllm_tiny_model_argv,
            "vllm_model_facts": vllm_model_facts,
            "vllm_degrade_step": vllm_degrade_step,
            "vllm_record_degraded": vllm_record_degraded,
            "vllm_degraded_outcomes": vllm_degraded_outcomes,
            "vllm_preflight_problems": vllm_preflight_problems,
            "vllm_preflight_alloc_argv": vllm_preflight_alloc_argv,
            "vllm_preflight_alloc_problems": vllm_preflight_alloc_problems,
            "vllm_preflight_lines": vllm_preflight_lines,
            "vllm_compat_pin_violations": vllm_compat_pin_violations,
            "vllm_compat_node_violations": vllm_compat_node_violations,
            "vllm_driver_state": vllm_driver_state,
            "vllm_nvidia_repo_distro": vllm_nvidia_repo_distro,
            "vllm_upstream_version": vllm_upstream_version,
            "vllm_container_args": vllm_container_args,
            "vllm_container_env": vllm_container_env,
            "vllm_device_ids": vllm_device_ids,
            "vllm_gateway_backends": vllm_gateway_backends,
            "vllm_gateway_engine_key_errors": vllm_gateway_engine_key_errors,
            "vllm_gateway_models_list": vllm_gateway_models_list,
            "vllm_gateway_key_table": vllm_gateway_key_table,
            "vllm_gateway_server_ref": vllm_gateway_server_ref,
            "vllm_gateway_node_records": vllm_gateway_node_records,
            "vllm_gateway_exposure_errors": vllm_gateway_exposure_errors,
            "vllm_gateway_served_name_errors": vllm_gateway_served_name_errors,
            "vllm_gateway_errors": vllm_gateway_errors,
        }
