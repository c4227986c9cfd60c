"""An instance bigger than one node: one vLLM engine whose ranks run on several inventory hosts.

Declared fleet-wide (group_vars), so every host of the instance reads the same entry:

    vllm_multinode_instances:
      - name: llama-405b
        model: llama-405b
        hosts: [gpu1, gpu2]          # rank order: the first serves the API, the others are headless
        gpus: [0, 1, 2, 3, 4, 5, 6, 7]   # on every host (or a mapping host -> list, same length each)
        port: 8000
        master_port: 29500           # torch.distributed rendezvous on the first host
        master_addr: 10.0.0.11       # default: the first host's default IPv4 address
        interface: ens5              # GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME on every rank
        backend: mp                  # mp: vLLM's own launcher (default); ray: a Ray cluster (GPU only)
        flags: {tensor_parallel_size: 8, pipeline_parallel_size: 2}

Tensor parallelism runs inside each host, pipeline parallelism across them: TP defaults to the GPUs
per host and PP to the number of hosts, and TP x PP must equal the GPUs of all hosts together (a CPU
host counts as one). Each host turns the entry into the record of its own rank (`rank_records`): the
same record every other instance has (instances.build_instance), with `multinode` added and the argv
of its rank. vLLM's launcher (`--nnodes N --node-rank R --master-addr A --master-port P`) is what
runs everywhere; rank 0 is the OpenAI server, the others run `vllm serve --headless` through
files/vllm-cli (the CPU build's `vllm` console script cannot find its own distribution). With
`backend: ray` the hosts run a Ray head (rank 0) and workers, and vLLM starts on the head with
`--distributed-executor-backend ray`.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from vllm_deploy import instances as _inst
from vllm_deploy._validation import _closest, _describe, _is_gpu_ref, _is_int, _plain, _Problems

MULTINODE_KEYS = ("name", "model", "hosts", "gpus", "port", "bind", "flags", "env", "master_addr", "master_port",
                  "interface", "backend", "cpu_kv_cache_space_gib")
BACKENDS = ("mp", "ray")
# Rendered by the deploy from the entry; pinning them under `flags` would fight the launch.
MULTINODE_OWNED_FLAGS = {
    "nnodes": "the deploy sets it to the number of hosts",
    "node_rank": "the deploy sets it from the host's place in `hosts`",
    "master_addr": "set `master_addr` on the multi-node instance",
    "master_port": "set `master_port` on the multi-node instance",
    "distributed_executor_backend": "set `backend: mp` or `backend: ray` on the multi-node instance",
    "data_parallel_size": "a multi-node instance is one engine (TP x PP); for replicas declare more instances",
}
MULTINODE_OWNED_ENV = {
    "GLOO_SOCKET_IFNAME": "set `interface` on the multi-node instance",
    "NCCL_SOCKET_IFNAME": "set `interface` on the multi-node instance",
}
# vLLM's CPU platform has no Ray device key (vllm/v1/executor/ray_utils.py): its own words.
RAY_ON_CPU = "current platform cpu does not support ray"
DEFAULT_MASTER_PORT = 29500


def host_gpus(entry: dict[str, Any], host: str) -> list[Any]:
    gpus = entry.get("gpus", [])
    if isinstance(gpus, dict):
        return list(gpus.get(host) or [])
    return list(gpus or [])


def parallel_sizes(entry: dict[str, Any]) -> tuple[int, int, int]:
    """(TP, PP, devices in total): a CPU host (no GPUs) counts as one device."""
    hosts = entry.get("hosts") or []
    per_host = max(1, len(host_gpus(entry, hosts[0]))) if hosts else 1
    total = per_host * len(hosts)
    flags = entry.get("flags") or {}
    tp = flags.get("tensor_parallel_size")
    pp = flags.get("pipeline_parallel_size")
    if tp is None and pp is None:
        tp, pp = per_host, len(hosts)
    elif tp is None:
        # Never 0: a PP that does not divide the devices is refused as TP x PP != devices.
        tp = max(1, total // pp) if _is_int(pp) and pp > 0 else per_host
    elif pp is None:
        pp = max(1, total // tp) if _is_int(tp) and tp > 0 else len(hosts)
    return tp, pp, total


def mine(entries: Any, host: str) -> list[tuple[int, dict[str, Any]]]:
    """(index, entry) of the multi-node instances this host is a rank of."""
    if not isinstance(entries, list):
        return []
    return [(i, e) for i, e in enumerate(entries) if isinstance(e, dict) and isinstance(e.get("hosts"), list) and host in e["hosts"]]


def ray_unit(name: str) -> str:
    """The unit of an instance's Ray node (backend ray), the head's and every worker's."""
    return f"ray-{name}"


