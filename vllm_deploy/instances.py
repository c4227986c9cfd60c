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

from vllm_deploy import cpus as cpu_binding
from vllm_deploy._validation import _closest, _describe, _is_gpu_ref, _is_int, _plain, _Problems

NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,47}")
FLAG_RE = re.compile(r"[a-z][a-z0-9_]*")
MODEL_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
SERVED_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,255}")
ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Absolute, and no character the Compose volume syntax (`:`) or a unit's line structure would split on.
PATH_RE = re.compile(r"/[^\s:]*")
# Any character that starts a new line or escapes in a unit, a Compose file, a terminal or a command line.
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")

INSTANCE_KEYS = ("name", "model", "gpus", "port", "bind", "flags", "env", "cpu_kv_cache_space_gib", "cpus")
MODEL_KEYS = ("path", "source", "served_name", "generate", "private", "url", "repo", "revision", "endpoint", "include", "exclude",
              "dir")
# The keys each fetched source reads (vllm_deploy/weights.py), the required ones first.
SOURCE_KEYS = {"url": ("url",), "hub": ("repo", "revision", "endpoint", "include", "exclude"), "controller": ("dir",)}
SOURCE_REQUIRED = {"url": ("url",), "hub": ("repo", "revision"), "controller": ("dir",)}
HUB_REPO_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")
HTTP_URL_RE = re.compile(r"https?://[^\s/]+(/\S*)?")
# roles/vllm_model/files/tiny_model.py's options (a `source: generate` model's shape).
GENERATE_KEYS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "max_position", "vocab", "seed")

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
    "config": "put the arguments under `flags` (a config file would override host, port and the API key unseen)",
    "headless": "a headless rank serves no API of its own: declare the instance under vllm_multinode_instances (its hosts after the first run headless)",
    "nnodes": "an instance across hosts is declared under vllm_multinode_instances (the deploy sets --nnodes)",
    "node_rank": "an instance across hosts is declared under vllm_multinode_instances (the deploy sets --node-rank)",
    "master_addr": "an instance across hosts is declared under vllm_multinode_instances (set master_addr there)",
    "master_port": "an instance across hosts is declared under vllm_multinode_instances (set master_port there)",
    "hf_token": "put it in vault_hf_token (it reaches the node only in the 0600 environment file, not the command line)",
    "uds": "the deploy serves and gates each instance on bind:port; remove it",
}
# Environment the deploy owns: overriding it under `env` would break GPU pinning, the mounts or the secrets file.
OWNED_ENV = {
    "CUDA_VISIBLE_DEVICES": "pin GPUs with the instance's `gpus` (the deploy sets CUDA_VISIBLE_DEVICES from it)",
    "CUDA_DEVICE_ORDER": "the deploy sets PCI_BUS_ID so CUDA numbers GPUs as nvidia-smi does; remove it",
    "NVIDIA_VISIBLE_DEVICES": "pin GPUs with the instance's `gpus` (Compose mode requests exactly those)",
    "HF_TOKEN": "put it in vault_hf_token (it reaches the node only in the 0600 environment file)",
    "HUGGING_FACE_HUB_TOKEN": "put it in vault_hf_token (it reaches the node only in the 0600 environment file)",
    "VLLM_API_KEY": "put it in vault_vllm_api_key (it reaches the node only in the 0600 environment file)",
    "HF_HOME": "set vllm_hf_home (the deploy creates and mounts it)",
    "VLLM_CACHE_ROOT": "set vllm_cache_root (the deploy creates and mounts it)",
    "HF_HUB_OFFLINE": "set vllm_hf_hub_offline",
    "VLLM_CPU_KVCACHE_SPACE": "set cpu_kv_cache_space_gib on the instance or vllm_cpu_kv_cache_space_gib",
    "VLLM_CPU_OMP_THREADS_BIND": "set cpus on the instance (the deploy gives each CPU instance of a node its own cores)",
    "HOME": "the unit sets HOME to vllm_home; remove it",
    "VLLM_DEPLOY_PORT": "the deploy sets it to the instance's port for the image's health check; remove it",
}
ENGINES = ("auto", "gpu", "cpu")
MODEL_SOURCES = ("present", "generate", "url", "hub", "controller")


def is_mig_ref(value: Any) -> bool:
    """A MIG device's UUID as nvidia-smi -L prints it: MIG-<uuid>, or MIG-GPU-<uuid>/<gi>/<ci> (R450/R460)."""
    return isinstance(value, str) and value.startswith("MIG-")


def control_char(value: Any) -> str | None:
    """The first control character anywhere in a value (keys of mappings included), as U+XXXX."""
    if isinstance(value, str):
        hit = CONTROL_RE.search(value)
        return f"U+{ord(hit.group()):04X}" if hit else None
    if isinstance(value, dict):
        return next((c for kv in value.items() for c in map(control_char, kv) if c), None)
    if isinstance(value, (list, tuple)):
        return next((c for c in map(control_char, value) if c), None)
    return None


