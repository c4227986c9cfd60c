"""Ansible filters over the vllm_deploy package: plain functions, AnsibleFilterError on bad input."""

from __future__ import annotations

import os
import sys

from ansible.errors import AnsibleFilterError

try:
    import vllm_deploy  # noqa: F401  (installed in the controller venv by `make setup`)
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

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
            "vllm_container_args": vllm_container_args,
            "vllm_container_env": vllm_container_env,
            "vllm_device_ids": vllm_device_ids,
        }