def rank_unit(entry: dict[str, Any], host: str) -> str:
    """The systemd unit of `host`'s rank: vllm-NAME, except a Ray worker (backend ray, not the first
    host), which runs Ray only, so its rank is the Ray node ray-NAME. `entry`: a
    vllm_multinode_instances entry, or a rank record (its `multinode` holds hosts and backend)."""
    mn = entry.get("multinode") or entry
    hosts = list(mn.get("hosts") or [])
    if host not in hosts:
        raise ValueError(f"{host} is not a host of instance {entry.get('name')!r} (hosts: {hosts})")
    if mn.get("backend", "mp") == "ray" and host != hosts[0]:
        return ray_unit(entry["name"])
    return f"vllm-{entry['name']}"


def validate(entries: Any, models: Any, *, host: str, play_hosts: list[str], views: dict[str, Any],
             instances: Any = None, fleet: dict[str, Any] | None = None, mode: str = "systemd") -> list[str]:
    """Every problem with the multi-node instances this host is a rank of, one line each.

    `play_hosts`: the hosts of the play; `views`: {host: that host's vllm_multinode_instances} (every
    rank must see the same entry); `instances`: this host's single-host vllm_instances (ports, GPUs and
    names must not clash); `fleet` as for instances.validate_inventory (pins, engine, bind, api key)."""
    entries, models, views = _plain(entries), _plain(models) or {}, _plain(views) or {}
    instances, fleet = _plain(instances) or [], _plain(fleet) or {}
    problems = _Problems(f"{host}: ")
    if entries in (None, []) or not _check_entries(problems, entries):
        return problems.lines
    check = _MultinodeCheck(problems, models, instances, fleet, host=host, play_hosts=play_hosts, views=views, mode=mode)
    for i, entry in mine(entries, host):
        check.entry(i, entry)
    return problems.lines


def _check_entries(problems: _Problems, entries: Any) -> bool:
    """vllm_multinode_instances is a list of mappings, each with a list of hosts; False when it is no list at all."""
    if not isinstance(entries, list):
        problems.err("vllm_multinode_instances", f"must be a list of instances, got {_describe(entries)}",
                     "e.g. vllm_multinode_instances: [{name: big, model: m, hosts: [gpu1, gpu2], gpus: [0, 1], port: 8000}]")
        return False
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            problems.err(f"vllm_multinode_instances[{i}]", f"must be a mapping, got {_describe(entry)}", "give name, model, hosts, gpus and port")
        elif not isinstance(entry.get("hosts"), list):
            problems.err(f"vllm_multinode_instances[{i}].hosts", f"must be a list of inventory hosts, got {_describe(entry.get('hosts'))}",
                         "e.g. hosts: [gpu1, gpu2] (the first serves the API)")
    return True