def _dash_value(value: Any) -> str | None:
    """A string value (or list item) vLLM's parser would read as an option instead of a value."""
    items = value if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if isinstance(item, str) and item.startswith("-"):
            try:
                float(item)
            except ValueError:
                return item
    return None


def _bind_problem(bind: Any) -> tuple[str, str] | None:
    if isinstance(bind, str) and not control_char(bind):
        try:
            ipaddress.ip_address(bind)
            return None
        except ValueError:
            pass
    if isinstance(bind, bool):
        return (f"must be a string holding an IP address, got boolean {bind!r} (YAML reads yes/no/on/off as booleans)",
                "quote the address, e.g. bind: \"127.0.0.1\"")
    if not isinstance(bind, str):
        return (f"must be a string holding an IP address, got {_describe(bind)}",
                "quote the address, e.g. bind: \"127.0.0.1\" (local only) or \"0.0.0.0\" (all interfaces)")
    return (f"{bind!r} is not an IP address", "use 127.0.0.1 (local only) or 0.0.0.0 (all interfaces)")


def _beyond_localhost(bind: Any) -> bool:
    if not isinstance(bind, str):
        return False  # refused as not an address already
    try:
        return not ipaddress.ip_address(bind).is_loopback
    except (ValueError, TypeError):
        return False


def validate_fleet(values: Any, *, host: str = "") -> list[str]:
    """The fleet-wide inputs a host sees (group or host level): vllm_bind, vllm_engine and the
    vllm_versions_override entries. `values`: {name: value}; a name left out is not checked."""
    from vllm_deploy import compat

    where = f"{host}: " if host else ""
    values = _plain(values or {})
    errors: list[str] = []
    if "vllm_bind" in values:
        problem = _bind_problem(values["vllm_bind"])
        if problem:
            errors.append(f"{where}vllm_bind: {problem[0]} — {problem[1]}")
    if "vllm_engine" in values:
        engine = values["vllm_engine"]
        if engine not in ENGINES:
            guess = _closest(engine, ENGINES) if isinstance(engine, str) else None
            errors.append(f"{where}vllm_engine: {_describe(engine)} is not a vLLM build — "
                          + (f"did you mean {guess}? " if guess else "")
                          + "use auto (GPU build when nvidia-smi finds GPUs), gpu or cpu")
    if "vllm_versions_override" in values:
        override = values["vllm_versions_override"]
        if override is None:
            override = {}
        if not isinstance(override, dict):
            errors.append(f"{where}vllm_versions_override: must be a mapping of pins to override, got {_describe(override)}"
                          " — e.g. vllm_versions_override: {nvidia_driver: {debian_version: \"535.261.03-1\"}}")
        else:
            errors += [f"{where}{line}" for line in _override_problems(override, compat.load_versions(), "vllm_versions_override")]
    return errors


# A pinned version, package or source word: what apt and pip take as one token.
PIN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_~:-]*")


def _override_problems(override: dict, base: Any, var: str) -> list[str]:
    out = []
    for key, value in override.items():
        path = f"{var}.{key}"
        if not isinstance(base, dict) or key not in base:
            known = list(base) if isinstance(base, dict) else []
            guess = _closest(str(key), known) if known else None
            fix = f"did you mean {guess}?" if guess else f"override a key of vllm_deploy/data/versions.yaml ({', '.join(map(str, known)) or 'none here'})"
            out.append(f"{path}: is not a pin of vllm_deploy/data/versions.yaml — {fix}")
            continue
        want = base[key]
        if isinstance(want, dict):
            if not isinstance(value, dict):
                out.append(f"{path}: must be a mapping, got {_describe(value)} — override single keys, e.g. {key}: {{{next(iter(want), 'key')}: ...}}")
            else:
                out += _override_problems(value, want, path)
        elif isinstance(want, list):
            if not isinstance(value, list) or not all(isinstance(v, str) and PIN_RE.fullmatch(v) for v in value):
                out.append(f"{path}: must be a list of package names, got {_describe(value)} — e.g. {key}: [torchvision]")
        elif value is None and want is None:
            continue
        elif not isinstance(value, str):
            out.append(f"{path}: must be a string, got {_describe(value)} — quote it (YAML reads 0.33 as a number and drops trailing zeros)")
        elif control_char(value) or not PIN_RE.fullmatch(value):
            out.append(f"{path}: {value!r} is not a version or package name — use letters, digits and . + _ ~ : - only")
    return out


