"""Inventory validation and the one *instance* record that systemd and Compose both render.

The inventory describes models and instances; this module checks them (before any host is touched)
and turns them, together with a node's GPU facts and each model's config.json, into records:

    {name, unit, supervisor, gate_target, model: {path, served_name}, devices, port, bind, flags, env, argv, plan}

Everything downstream (unit template, Compose template, verify role) reads only these records.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,47}$")
FLAG_RE = re.compile(r"^[a-z][a-z0-9_]*$")

# Flags the seed posts recommend that current vLLM rejects or ignores; refusing them here is kinder
# than a unit that crash-loops on "unrecognized arguments".
STALE_FLAGS = {
    "swap_space": "vLLM's V1 engine never used it and current vLLM rejects --swap-space; remove it",
    "tokenizer_pool_size": "removed from vLLM by 0.10; remove it",
    "tokenizer_pool_type": "removed from vLLM by 0.10; remove it",
}
STALE_VALUES = {
    ("kv_cache_dtype", "fp16"): "not a vLLM value: 'auto' already uses the model dtype; use auto, fp8, fp8_e4m3 or fp8_e5m2",
    ("kv_cache_dtype", "fp32"): "not a vLLM value: 'auto' already uses the model dtype; use auto, fp8, fp8_e4m3 or fp8_e5m2",
}
# Set by the deploy itself from the instance record; pinning them under `flags` would fight the record.
RESERVED_FLAGS = {
    "model": "set the model under vllm_models and reference it with `model:`",
    "served_model_name": "set `served_name` on the model in vllm_models",
    "host": "set `bind` on the instance",
    "port": "set `port` on the instance",
    "api_key": "put the key in vault_vllm_api_key (it is passed through a 0600 environment file)",
}
MODEL_SOURCES = ("present", "generate")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_gpu_ref(value: Any) -> bool:
    return (_is_int(value) and value >= 0) or (isinstance(value, str) and value.startswith(("GPU-", "MIG-")))


def validate_inventory(models: Any, instances: Any, *, host: str = "", gpus: list[dict] | None = None) -> list[str]:
    """Return every problem with a host's vllm_models / vllm_instances, each naming the variable and the fix.

    With `gpus` (the node's GPU facts) it also checks that each pinned GPU exists.
    """
    where = f"{host}: " if host else ""
    errors: list[str] = []

    def err(var: str, problem: str, fix: str) -> None:
        errors.append(f"{where}{var}: {problem} — {fix}")

    if not isinstance(models, dict):
        err("vllm_models", f"must be a mapping of model name to settings, got {type(models).__name__}",
            "see inventory/example/group_vars/gpu-nodes/vllm.yml")
        models = {}
    for mname, model in models.items():
        var = f"vllm_models.{mname}"
        if not isinstance(model, dict):
            err(var, "must be a mapping", "give at least `path: /srv/models/NAME`")
            continue
        path = model.get("path")
        if not isinstance(path, str) or not path.startswith("/"):
            err(f"{var}.path", f"must be an absolute path on the node, got {path!r}", "e.g. path: /srv/models/Qwen2.5-7B-Instruct")
        source = model.get("source", "present")
        if source not in MODEL_SOURCES:
            err(f"{var}.source", f"unknown source {source!r}", f"use one of {', '.join(MODEL_SOURCES)}")
        served = model.get("served_name", mname)
        if not isinstance(served, str) or not served or any(c.isspace() for c in served):
            err(f"{var}.served_name", f"must be a non-empty name without spaces, got {served!r}", "e.g. served_name: qwen2.5-7b")

    if not isinstance(instances, list):
        err("vllm_instances", f"must be a list of instances, got {type(instances).__name__}",
            "e.g. vllm_instances: [{name: qwen-0, model: qwen7b, gpus: [0], port: 8000}]")
        return errors

    seen_names: dict[str, int] = {}
    seen_ports: dict[int, str] = {}
    seen_gpus: dict[Any, str] = {}
    gpu_indexes = {g.get("index") for g in gpus or []}
    gpu_uuids = {g.get("uuid") for g in gpus or []}
    for i, inst in enumerate(instances):
        var = f"vllm_instances[{i}]"
        if not isinstance(inst, dict):
            err(var, "must be a mapping", "give name, model, gpus and port")
            continue
        name = inst.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            err(f"{var}.name", f"{name!r} is not a valid instance name",
                "use lower-case letters, digits and dashes (it becomes the unit name vllm-NAME)")
        elif name in seen_names:
            err(f"{var}.name", f"{name!r} is used twice (also vllm_instances[{seen_names[name]}])", "give each instance its own name")
        else:
            seen_names[name] = i
        label = name if isinstance(name, str) else var

        model = inst.get("model")
        if model not in models:
            known = ", ".join(sorted(models)) or "none defined"
            err(f"{var}.model", f"{model!r} is not a key of vllm_models (known: {known})", "add it to vllm_models or fix the name")

        port = inst.get("port")
        if not _is_int(port) or not 1 <= port <= 65535:
            err(f"{var}.port", f"must be an integer 1-65535, got {port!r}", "e.g. port: 8000")
        elif port in seen_ports:
            err(f"{var}.port", f"port {port} is already used by instance {seen_ports[port]}", "give each instance on a host its own port")
        else:
            seen_ports[port] = label

        bind = inst.get("bind")
        if bind is not None:
            try:
                ipaddress.ip_address(bind)
            except (ValueError, TypeError):
                err(f"{var}.bind", f"{bind!r} is not an IP address", "use 127.0.0.1 (local only) or 0.0.0.0 (all interfaces)")

        devices = inst.get("gpus", [])
        if not isinstance(devices, list):
            err(f"{var}.gpus", f"must be a list of GPU indexes, got {devices!r}", "e.g. gpus: [0] or gpus: [0, 1]; [] on CPU nodes")
            devices = []
        for dev in devices:
            if not _is_gpu_ref(dev):
                err(f"{var}.gpus", f"{dev!r} is not a GPU index", "use integers as nvidia-smi numbers them, e.g. gpus: [0, 1], or GPU UUIDs")
                continue
            if dev in seen_gpus:
                err(f"{var}.gpus", f"GPU {dev} is already pinned to instance {seen_gpus[dev]}",
                    "give each instance its own GPUs (two vLLM engines on one GPU each claim gpu_memory_utilization of it)")
            else:
                seen_gpus[dev] = label
            if gpus is not None:
                known = dev in gpu_indexes if _is_int(dev) else dev in gpu_uuids
                if not known:
                    have = ", ".join(str(g.get("index")) for g in gpus) or "none (no GPU found)"
                    err(f"{var}.gpus", f"GPU {dev} does not exist on this node (nvidia-smi lists: {have})",
                        "pin GPUs the node has, or fix the node's driver if GPUs are missing")

        flags = inst.get("flags", {})
        if not isinstance(flags, dict):
            err(f"{var}.flags", f"must be a mapping of vLLM flags, got {flags!r}", "e.g. flags: {max_model_len: 8192}")
            flags = {}
        for flag, value in flags.items():
            if not isinstance(flag, str) or not FLAG_RE.match(flag):
                err(f"{var}.flags", f"{flag!r} is not a flag name", "use vLLM's argument names in snake_case, e.g. max_model_len")
            elif flag in RESERVED_FLAGS:
                err(f"{var}.flags.{flag}", "is set by the deploy itself", RESERVED_FLAGS[flag])
            elif STALE_FLAGS.get(flag):
                err(f"{var}.flags.{flag}", "is a stale flag", STALE_FLAGS[flag])
            elif (flag, value) in STALE_VALUES:
                err(f"{var}.flags.{flag}", f"{value!r} is rejected by vLLM", STALE_VALUES[(flag, value)])
        tp = flags.get("tensor_parallel_size", 1)
        pp = flags.get("pipeline_parallel_size", 1)
        if devices and _is_int(tp) and _is_int(pp) and "tensor_parallel_size" in flags and tp * pp != len(devices):
            err(f"{var}.flags.tensor_parallel_size", f"TP {tp} x PP {pp} = {tp * pp} GPUs but {len(devices)} are pinned",
                "pin exactly TP x PP GPUs, or drop tensor_parallel_size (it defaults to the number of pinned GPUs)")
        env = inst.get("env", {})
        if not isinstance(env, dict):
            err(f"{var}.env", f"must be a mapping of environment variables, got {env!r}", "e.g. env: {VLLM_LOGGING_LEVEL: DEBUG}")
        elif any(k in ("HF_TOKEN", "VLLM_API_KEY", "HUGGING_FACE_HUB_TOKEN") for k in env):
            err(f"{var}.env", "holds a secret in plain inventory", "put it in vault_hf_token / vault_vllm_api_key instead")
    return errors


def flags_to_argv(flags: dict[str, Any]) -> list[str]:
    """snake_case flags → vLLM's argv: True → bare flag, False/None → omitted, lists → repeated values."""
    argv: list[str] = []
    for key in sorted(flags):
        value = flags[key]
        opt = "--" + key.replace("_", "-")
        if value is True:
            argv.append(opt)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            argv.append(opt)
            argv.extend(str(v) for v in value)
        elif isinstance(value, dict):
            argv += [opt, json.dumps(value, sort_keys=True, separators=(",", ":"))]
        else:
            argv += [opt, str(value)]
    return argv


def systemd_quote(argv: list[str]) -> str:
    """Quote argv for a unit's ExecStart= (systemd splits on whitespace and quotes; `%` and `$` expand)."""
    out = []
    for arg in argv:
        arg = arg.replace("%", "%%").replace("$", "$$")
        if not arg or re.search(r"[\s\"'\\;]", arg):
            arg = '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
        out.append(arg)
    return " ".join(out)


def build_instance(
    inst: dict[str, Any],
    model: dict[str, Any],
    model_name: str,
    *,
    gpu_facts: dict[str, Any],
    plan: dict[str, Any] | None,
    defaults: dict[str, Any],
) -> dict[str, Any]:
    """One instance record. `plan` is presets.choose_flags' answer (flags + plan) or None for pinned flags only."""
    devices = list(inst.get("gpus", []))
    flags = dict(plan["flags"]) if plan else {}
    flags.update(inst.get("flags", {}))
    if devices and "tensor_parallel_size" not in inst.get("flags", {}):
        pp = int(flags.get("pipeline_parallel_size", 1))
        if len(devices) // pp > 1:
            flags["tensor_parallel_size"] = len(devices) // pp
        else:
            flags.pop("tensor_parallel_size", None)
    served = model.get("served_name", model_name)
    bind = inst.get("bind", defaults.get("bind", "127.0.0.1"))
    env = {
        "HF_HOME": defaults["hf_home"],
        "HF_HUB_OFFLINE": "1" if defaults.get("hf_hub_offline", True) else "0",
        "VLLM_CACHE_ROOT": defaults["cache_root"],
        "VLLM_NO_USAGE_STATS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    if devices:
        # Pin by index or UUID exactly as the inventory names them; CUDA accepts both. PCI bus order
        # makes CUDA's indexes the ones nvidia-smi (and the inventory) use, also on mixed-GPU nodes.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in devices)
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if defaults.get("engine") == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(inst.get("cpu_kv_cache_space_gib", defaults.get("cpu_kv_cache_space_gib", 1)))
    env.update({k: str(v) for k, v in inst.get("env", {}).items()})
    argv = [
        "-m", "vllm.entrypoints.openai.api_server",
        "--model", model["path"],
        "--served-model-name", served,
        "--host", bind,
        "--port", str(inst["port"]),
    ] + flags_to_argv(flags)
    unit = f"vllm-{inst['name']}"
    compose = defaults.get("mode") == "compose"
    return {
        "name": inst["name"],
        "unit": unit,
        # Who keeps the engine running, and what the gate watches for a crash loop: the unit itself,
        # or (Compose mode) the container of the Compose service the unit owns.
        "supervisor": "compose" if compose else "systemd",
        "gate_target": f"compose:{unit}/{unit}" if compose else unit,
        "model": {"name": model_name, "path": model["path"], "served_name": served},
        "devices": devices,
        "port": inst["port"],
        "bind": bind,
        "flags": flags,
        "env": dict(sorted(env.items())),
        "argv": argv,
        "plan": (plan or {}).get("plan", {}),
        "verdict": (plan or {}).get("verdict", "pinned"),
    }


def gate_url(record: dict[str, Any]) -> str:
    """Where the node itself reaches the instance (a wildcard bind is reached on loopback)."""
    host = record["bind"]
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{record['port']}"


def gate_argv(record: dict[str, Any], helper_dir: str, config_dir: str, timeout: Any, prompt: str | None = None) -> list[str]:
    """The deploy gate's command line for an instance (vllm-gate reads the API key from the 0600 env file)."""
    argv = [
        f"{helper_dir}/vllm-gate",
        "--unit", record["gate_target"],
        "--url", gate_url(record),
        "--model", record["model"]["served_name"],
        "--timeout", str(int(float(timeout))),
        "--env-file", f"{config_dir}/{record['name']}.env",
    ]
    if prompt is not None:
        argv += ["--prompt", str(prompt)]
    return argv


def gate_logs_argv(record: dict[str, Any], helper_dir: str, since: Any = None, lines: Any = None) -> list[str]:
    """The command line that prints the engine's own log (journal or container log), for the diagnosis."""
    argv = [f"{helper_dir}/vllm-gate", "--unit", record["gate_target"], "--logs"]
    if since not in (None, ""):
        argv += ["--since", str(since).strip()]
    if lines not in (None, ""):
        argv += ["--lines", str(int(lines))]
    return argv


def _device_for(inst: dict[str, Any], gpu_facts: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """What the planner sizes against: the pinned GPUs, or the CPU engine's KV space."""
    if defaults.get("engine") == "cpu":
        return {"kind": "cpu", "kv_cache_space_gib": float(inst.get("cpu_kv_cache_space_gib", defaults.get("cpu_kv_cache_space_gib", 1)))}
    by_ref = {g.get("index"): g for g in gpu_facts.get("gpus", [])}
    by_ref.update({g.get("uuid"): g for g in gpu_facts.get("gpus", [])})
    pinned = [by_ref[d] for d in inst.get("gpus", []) if d in by_ref]
    if not pinned:
        return {"kind": "none"}
    smallest = min(pinned, key=lambda g: g.get("memory_total_mib") or 0)
    # Planned against total memory only: free memory counts our own running instance as used, so
    # planning on it would shrink an instance on every redeploy. Free memory is checked by preflight,
    # which knows which processes are ours.
    return {
        "kind": "gpu",
        "name": smallest.get("name"),
        "memory_total_mib": smallest.get("memory_total_mib"),
        "count": len(pinned),
    }


def build_instances(
    instances: list[dict[str, Any]],
    models: dict[str, Any],
    *,
    gpu_facts: dict[str, Any],
    model_facts: dict[str, Any],
    defaults: dict[str, Any],
) -> list[dict[str, Any]]:
    """Instance records for a host. `model_facts[name]` = {"config": config.json dict, "weights_bytes": int|None};
    a model without facts (not on the node yet, e.g. in check mode) is served with its pinned flags only."""
    records = []
    for inst in instances:
        name = inst["model"]
        facts = model_facts.get(name) or {}
        plan = None
        device = _device_for(inst, gpu_facts, defaults)
        if defaults.get("plan", True) and facts.get("config") and device["kind"] != "none":
            from vllm_deploy import presets  # the planner; imported late so validation never needs it

            plan = presets.choose_flags(
                config=facts["config"],
                weights_bytes=facts.get("weights_bytes"),
                device=device,
                pinned=inst.get("flags", {}),
                floors=defaults.get("floors") or {},
                vllm_version=defaults.get("vllm_version"),
            )
        record = build_instance(inst, models[name], name, gpu_facts=gpu_facts, plan=plan, defaults=defaults)
        records.append(apply_degraded(record, (defaults.get("degraded") or {}).get(inst["name"])))
    return records


def apply_degraded(record: dict[str, Any], degraded: dict[str, Any] | None) -> dict[str, Any]:
    """Keep a degrade-ladder outcome while the inventory still asks for the same flags.

    `degraded` is what the ladder recorded on the node: {"requested_flags": ..., "flags": ...}. Without
    this a re-run would render the flags that did not fit, restart, and climb the ladder again."""
    if not degraded or degraded.get("requested_flags") != record["flags"]:
        return record
    return {**with_flags(record, degraded["flags"]), "verdict": "degraded", "requested_flags": record["flags"]}


def with_flags(record: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """The same instance record with other flags (a degrade-ladder step): argv follows the flags."""
    fixed = record["argv"][: record["argv"].index("--port") + 2]  # module, model, served name, host, port
    return {**record, "flags": dict(flags), "argv": fixed + flags_to_argv(flags)}