class _MultinodeCheck:
    """This host's multi-node instances checked one at a time, against the host's single-host instances
    (names, ports, GPUs) and the GPUs the instances before it pinned here."""

    def __init__(self, problems: _Problems, models: Any, instances: list, fleet: dict, *, host: str,
                 play_hosts: list[str], views: dict[str, Any], mode: str) -> None:
        self.problems, self.err = problems, problems.err
        self.models, self.fleet, self.host, self.play_hosts, self.views, self.mode = models, fleet, host, play_hosts, views, mode
        self.single_ports = {inst.get("port"): inst.get("name") for inst in instances if isinstance(inst, dict)}
        self.single_names = {inst.get("name") for inst in instances if isinstance(inst, dict)}
        self.pinned_here: dict[Any, str] = {}
        for inst in instances:
            if isinstance(inst, dict) and isinstance(inst.get("gpus"), list):
                for dev in inst["gpus"]:
                    self.pinned_here.setdefault(dev, str(inst.get("name")))

    def entry(self, i: int, entry: dict) -> None:
        """Every check of vllm_multinode_instances[i], in the order its problems are listed."""
        var = f"vllm_multinode_instances[{i}]"
        self._unknown_keys(var, entry)
        label = self._name(var, entry)
        self._mode(label)
        self._hosts(var, entry["hosts"])
        self._same_on_every_rank(var, entry, label)
        self._model(var, entry)
        self._ports(var, entry)
        self._master_addr(var, entry)
        self._interface(var, entry)
        self._backend(var, entry)
        mine_gpus = self._gpus(var, entry, label)
        if mine_gpus is None:
            return
        flags = self._owned_flags(var, entry)
        if flags is None:
            return
        env = self._owned_env(var, entry)
        self._parallel(var, entry, mine_gpus)
        self._as_one_host_instance(var, entry, mine_gpus, flags, env)

    def _unknown_keys(self, var: str, entry: dict) -> None:
        """A setting a multi-node instance does not have, with the closest one it does."""
        for key in [k for k in entry if k not in MULTINODE_KEYS]:
            guess = _closest(str(key), MULTINODE_KEYS)
            self.err(f"{var}.{key}", "is not a setting of a multi-node instance", f"did you mean {guess}?" if guess else f"use {', '.join(MULTINODE_KEYS)}")

    def _name(self, var: str, entry: dict) -> Any:
        """The name no single-host instance of this host has; what later problems call the instance."""
        name = entry.get("name")
        if isinstance(name, str) and name in self.single_names:
            self.err(f"{var}.name", f"{name!r} is also the name of a single-host instance on this host", "give each instance its own name (it names the unit vllm-NAME)")
        return name if isinstance(name, str) else var

    def _mode(self, label: Any) -> None:
        """A multi-node instance runs only as systemd units."""
        if self.mode != "systemd":
            self.err("vllm_mode", f"instance {label} spans hosts, which vllm-deploy runs only as systemd units (vllm_mode is {self.mode!r})",
                     "set vllm_mode: systemd on the hosts of a multi-node instance")

    def _hosts(self, var: str, hosts: list) -> None:
        """At least two hosts, each a host name of this play listed once."""
        if len(hosts) < 2:
            self.err(f"{var}.hosts", f"lists {len(hosts)} host", "a multi-node instance needs at least two hosts; declare a one-host instance under vllm_instances")
        seen: set[str] = set()
        for h in hosts:
            if not isinstance(h, str):
                self.err(f"{var}.hosts", f"{h!r} is not a host name", "list inventory host names")
            elif h in seen:
                self.err(f"{var}.hosts", f"{h} is listed twice", "list each host once (one rank per host)")
            elif h not in self.play_hosts:
                self.err(f"{var}.hosts", f"{h} is not a host of this play",
                         "add it to the inventory and to the play's limit (-l): every rank of the instance is deployed together")
            seen.add(h)

    def _same_on_every_rank(self, var: str, entry: dict, label: Any) -> None:
        """Every other host of the play that is a rank sees the same entry."""
        # One definition for every rank: a host_vars override would start ranks that disagree.
        for h in entry["hosts"]:
            if not isinstance(h, str) or h == self.host or h not in self.play_hosts:
                continue
            theirs = [e for e in (self.views.get(h) or []) if isinstance(e, dict) and e.get("name") == entry.get("name")]
            if not theirs:
                self.err(f"{var}", f"instance {label} is not in {h}'s vllm_multinode_instances",
                         "declare the multi-node instance once in group_vars for all of its hosts")
            elif theirs[0] != entry:
                diff = sorted(k for k in set(theirs[0]) | set(entry) if theirs[0].get(k) != entry.get(k))
                self.err(f"{var}", f"instance {label} differs on {h} ({', '.join(diff)})",
                         "declare the multi-node instance once in group_vars: every rank must run the same model, port and flags")

    def _model(self, var: str, entry: dict) -> None:
        """The instance's model is a key of vllm_models."""
        model = entry.get("model")
        if not isinstance(model, str) or model not in self.models:
            known = ", ".join(sorted(self.models)) or "none defined"
            self.err(f"{var}.model", f"{model!r} is not a key of vllm_models (known: {known})", "add it to vllm_models or fix the name")

    def _ports(self, var: str, entry: dict) -> None:
        """The API port and the rendezvous port: each 1-65535, not a single-host instance's, not each other."""
        port = entry.get("port")
        master_port = entry.get("master_port", DEFAULT_MASTER_PORT)
        for key, value in (("port", port), ("master_port", master_port)):
            if not _is_int(value) or not 1 <= value <= 65535:
                self.err(f"{var}.{key}", f"must be an integer 1-65535, got {value!r}", f"e.g. {key}: {8000 if key == 'port' else DEFAULT_MASTER_PORT}")
            elif value in self.single_ports:
                self.err(f"{var}.{key}", f"port {value} is already used by instance {self.single_ports[value]} on this host", "give the multi-node instance ports of its own")
        if _is_int(port) and port == master_port:
            self.err(f"{var}.master_port", f"is the API port {port}", "give the rendezvous its own port, e.g. 29500")

    def _master_addr(self, var: str, entry: dict) -> None:
        """master_addr, where given, is an IP address written as a string."""
        if "master_addr" in entry:
            addr = entry["master_addr"]
            try:
                ipaddress.ip_address(addr if isinstance(addr, str) else "")
            except ValueError:
                self.err(f"{var}.master_addr", f"must be a string holding the first host's IP address, got {_describe(addr)}",
                         "quote it, e.g. master_addr: \"10.0.0.11\", or drop it (the first host's default IPv4 address)")

    def _interface(self, var: str, entry: dict) -> None:
        """interface, where given, is a network interface name."""
        iface = entry.get("interface")
        if iface is not None and (not isinstance(iface, str) or not _inst.NAME_RE.fullmatch(iface.lower().replace("_", "-").replace(".", "-"))):
            self.err(f"{var}.interface", f"must be a network interface name, got {_describe(iface)}", "e.g. interface: eth0")

    def _backend(self, var: str, entry: dict) -> None:
        """A launch backend vllm-deploy knows, and no Ray on the CPU build."""
        backend = entry.get("backend", "mp")
        if backend not in BACKENDS:
            self.err(f"{var}.backend", f"{_describe(backend)} is not a launch backend", "use mp (vLLM's own launcher) or ray (a Ray cluster, GPU nodes)")
        elif backend == "ray" and self.fleet.get("engine") == "cpu":
            self.err(f"{var}.backend", f"ray on the CPU build: vLLM refuses it (\"{RAY_ON_CPU}\")",
                     "use backend: mp (vLLM's own launcher runs on CPU and GPU nodes)")

    def _gpus(self, var: str, entry: dict, label: Any) -> list | None:
        """The same GPU count on every host, none pinned twice on this host; this host's GPUs, None when unreadable."""
        gpus = entry.get("gpus", [])
        hosts = entry["hosts"]
        if isinstance(gpus, dict):
            missing = [h for h in hosts if isinstance(h, str) and h not in gpus]
            if missing:
                self.err(f"{var}.gpus", f"gives no GPUs for {', '.join(missing)}", "list every host of the instance under gpus, or give one list for all hosts")
            counts = {h: len(gpus.get(h) or []) for h in hosts if isinstance(h, str)}
            if len(set(counts.values())) > 1:
                self.err(f"{var}.gpus", "uneven GPUs per host (" + ", ".join(f"{h}: {n}" for h, n in counts.items()) + ")",
                         "give every host the same number of GPUs: pipeline stages are split evenly across hosts")
        elif not isinstance(gpus, list):
            self.err(f"{var}.gpus", f"must be a list of GPU indexes (the same on every host) or a mapping host -> list, got {_describe(gpus)}",
                     "e.g. gpus: [0, 1, 2, 3]; [] on CPU nodes")
            return None
        mine_gpus = host_gpus(entry, self.host)
        for dev in mine_gpus:
            if not _is_gpu_ref(dev):
                self.err(f"{var}.gpus", f"{dev!r} is not a GPU index", "use integers as nvidia-smi numbers them, or GPU UUIDs")
            elif dev in self.pinned_here:
                self.err(f"{var}.gpus", f"GPU {dev} is already pinned to instance {self.pinned_here[dev]} on this host",
                         "give each instance its own GPUs (two vLLM engines on one GPU each claim gpu_memory_utilization of it)")
            else:
                self.pinned_here[dev] = str(label)
        return mine_gpus

    def _owned_flags(self, var: str, entry: dict) -> dict | None:
        """flags is a mapping without the flags the deploy sets; the flags, None when not a mapping."""
        flags = entry.get("flags") or {}
        if not isinstance(flags, dict):
            self.err(f"{var}.flags", f"must be a mapping of vLLM flags, got {_describe(flags)}", "e.g. flags: {max_model_len: 8192}")
            return None
        for flag in flags:
            if flag in MULTINODE_OWNED_FLAGS:
                self.err(f"{var}.flags.{flag}", "is set by the deploy for a multi-node instance", MULTINODE_OWNED_FLAGS[flag])
        return flags

    def _owned_env(self, var: str, entry: dict) -> Any:
        """env without the variables the deploy sets; the env as given (or {})."""
        env = entry.get("env") or {}
        if isinstance(env, dict):
            for key in env:
                if key in MULTINODE_OWNED_ENV:
                    self.err(f"{var}.env.{key}", "is set by the deploy for a multi-node instance", MULTINODE_OWNED_ENV[key])
        return env

    def _parallel(self, var: str, entry: dict, mine_gpus: list) -> None:
        """TP x PP equals the devices of all hosts together."""
        tp, pp, total = parallel_sizes(entry)
        if _is_int(tp) and _is_int(pp) and tp > 0 and pp > 0 and tp * pp != total:
            per_host = max(1, len(mine_gpus))
            self.err(f"{var}.flags", f"TP {tp} x PP {pp} = {tp * pp} but the instance has {total} "
                     + ("GPUs" if mine_gpus else "CPU hosts") + f" ({len([h for h in entry['hosts'] if isinstance(h, str)])} hosts x {per_host})",
                     "make tensor_parallel_size x pipeline_parallel_size equal the GPUs of all hosts (TP inside a host, PP across hosts), "
                     "or drop both: TP defaults to the GPUs per host, PP to the number of hosts")

    def _as_one_host_instance(self, var: str, entry: dict, mine_gpus: list, flags: dict, env: Any) -> None:
        """Positive TP and PP, then every check of a one-host instance on this host's rank (instances.validate_inventory)."""
        # Everything else an instance is checked for (flag kinds against vLLM's list, env, bind, API
        # key), with this host's rank as a one-host instance; the deploy's own flags are left out.
        as_single = {k: entry[k] for k in ("name", "model", "port", "bind", "env", "cpu_kv_cache_space_gib") if k in entry}
        as_single["gpus"] = [d for d in mine_gpus if _is_gpu_ref(d)]
        as_single["flags"] = {k: v for k, v in flags.items() if k not in MULTINODE_OWNED_FLAGS
                              and k not in ("tensor_parallel_size", "pipeline_parallel_size")}
        as_single["env"] = {k: v for k, v in env.items() if k not in MULTINODE_OWNED_ENV} if isinstance(env, dict) else env
        for flag in ("tensor_parallel_size", "pipeline_parallel_size"):
            if flag in flags and not (_is_int(flags[flag]) and flags[flag] > 0):
                self.err(f"{var}.flags.{flag}", f"must be a positive integer, got {_describe(flags[flag])}", "e.g. 2, or drop it")
        if not isinstance(as_single["port"] if "port" in as_single else None, int):
            as_single["port"] = 1  # already refused above; keep the other checks running
        for line in _inst.validate_inventory(self.models, [as_single], host=self.host, fleet=self.fleet):
            line = line.replace("vllm_instances[0]", var)
            if "is not a key of vllm_models" in line:
                continue  # said once above
            self.problems.lines.append(line)


