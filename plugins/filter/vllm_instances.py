"""Filters for the inventory and the instance records: validation of a host's inputs (models, instances,
fleet-wide values, switches, renamed variables, pins), the records the planner builds, and how they are
rendered (systemd unit, Compose file, the gate's command line).

Registered by @_filter (plugins/plugin_utils/_filters.py); an error names the filter."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_deploy.fleet.plugins.plugin_utils._filters import FilterRegistry, expect
from vllm_deploy import containers, instances, models

_filter = FilterRegistry()


@_filter
def vllm_inventory_errors(models, vllm_instances, host="", gpus=None, fleet=None, mig_devices=None, mig_gpus=None):
    """Every problem with a host's vllm_models / vllm_instances, each naming the variable and the fix."""
    expect(host, (str,), "host")
    expect(gpus, (list,), "gpus")
    expect(fleet, (dict,), "fleet")
    expect(mig_devices, (list,), "mig_devices")
    expect(mig_gpus, (list,), "mig_gpus")
    return instances.validate_inventory(models, vllm_instances, host=host, gpus=gpus, fleet=fleet,
                                        mig_devices=mig_devices, mig_gpus=mig_gpus)


@_filter
def vllm_fleet_errors(values, host=""):
    """Every problem with a host's fleet-wide inputs (vllm_bind, vllm_engine, vllm_versions_override)."""
    expect(values, (dict,), "the fleet-wide variables")
    expect(host, (str,), "host")
    return instances.validate_fleet(values or {}, host=host)


@_filter
def vllm_bool_switch_names(roles_dir):
    """Every boolean switch (options declared type bool in the roles' argument_specs)."""
    from vllm_deploy import switches

    expect(roles_dir, (str,), "roles_dir")
    return switches.bool_switch_names(roles_dir)


@_filter
def vllm_switch_errors(values, host=""):
    """One line per boolean switch set to something that is not a boolean."""
    from vllm_deploy import switches

    expect(values, (dict,), "values")
    expect(host, (str,), "host")
    return switches.switch_errors(values or {}, host)


@_filter
def vllm_renamed_errors(defined, host=""):
    """One line per variable set under a name vllm-deploy no longer reads (renamed)."""
    from vllm_deploy import switches

    expect(defined, (list,), "defined")
    expect(host, (str,), "host")
    return switches.renamed_errors(list(defined or []), host)


@_filter
def vllm_pinned_versions(override=None):
    """The pins of vllm_deploy/data/versions.yaml with an inventory's overrides merged in (recursively)."""
    from vllm_deploy import compat

    expect(override, (dict,), "vllm_versions_override")
    return compat.pinned_versions(override or {})


@_filter
def vllm_compat_pin_violations(versions, engine="auto", driver_install=False, cuda_toolkit_install=False,
                               gpu_instances=False):
    """The pin-only compatibility rules for one host (before facts), each as "[rule] message"."""
    from vllm_deploy import compat

    if not isinstance(versions, dict):
        raise AnsibleFilterError(f"vllm_compat_pin_violations: expects the versions mapping, got {type(versions).__name__}")
    return [str(v) for v in compat.pin_gate(versions, engine=str(engine), driver_install=bool(driver_install),
                                            cuda_toolkit_install=bool(cuda_toolkit_install),
                                            gpu_instances=bool(gpu_instances))]


@_filter
def vllm_build_instances(vllm_instances, models, gpu_facts, model_facts, defaults):
    """The instance records (flags planned for the node's GPUs or CPU KV space) that the templates render."""
    return instances.build_instances(
        vllm_instances, models, gpu_facts=gpu_facts or {}, model_facts=model_facts or {}, defaults=defaults
    )


@_filter
def vllm_models_used(vllm_instances, vllm_models):
    """The models this host's instances serve, once each, defaults filled in."""
    try:
        return models.models_used(vllm_instances, vllm_models)
    except KeyError as exc:
        raise AnsibleFilterError(f"vllm_models_used: instance references unknown model {exc}") from exc


@_filter
def vllm_tiny_model_argv(model, python, script):
    """argv that generates a `source: generate` model."""
    return models.generate_argv(model, python, script)


@_filter
def vllm_model_facts(slurped, found):
    """{model: {config, weights_bytes}} from the slurp and find loop results."""
    return models.model_facts(slurped, found)


@_filter
def vllm_gate_argv(record, helper_dir, config_dir, timeout, prompt=None):
    """The deploy gate's command line for an instance record (one owner: vllm_deploy.instances)."""
    return instances.gate_argv(record, helper_dir, config_dir, timeout, prompt)


@_filter
def vllm_gate_logs_argv(record, helper_dir, since=None, lines=None):
    """The command line that prints an instance's engine log since a moment (or its last lines)."""
    return instances.gate_logs_argv(record, helper_dir, since, lines)


@_filter
def vllm_systemd_argv(argv):
    """argv quoted for a systemd ExecStart= line."""
    if not isinstance(argv, list):
        raise AnsibleFilterError(f"vllm_systemd_argv: expects a list, got {type(argv).__name__}")
    return instances.systemd_quote([str(a) for a in argv])


@_filter
def vllm_systemd_environment(key, value):
    """A unit's `Environment=` assignment for one variable, quoted; a control character is refused."""
    return instances.systemd_environment(key, value)


@_filter
def vllm_container_args(record):
    """The record's argv for the image's ENTRYPOINT (Compose `command:`)."""
    return containers.container_args(record)


@_filter
def vllm_container_env(record):
    """The record's environment as the container gets it (Compose `environment:`)."""
    return containers.container_env(record)


@_filter
def vllm_compose_escape(value):
    """A value with every `$` doubled, as a Compose file must write a literal dollar sign."""
    return containers.compose_escape(value)


@_filter
def vllm_device_ids(record):
    """The record's GPUs as Compose `device_ids` strings."""
    return containers.device_ids(record)


class FilterModule:
    def filters(self):
        return _filter.filters()