def validate_inventory(models: Any, instances: Any, *, host: str = "", gpus: list[dict] | None = None,
                       fleet: dict[str, Any] | None = None, mig_devices: list[dict] | None = None,
                       mig_gpus: list[int] | None = None) -> list[str]:
    """Return every problem with a host's vllm_models / vllm_instances, each naming the variable and the fix.

    With `gpus` (the node's GPU facts) it also checks that each pinned GPU exists; with `mig_devices` and
    `mig_gpus` (gpu_facts' MIG lists) that each pinned MIG device exists, that no whole GPU in MIG mode is
    pinned and that no two instances share a GPU instance's memory (without them MIG pins are not
    looked up: a caller that read only --query-gpu cannot know them). `fleet` carries what
    the host's fleet-wide inputs say: bind (vllm_bind), engine, versions (the merged pins), api_key
    (whether one is set) and private_network (vllm_private_network); flags are checked against the
    pinned vLLM's argument list (vllm_deploy/data/vllm-args)."""
    from vllm_deploy import compat, vllm_args

    problems = _Problems(f"{host}: " if host else "")
    err = problems.err
    fleet_given = fleet is not None
    models, instances, fleet = _plain(models), _plain(instances), _plain(fleet or {})

    models = _check_models(problems, models)
    if not isinstance(instances, list):
        err("vllm_instances", f"must be a list of instances, got {_describe(instances)}",
            "e.g. vllm_instances: [{name: qwen-0, model: qwen7b, gpus: [0], port: 8000}]")
        return problems.lines

    # Flags against vLLM's argument list only where the fleet inputs say which build serves (play 1);
    # the re-checks after gpu_facts only look at the GPUs again.
    spec = None
    if fleet_given:
        try:
            spec = vllm_args.for_pins(fleet.get("versions") or compat.load_versions(), str(fleet.get("engine", "auto")))
        except ValueError as exc:
            err("vllm_versions_override", str(exc), "pin a vLLM version with a dump in vllm_deploy/data/vllm-args")
            return problems.lines
    check = _InstancesCheck(problems, models, fleet, fleet_given, spec, gpus, mig_devices, mig_gpus)
    for i, inst in enumerate(instances):
        check.instance(i, inst)
    return problems.lines


def _unknown_keys(problems: _Problems, var: str, item: dict, known: tuple[str, ...]) -> None:
    """A setting vllm-deploy does not read, with the closest one it does."""
    for key in item:
        if key not in known:
            guess = _closest(str(key), known)
            problems.err(f"{var}.{key}", "is not a setting vllm-deploy reads",
                         f"did you mean {guess}?" if guess else f"use {', '.join(known)}")


def _check_models(problems: _Problems, models: Any) -> dict:
    """vllm_models: each name, path, source, served name, private and generate shape; the mapping to go on with."""
    err = problems.err
    if not isinstance(models, dict):
        err("vllm_models", f"must be a mapping of model name to settings, got {_describe(models)}",
            "see inventory/example/group_vars/gpu-nodes/vllm.yml")
        models = {}
    for mname, model in models.items():
        var = f"vllm_models.{mname}"
        if not isinstance(mname, str) or not MODEL_NAME_RE.fullmatch(mname):
            err(f"vllm_models[{mname!r}]", "is not a valid model name",
                "use letters, digits, dots, underscores and dashes (it names the model in the instance records)")
            continue
        if not isinstance(model, dict):
            err(var, f"must be a mapping, got {_describe(model)}", "give at least `path: /srv/models/NAME`")
            continue
        _unknown_keys(problems, var, model, MODEL_KEYS)
        _check_model_path(problems, var, model.get("path"))
        source = model.get("source", "present")
        if source not in MODEL_SOURCES:
            err(f"{var}.source", f"unknown source {source!r}", f"use one of {', '.join(MODEL_SOURCES)}")
        served = model.get("served_name", mname)
        if not isinstance(served, str) or not SERVED_NAME_RE.fullmatch(served):
            err(f"{var}.served_name", f"must be a name of letters, digits and . _ : / @ + -, got {served!r}", "e.g. served_name: qwen2.5-7b")
        if "private" in model and not isinstance(model["private"], bool):
            err(f"{var}.private", f"must be true or false, got {_describe(model['private'])}",
                "set private: true for weights only the service user may read")
        _check_generate(problems, var, model.get("generate", {}))
        _check_source_keys(problems, var, model, source)
    return models


SOURCE_EXAMPLES = {
    "url": "e.g. url: https://store.example/models/qwen7b (the prefix that serves manifest.json)",
    "repo": "e.g. repo: Qwen/Qwen2.5-7B-Instruct",
    "revision": "pin the 40-hex commit the hub resolves its branch to (HfApi().model_info(repo).sha)",
    "dir": "e.g. dir: /srv/export/qwen7b (the model's directory on the controller)",
}