def _addr(entry: dict[str, Any], addresses: dict[str, Any]) -> str:
    if entry.get("master_addr"):
        return str(entry["master_addr"])
    first = entry["hosts"][0]
    addr = (addresses or {}).get(first)
    if not addr:
        raise ValueError(f"instance {entry['name']}: the address of its first host {first} is unknown; "
                         "set master_addr on the multi-node instance")
    return str(addr)


def rank_record(entry: dict[str, Any], models: dict[str, Any], host: str, *, addresses: dict[str, Any],
                gpu_facts: dict[str, Any], plan: dict[str, Any] | None, defaults: dict[str, Any]) -> dict[str, Any]:
    """The record of `host`'s rank of a multi-node instance (see the module docstring)."""
    entry = _plain(entry)
    hosts = list(entry["hosts"])
    rank = hosts.index(host)
    tp, pp, _ = parallel_sizes(entry)
    backend = entry.get("backend", "mp")
    master_addr = _addr(entry, addresses)
    master_port = int(entry.get("master_port", DEFAULT_MASTER_PORT))
    flags = dict(entry.get("flags") or {})
    flags.update({"tensor_parallel_size": tp, "pipeline_parallel_size": pp})
    env = dict(entry.get("env") or {})
    if entry.get("interface"):
        env.update({"GLOO_SOCKET_IFNAME": entry["interface"], "NCCL_SOCKET_IFNAME": entry["interface"]})
    as_single = {"name": entry["name"], "model": entry["model"], "port": entry["port"], "gpus": host_gpus(entry, host),
                 "flags": flags, "env": env}
    for key in ("bind", "cpu_kv_cache_space_gib"):
        if key in entry:
            as_single[key] = entry[key]
    record = _inst.build_instance(as_single, models[entry["model"]], entry["model"], gpu_facts=gpu_facts, plan=plan, defaults=defaults)
    # TP and PP are the instance's, whatever the planner's one-host view made of them.
    record["flags"] = {**record["flags"], "tensor_parallel_size": tp, "pipeline_parallel_size": pp}
    served = record["model"]["served_name"]
    launch = ["--distributed-executor-backend", backend]
    if backend == "mp":
        launch += ["--nnodes", str(len(hosts)), "--node-rank", str(rank), "--master-addr", master_addr, "--master-port", str(master_port)]
    common = ["--model", record["model"]["path"], "--served-model-name", served]
    if rank == 0:
        role = "api"
        argv = ["-m", "vllm.entrypoints.openai.api_server", *common, "--host", record["bind"], "--port", str(record["port"])]
        argv += _inst.flags_to_argv(record["flags"]) + launch
    elif backend == "mp":
        role = "headless"
        # vLLM's CLI (`vllm serve --headless`): the api_server module ignores --headless.
        argv = [f"{defaults.get('helper_dir', '/usr/local/libexec/vllm-deploy')}/vllm-cli", "serve", *common]
        argv += _inst.flags_to_argv(record["flags"]) + launch + ["--headless"]
    else:
        role = "ray-worker"
        argv = []
    record["argv"] = argv
    record["multinode"] = {
        "rank": rank, "ranks": len(hosts), "hosts": hosts, "role": role, "backend": backend,
        "master_addr": master_addr, "master_port": master_port,
        "addresses": {h: str((addresses or {}).get(h, "")) for h in hosts},
        "tensor_parallel_size": tp, "pipeline_parallel_size": pp,
    }
    if backend == "ray":
        gpus_here = len(host_gpus(entry, host))
        ray = ["-m", "ray.scripts.scripts", "start", "--block", "--num-gpus", str(gpus_here)]
        ray += (["--head", "--port", str(master_port), "--node-ip-address", master_addr] if rank == 0
                else ["--address", f"{master_addr}:{master_port}"])
        record["ray"] = {"unit": ray_unit(entry["name"]), "argv": ray, "head": rank == 0}
        # A worker host runs Ray only: its rank's unit is the Ray worker; the gate is rank 0's.
        record["unit"] = rank_unit(entry, host)
    _inst.refuse_unsafe(record)
    return record


def rank_records(entries: Any, models: dict[str, Any], host: str, *, addresses: dict[str, Any], gpu_facts: dict[str, Any],
                 model_facts: dict[str, Any], defaults: dict[str, Any]) -> list[dict[str, Any]]:
    """The records of this host's ranks, planned with the whole instance's TP x PP."""
    out = []
    for _, entry in mine(_plain(entries), host):
        tp, pp, total = parallel_sizes(entry)
        facts = (model_facts or {}).get(entry["model"]) or {}
        plan = None
        single = {"gpus": host_gpus(entry, host), "cpu_kv_cache_space_gib": entry.get("cpu_kv_cache_space_gib")}
        if single["cpu_kv_cache_space_gib"] is None:
            single.pop("cpu_kv_cache_space_gib")
        device = _inst._device_for(single, gpu_facts, defaults)
        if defaults.get("plan", True) and facts.get("config") and device["kind"] != "none":
            from vllm_deploy import presets

            if device["kind"] == "gpu":
                device = {**device, "count": total}
            pinned = {**(entry.get("flags") or {}), "tensor_parallel_size": tp, "pipeline_parallel_size": pp}
            plan = presets.choose_flags(config=facts["config"], weights_bytes=facts.get("weights_bytes"), device=device,
                                        pinned=pinned, floors=defaults.get("floors") or {}, vllm_version=defaults.get("vllm_version"))
        out.append(rank_record(entry, models, host, addresses=addresses, gpu_facts=gpu_facts, plan=plan, defaults=defaults))
    return out