def _check_source_keys(problems: _Problems, var: str, model: dict, source: Any) -> None:
    """A `url` / `hub` model's keys (vllm_deploy/weights.py reads them); no fetch key on another source."""
    err = problems.err
    mine = SOURCE_KEYS.get(source, ())
    for other, keys in SOURCE_KEYS.items():
        for key in keys:
            if key in model and key not in mine:
                err(f"{var}.{key}", f"is read only with source: {other}", f"remove it, or set source: {other}")
    for key in SOURCE_REQUIRED.get(source, ()):
        if key not in model:
            err(f"{var}.{key}", f"is required with source: {source}", SOURCE_EXAMPLES[key])
    if source == "url" and "url" in model:
        _check_http_url(problems, f"{var}.url", model["url"])
    if source == "controller" and "dir" in model:
        _check_model_path(problems, f"{var}.dir", model["dir"], SOURCE_EXAMPLES["dir"])
    if source != "hub":
        return
    if "repo" in model and not (isinstance(model["repo"], str) and HUB_REPO_RE.fullmatch(model["repo"])):
        err(f"{var}.repo", f"{model['repo']!r} is not a hub repo id", SOURCE_EXAMPLES["repo"])
    revision = model.get("revision")
    if "revision" in model and not (isinstance(revision, str) and re.fullmatch(r"[0-9a-f]{40}", revision)):
        err(f"{var}.revision", f"{revision!r} is not a 40-hex commit (a branch or tag moves under a deploy)",
            "pin the commit it resolves to now: HfApi().model_info(repo, revision=NAME).sha")
    if "endpoint" in model:
        _check_http_url(problems, f"{var}.endpoint", model["endpoint"])
    for key in ("include", "exclude"):
        patterns = model.get(key)
        # An empty exclude is meaningful (keep original/* too); an empty include would fetch nothing.
        if key in model and not (isinstance(patterns, list) and (patterns or key == "exclude") and all(isinstance(p, str) and p and not control_char(p) for p in patterns)):
            err(f"{var}.{key}", f"must be a list of file patterns, got {_describe(patterns)}", f'e.g. {key}: ["*.safetensors", "*.json"]')


def _check_http_url(problems: _Problems, var: str, value: Any) -> None:
    if not isinstance(value, str) or control_char(value) or not HTTP_URL_RE.fullmatch(value):
        problems.err(var, f"must be an http:// or https:// URL, got {value!r}", "e.g. https://store.example/models/qwen7b")


def _check_model_path(problems: _Problems, var: str, path: Any, example: str = "") -> None:
    """A model's path (or a controller source's dir, `var` then naming it): absolute, no control
    character, nothing Compose would split on."""
    where, example, host = (var, example, "the controller") if example else (f"{var}.path", "e.g. path: /srv/models/Qwen2.5-7B-Instruct", "the node")
    if not isinstance(path, str) or not path.startswith("/"):
        problems.err(where, f"must be an absolute path on {host}, got {path!r}", example)
    elif control_char(path):
        problems.err(where, f"contains the control character {control_char(path)}", "remove it (the path reaches the unit, the Compose file and vLLM's command line)")
    elif not PATH_RE.fullmatch(path):
        problems.err(where, f"{path!r} holds a space or a colon", "use a path without spaces or colons (Compose splits volumes on `:`)")


def _check_generate(problems: _Problems, var: str, generate: Any) -> None:
    """A `source: generate` model's shape: known keys, positive integers (seed may be 0)."""
    if not isinstance(generate, dict):
        problems.err(f"{var}.generate", f"must be a mapping of the tiny model's shape, got {_describe(generate)}", "e.g. generate: {layers: 2, hidden: 128}")
        generate = {}
    for key, value in generate.items():
        if key not in GENERATE_KEYS:
            guess = _closest(str(key), GENERATE_KEYS)
            problems.err(f"{var}.generate.{key}", "is not a shape setting of the tiny-model generator",
                         f"did you mean {guess}?" if guess else f"use {', '.join(GENERATE_KEYS)}")
        elif not _is_int(value) or value < (0 if key == "seed" else 1):
            problems.err(f"{var}.generate.{key}", f"must be a positive integer, got {_describe(value)}", f"e.g. {key}: 2")