def argv_problems(argv: list[str], spec: dict[str, Any]) -> list[str]:
    """What vLLM's own argument list (the pinned dump) would refuse in a rendered command line."""
    problems = []
    args = list(argv)
    if args[:2] == ["-m", "vllm.entrypoints.openai.api_server"]:
        args = args[2:]
    elif len(args) >= 2 and args[0].endswith("/vllm-cli") and args[1] == "serve":
        args = args[2:]
    by_opt = {}
    for option in spec["options"] if "options" in spec else []:
        for opt in [option["name"], *option["aliases"]]:
            by_opt[opt] = option
    if not by_opt:
        by_opt = {"--" + k.replace("_", "-"): v for k, v in spec["flags"].items()}
    i = 0
    while i < len(args):
        opt = args[i]
        option = by_opt.get(opt)
        values = []
        j = i + 1
        while j < len(args) and not args[j].startswith("--"):  # a value never starts with a dash (validation)
            values.append(args[j])
            j += 1
        if option is None:
            problems.append(f"{opt!r} is not an argument of {spec.get('label', 'the pinned vLLM')}")
            i = j
            continue
        nargs = option.get("nargs")
        if nargs in (0, "0") and values:
            problems.append(f"{opt} takes no value, got {values}")
        elif nargs is None and len(values) != 1:
            problems.append(f"{opt} takes one value, got {len(values)}")
        elif option.get("choices") and any(v not in option["choices"] for v in values):
            problems.append(f"{opt}: {values} not among {option['choices']}")
        i = j
    return problems