class _InstancesCheck:
    """vllm_instances checked one instance at a time, against what the instances before it claimed
    (names, ports, GPUs, MIG GPU instances) and the node's GPUs where they are known."""

    def __init__(self, problems: _Problems, models: dict, fleet: dict, fleet_given: bool, spec: dict | None,
                 gpus: list[dict] | None, mig_devices: list[dict] | None, mig_gpus: list[int] | None) -> None:
        self.problems, self.err = problems, problems.err
        self.models, self.spec, self.fleet_given = models, spec, fleet_given
        self.default_bind = fleet.get("bind", "127.0.0.1")
        self.key_set = bool(fleet.get("api_key"))
        self.private = fleet.get("private_network") is True
        self.seen_names: dict[str, int] = {}
        self.seen_ports: dict[int, str] = {}
        self.seen_gpus: dict[Any, str] = {}
        self.seen_gpu_instances: dict[tuple, tuple[str, str]] = {}
        self.gpus, self.mig_known = gpus, mig_devices is not None
        self.gpu_indexes = {g.get("index") for g in gpus or []}
        self.gpu_uuids = {g.get("uuid") for g in gpus or []}
        self.index_of_uuid = {g.get("uuid"): g.get("index") for g in gpus or [] if g.get("uuid")}
        self.migs = {d.get("uuid"): d for d in _plain(mig_devices or [])}
        self.in_mig_mode = set(_plain(mig_gpus or []))

    def instance(self, i: int, inst: Any) -> None:
        """Every check of vllm_instances[i], in the order its problems are listed."""
        var = f"vllm_instances[{i}]"
        if not isinstance(inst, dict):
            self.err(var, f"must be a mapping, got {_describe(inst)}", "give name, model, gpus and port")
            return
        _unknown_keys(self.problems, var, inst, INSTANCE_KEYS)
        label = self._name(i, var, inst)
        self._model(var, inst)
        self._port(var, inst, label)
        self._bind(var, inst, label)
        devices = self._devices(var, inst, label)
        self._cpu_settings(var, inst)
        flags = self._flags(var, inst)
        self._parallel(var, flags, devices)
        self._env(var, inst)

    def _name(self, i: int, var: str, inst: dict) -> Any:
        """The instance's name: valid and not used twice; what later problems call the instance."""
        name = inst.get("name")
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            self.err(f"{var}.name", f"{name!r} is not a valid instance name",
                     "use lower-case letters, digits and dashes (it becomes the unit name vllm-NAME)")
        elif name in self.seen_names:
            self.err(f"{var}.name", f"{name!r} is used twice (also vllm_instances[{self.seen_names[name]}])", "give each instance its own name")
        else:
            self.seen_names[name] = i
        return name if isinstance(name, str) else var

    def _model(self, var: str, inst: dict) -> None:
        """The instance's model is a key of vllm_models."""
        model = inst.get("model")
        if not isinstance(model, str) or model not in self.models:
            known = ", ".join(sorted(self.models)) or "none defined"
            guess = _closest(model, self.models) if isinstance(model, str) else None
            self.err(f"{var}.model", f"{model!r} is not a key of vllm_models (known: {known})",
                     f"did you mean {guess}?" if guess else "add it to vllm_models or fix the name")

    def _port(self, var: str, inst: dict, label: Any) -> None:
        """A port 1-65535 no other instance of the host uses."""
        port = inst.get("port")
        if not _is_int(port) or not 1 <= port <= 65535:
            self.err(f"{var}.port", f"must be an integer 1-65535, got {port!r}", "e.g. port: 8000")
        elif port in self.seen_ports:
            self.err(f"{var}.port", f"port {port} is already used by instance {self.seen_ports[port]}", "give each instance on a host its own port")
        else:
            self.seen_ports[port] = label

    def _bind(self, var: str, inst: dict, label: Any) -> None:
        """The bind address, and no listening beyond localhost without an API key or a private network."""
        if "bind" in inst:
            problem = _bind_problem(inst["bind"])
            if problem:
                self.err(f"{var}.bind", *problem)
        bind, bind_var = (inst["bind"], f"{var}.bind") if "bind" in inst else (self.default_bind, "vllm_bind")
        if self.fleet_given and _beyond_localhost(bind) and not self.key_set and not self.private:
            self.err(bind_var, f"instance {label} listens on {bind} (beyond localhost) without an API key",
                     "set vault_vllm_api_key, bind 127.0.0.1, or set vllm_private_network: true if only a trusted network reaches this node")

    def _devices(self, var: str, inst: dict, label: Any) -> list:
        """The pinned GPUs: a list, a MIG device alone, each a GPU reference pinned once; the list to go on with."""
        devices = inst.get("gpus", [])
        if not isinstance(devices, list):
            self.err(f"{var}.gpus", f"must be a list of GPU indexes, got {_describe(devices)}", "e.g. gpus: [0] or gpus: [0, 1]; [] on CPU nodes")
            devices = []
        if any(is_mig_ref(d) for d in devices) and len(devices) > 1:
            # NVIDIA's MIG guide: a CUDA process enumerates one MIG device, and slices have no peer access.
            self.err(f"{var}.gpus", f"a MIG device must be the instance's only GPU, got {len(devices)}: "
                     f"{', '.join(str(d) for d in devices)}",
                     "pin one MIG device per instance (gpus: [\"MIG-...\"]): CUDA gives a process a single MIG device, "
                     "so tensor or pipeline parallelism cannot span MIG slices")
        for dev in devices:
            if not _is_gpu_ref(dev):
                self.err(f"{var}.gpus", f"{dev!r} is not a GPU index", "use integers as nvidia-smi numbers them, e.g. gpus: [0, 1], or GPU UUIDs")
                continue
            if dev in self.seen_gpus:
                self.err(f"{var}.gpus", f"GPU {dev} is already pinned to instance {self.seen_gpus[dev]}",
                         "give each instance its own GPUs (two vLLM engines on one GPU each claim gpu_memory_utilization of it)")
            else:
                self.seen_gpus[dev] = label
            if is_mig_ref(dev):
                if self.mig_known:
                    self._mig_device(var, dev, label)
            elif self.gpus is not None:
                self._whole_gpu(var, dev)
        return devices

    def _mig_device(self, var: str, dev: str, label: Any) -> None:
        """A pinned MIG device exists on the node and shares no GPU instance with another instance's."""
        mig = self.migs.get(dev)
        if mig is None:
            have = ", ".join(f"{u} ({d.get('profile')} on GPU {d.get('gpu_index')})" for u, d in self.migs.items())
            self.err(f"{var}.gpus", f"MIG device {dev} does not exist on this node "
                     f"(nvidia-smi -L lists: {have or 'no MIG device'})",
                     "pin a MIG UUID from `nvidia-smi -L`, or create the MIG instance first (nvidia-smi mig -cgi ... -C)")
            return
        shared = (mig.get("gpu_index"), mig.get("gpu_instance"))
        if shared in self.seen_gpu_instances and self.seen_gpu_instances[shared][1] != dev:
            other, other_dev = self.seen_gpu_instances[shared]
            self.err(f"{var}.gpus", f"MIG device {dev} shares GPU instance {shared[1]} of GPU {shared[0]} (its "
                     f"{mig.get('memory_total_mib')} MiB) with {other_dev} of instance {other}",
                     "pin MIG devices of different GPU instances: compute instances of one GPU instance share its "
                     "memory, and each engine would claim gpu_memory_utilization of all of it")
        else:
            self.seen_gpu_instances[shared] = (label, dev)

    def _whole_gpu(self, var: str, dev: Any) -> None:
        """A pinned whole GPU exists on the node and is not in MIG mode."""
        known = dev in self.gpu_indexes if _is_int(dev) else dev in self.gpu_uuids
        if not known:
            have = ", ".join(str(g.get("index")) for g in self.gpus) or "none (no GPU found)"
            self.err(f"{var}.gpus", f"GPU {dev} does not exist on this node (nvidia-smi lists: {have})",
                     "pin GPUs the node has, or fix the node's driver if GPUs are missing")
            return
        index = dev if _is_int(dev) else self.index_of_uuid.get(dev)
        if index in self.in_mig_mode:
            slices = ", ".join(u for u, d in self.migs.items() if d.get("gpu_index") == index)
            self.err(f"{var}.gpus", f"GPU {dev} is in MIG mode: CUDA sees only its MIG devices, not the whole GPU",
                     f"pin one of its MIG devices by UUID ({slices})" if slices else
                     "create MIG instances and pin one by UUID (nvidia-smi -L), or disable MIG mode on it "
                     "(nvidia-smi -i N -mig 0, then reset the GPU)")

    def _cpu_settings(self, var: str, inst: dict) -> None:
        """The CPU engine's KV space and cores."""
        kv_space = inst.get("cpu_kv_cache_space_gib")
        if kv_space is not None and (not isinstance(kv_space, (int, float)) or isinstance(kv_space, bool) or kv_space <= 0):
            self.err(f"{var}.cpu_kv_cache_space_gib", f"must be a positive number of GiB, got {_describe(kv_space)}", "e.g. cpu_kv_cache_space_gib: 4")
        if "cpus" in inst:
            problem = cpu_binding.cpus_problem(inst["cpus"])
            if problem:
                self.err(f"{var}.cpus", problem, "e.g. cpus: [0, 1] (the cores this instance's compute threads run on, CPU engine)")

    def _flags(self, var: str, inst: dict) -> dict:
        """Each flag: a snake_case name the deploy does not set, no stale flag or value, a value vLLM takes."""
        flags = inst.get("flags", {})
        if flags is None:
            flags = {}
        if not isinstance(flags, dict):
            self.err(f"{var}.flags", f"must be a mapping of vLLM flags, got {_describe(flags)}", "e.g. flags: {max_model_len: 8192}")
            flags = {}
        for flag, value in flags.items():
            if not isinstance(flag, str) or not FLAG_RE.fullmatch(flag):
                snake = flag.strip().lstrip("-").replace("-", "_") if isinstance(flag, str) else ""
                self.err(f"{var}.flags", f"{flag!r} is not a flag name",
                         f"did you mean {snake}?" if FLAG_RE.fullmatch(snake) and (self.spec is None or snake in self.spec["flags"])
                         else "use vLLM's argument names in snake_case, e.g. max_model_len")
                continue
            self._flag(f"{var}.flags.{flag}", flag, value)
        return flags

    def _flag(self, fvar: str, flag: str, value: Any) -> None:
        """One flag's first problem: reserved, stale, a stale value, a control character, a dash, or vLLM's own."""
        from vllm_deploy import vllm_args

        if flag in RESERVED_FLAGS:
            self.err(fvar, "is set by the deploy itself", RESERVED_FLAGS[flag])
        elif flag in STALE_FLAGS:
            self.err(fvar, "is a stale flag", STALE_FLAGS[flag])
        elif isinstance(value, str) and (flag, value) in STALE_VALUES:
            self.err(fvar, f"{value!r} is rejected by vLLM", STALE_VALUES[(flag, value)])
        elif control_char(value):
            self.err(fvar, f"contains the control character {control_char(value)}", "remove it (flag values reach vLLM's command line and the unit)")
        elif _dash_value(value) is not None:
            self.err(fvar, f"value {_dash_value(value)!r} starts with a dash, so vLLM would read it as an option",
                     "give the value itself; every option is a key of its own under flags")
        elif self.spec is not None:
            for problem, fix in vllm_args.flag_problems(flag, value, self.spec):
                self.err(fvar, problem, fix)

    def _parallel(self, var: str, flags: dict, devices: list) -> None:
        """TP x PP matches the pinned GPUs."""
        tp = flags.get("tensor_parallel_size", 1)
        pp = flags.get("pipeline_parallel_size", 1)
        if devices and _is_int(tp) and _is_int(pp) and tp > 0 and pp > 0:
            if "tensor_parallel_size" in flags and tp * pp != len(devices):
                self.err(f"{var}.flags.tensor_parallel_size", f"TP {tp} x PP {pp} = {tp * pp} GPUs but {len(devices)} are pinned",
                         "pin exactly TP x PP GPUs, or drop tensor_parallel_size (it defaults to the number of pinned GPUs)")
            elif "tensor_parallel_size" not in flags and len(devices) % pp:
                self.err(f"{var}.flags.pipeline_parallel_size", f"PP {pp} does not divide the {len(devices)} pinned GPUs",
                         "pin a multiple of pipeline_parallel_size GPUs (TP is the pinned GPUs / PP)")

    def _env(self, var: str, inst: dict) -> None:
        """Each environment variable: a valid name the deploy does not own, a plain string or number value."""
        env = inst.get("env", {})
        if env is None:
            env = {}
        if not isinstance(env, dict):
            self.err(f"{var}.env", f"must be a mapping of environment variables, got {_describe(env)}", "e.g. env: {VLLM_LOGGING_LEVEL: DEBUG}")
            env = {}
        for key, value in env.items():
            evar = f"{var}.env.{key}"
            if not isinstance(key, str) or not ENV_KEY_RE.fullmatch(key):
                self.err(f"{var}.env", f"{key!r} is not an environment variable name", "use letters, digits and underscores, not starting with a digit")
            elif key in OWNED_ENV:
                self.err(evar, "is set by the deploy itself", OWNED_ENV[key])
            elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
                self.err(evar, f"must be a string or a number, got {_describe(value)}",
                         "quote it (YAML reads yes/no/on/off as booleans), e.g. VLLM_USE_V1: \"1\"")
            elif control_char(value):
                self.err(evar, f"contains the control character {control_char(value)}", "remove it (the value becomes a line of the unit and the Compose file)")


def flags_to_argv(flags: dict[str, Any]) -> list[str]:
    """snake_case flags → vLLM's argv: True → bare flag, None → omitted, lists → repeated values; False →
    omitted, or `--no-FLAG` where vLLM's default is not already false (enable_prefix_caching: false
    must turn prefix caching off, not leave vLLM's own choice)."""
    from vllm_deploy import vllm_args

    argv: list[str] = []
    for key in sorted(flags):
        value = flags[key]
        opt = "--" + key.replace("_", "-")
        if value is True:
            argv.append(opt)
        elif value is False and vllm_args.negation(key):
            argv.append(vllm_args.negation(key))
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
        if control_char(arg):
            raise ValueError(f"{arg!r} holds the control character {control_char(arg)}: it cannot be one ExecStart= argument")
        arg = arg.replace("%", "%%").replace("$", "$$")
        if not arg or re.search(r"[\s\"'\\;]", arg):
            arg = '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
        out.append(arg)
    return " ".join(out)


def systemd_environment(key: Any, value: Any) -> str:
    """One `Environment=` assignment, quoted for systemd (which unescapes \\ and \" in quotes and expands `%`)."""
    key, value = str(key), str(value)
    if not ENV_KEY_RE.fullmatch(key):
        raise ValueError(f"{key!r} is not an environment variable name")
    if control_char(value):
        raise ValueError(f"the value of {key} holds the control character {control_char(value)}: it would end the unit's line")
    return '"' + f"{key}={value}".replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%") + '"'


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
    flags = _instance_flags(inst, plan, devices)
    served = model.get("served_name", model_name)
    bind = inst.get("bind", defaults.get("bind", "127.0.0.1"))
    env = _instance_env(inst, defaults, devices)
    argv = [
        "-m", "vllm.entrypoints.openai.api_server",
        "--model", model["path"],
        "--served-model-name", served,
        "--host", bind,
        "--port", str(inst["port"]),
    ] + flags_to_argv(flags)
    unit = f"vllm-{inst['name']}"
    compose = defaults.get("mode") == "compose"
    record = {
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
    refuse_unsafe(record)
    return record


def _instance_flags(inst: dict[str, Any], plan: dict[str, Any] | None, devices: list) -> dict[str, Any]:
    """The planner's flags under the inventory's pins; without a pinned TP size, the pinned GPUs divided by the
    pipeline stages (no flag for one GPU a stage)."""
    flags = dict(plan["flags"]) if plan else {}
    flags.update(inst.get("flags", {}))
    if devices and "tensor_parallel_size" not in inst.get("flags", {}):
        pp = int(flags.get("pipeline_parallel_size", 1))
        if len(devices) // pp > 1:
            flags["tensor_parallel_size"] = len(devices) // pp
        else:
            flags.pop("tensor_parallel_size", None)
    return flags


def _instance_env(inst: dict[str, Any], defaults: dict[str, Any], devices: list) -> dict[str, str]:
    """The engine's environment: caches, offline hub, the pinned GPUs, a CPU engine's KV space, then the
    instance's own variables."""
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
    return env


def refuse_unsafe(record: dict[str, Any]) -> None:
    """Raise ValueError when a record holds what would add a line to a unit or Compose file, or an option
    to vLLM's command line: the validation play refuses these first, this holds even when it was skipped."""
    name = record.get("name")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ValueError(f"instance name {name!r} is not lower-case letters, digits and dashes")
    fields = {"model.path": record["model"]["path"], "model.served_name": record["model"]["served_name"],
              "bind": record["bind"], "devices": record["devices"], "env": record["env"], "argv": record["argv"]}
    for field, value in fields.items():
        char = control_char(value)
        if char:
            raise ValueError(f"instance {name}: {field} contains the control character {char}; "
                             "it would reach the unit, the Compose file or the command line")
    for key in record["env"]:
        if not ENV_KEY_RE.fullmatch(str(key)):
            raise ValueError(f"instance {name}: {key!r} is not an environment variable name")
    for key, value in record["flags"].items():
        if _dash_value(value) is not None:
            raise ValueError(f"instance {name}: flag {key} has the value {_dash_value(value)!r}, "
                             "which vLLM would read as an option")


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
    # A MIG device is planned with its slice's memory, under the name CUDA gives it ("... MIG 3g.40gb").
    by_ref.update({d.get("uuid"): d for d in gpu_facts.get("mig_devices", [])})
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
    if defaults.get("engine") == "cpu":
        records = _bind_cpus(records, instances, defaults.get("cpus_allowed"))
    return records


def _bind_cpus(records: list[dict[str, Any]], instances: list[dict[str, Any]], allowed: Any) -> list[dict[str, Any]]:
    """Each CPU instance's own cores (vllm_deploy/cpus.py says why): VLLM_CPU_OMP_THREADS_BIND in its env."""
    allowed_ids = cpu_binding.parse_cpu_list(allowed) if allowed not in (None, "") else None
    pinned = {inst["name"]: inst.get("cpus") for inst in instances}
    binds = cpu_binding.bindings([{"name": r["name"], "cpus": pinned.get(r["name"]), "flags": r["flags"]} for r in records],
                                 allowed_ids)
    out = []
    for record in records:
        if record["name"] in binds:
            env = {**record["env"], "VLLM_CPU_OMP_THREADS_BIND": binds[record["name"]]}
            record = {**record, "env": dict(sorted(env.items()))}
            refuse_unsafe(record)
        out.append(record)
    return out


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