def _started(state: dict[str, Any], key: str = "ExecMainStartTimestamp") -> float:
    value = str(state.get(key) or "").lstrip("@")
    try:
        return float(value)
    except ValueError:
        return 0.0


def parse_show(text: Any) -> dict[str, str]:
    """`systemctl show -p ...` output as a mapping (a mapping is returned as it is)."""
    if isinstance(text, dict):
        return {str(k): str(v) for k, v in text.items()}
    return dict(line.split("=", 1) for line in str(text or "").splitlines() if "=" in line)


def lost_ranks(diagnosis: dict[str, Any], record: dict[str, Any], states: dict[str, Any]) -> str:
    """One line naming the rank(s) the instance lost, from each rank's unit (`systemctl show
    --timestamp=unix`: ActiveState, SubState, NRestarts, ExecMainStartTimestamp; rank 0's may carry
    ReadyTimestamp, when its API came up): a rank that is not running, or that started after rank 0
    was ready (the ranks meet only while rank 0 starts, so it is not in rank 0's pipeline), else the
    peer address vLLM's log names."""
    mn = record.get("multinode") or {}
    hosts = mn.get("hosts") or []
    states = {h: parse_show(v) for h, v in (states or {}).items()}
    ready = _started(states.get(hosts[0]) or {}, "ReadyTimestamp") if hosts else 0.0
    lost = []
    for rank, h in enumerate(hosts[1:], start=1):
        state = states.get(h) or {}
        if not state:
            continue
        why = None
        if state.get("ActiveState") != "active":
            why = f"{state.get('ActiveState')}/{state.get('SubState')}"
        elif ready and _started(state) > ready:
            why = "restarted after rank 0 was ready"
        if why:
            lost.append(f"rank {rank} on {h} ({why}, {state.get('NRestarts', '?')} restarts)")
    peer = ((diagnosis or {}).get("figures") or {}).get("peer")
    if not lost and peer:
        lost += [f"rank {rank} on {h} ({peer})" for rank, h in enumerate(hosts) if (mn.get("addresses") or {}).get(h) == peer]
    return "; ".join(lost)


def diagnose_instance(diagnosis: dict[str, Any], record: dict[str, Any], states: dict[str, Any]) -> dict[str, Any]:
    """Rank 0's diagnosis, made `lost_rank` when a rank of the instance is gone or rejoined late: the
    cause to fix is that host (rank 0's own log only shows the peer vanishing)."""
    diagnosis = dict(diagnosis or {})
    lost = lost_ranks(diagnosis, record, states)
    if not lost:
        return diagnosis
    mn = record.get("multinode") or {}
    seen = diagnosis.get("summary") or ""
    diagnosis.update({
        "category": "lost_rank",
        "summary": f"the instance lost {lost}" + (f"; rank 0's log: {seen}" if seen and diagnosis.get("category") not in ("unknown", "lost_rank") else ""),
        "fix": (f"look at that rank's journal (journalctl -u vllm-{record.get('name')} on its host); the ranks meet only at start, so "
                f"once it runs again restart the whole instance (deploy.yml restarts every rank, rank 0 on {(mn.get('hosts') or ['?'])[0]} last)"),
        "lost": lost,
    })
    return diagnosis


def fingerprint_problems(fingerprints: dict[str, Any], record: dict[str, Any]) -> list[str]:
    """Where the ranks of a multi-node instance differ (roles/vllm_preflight/files/rank-fingerprint.py
    read on each host): the Python stack, the driver, the model's files. One line per difference,
    naming both hosts; every rank must run the same pinned stack on the same weights."""
    hosts = [h for h in (record.get("multinode") or {}).get("hosts", []) if h in fingerprints]
    if not hosts:
        return []
    ref_host = hosts[0]
    ref = fingerprints[ref_host] or {}
    name = record.get("name")
    out = []
    for h in hosts[1:]:
        fp = fingerprints[h] or {}
        for key, what in (("python", "Python"), ("torch", "torch"), ("vllm", "vLLM"), ("driver", "NVIDIA driver")):
            if fp.get(key) != ref.get(key):
                out.append(f"{h}: instance {name}: {what} {fp.get(key) or 'none'} differs from {ref_host}'s {ref.get(key) or 'none'} — "
                           "every rank must run the same pinned stack: run deploy.yml on both hosts (python_stack installs the pins), "
                           "or rebuild-node.yml for the driver")
        mine_, theirs = ref.get("model"), fp.get("model")
        if mine_ is None or theirs is None:
            missing = h if theirs is None else ref_host
            out.append(f"{missing}: instance {name}: the model directory {record['model']['path']} is missing — "
                       "put the same model files on every host of the instance")
            continue
        differ = sorted(f for f in set(mine_) | set(theirs) if mine_.get(f) != theirs.get(f))
        if differ:
            shown = ", ".join(differ[:5]) + (f" and {len(differ) - 5} more" if len(differ) > 5 else "")
            out.append(f"{h}: instance {name}: model files differ from {ref_host}'s in {record['model']['path']} ({shown}) — "
                       "copy the same model to every host of the instance (each rank loads its own layers from its own disk)")
    return out


def watch_argv(record: dict[str, Any], helper_dir: str, config_dir: str, interval: Any, probe_timeout: Any, failures: Any) -> list[str]:
    """The command line of rank 0's rank watch (roles/vllm_common/files/vllm-rank-watch)."""
    return [f"{helper_dir}/vllm-rank-watch", "--unit", f"vllm-{record['name']}", "--url", _inst.gate_url(record),
            "--model", record["model"]["served_name"], "--env-file", f"{config_dir}/{record['name']}.env",
            "--interval", str(int(interval)), "--probe-timeout", str(int(probe_timeout)), "--failures", str(int(failures))]
