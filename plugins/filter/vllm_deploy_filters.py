"""Ansible filters over the vllm_deploy package: plain functions, AnsibleFilterError on bad input."""

from __future__ import annotations

import functools
import sys

from ansible.errors import AnsibleError, AnsibleFilterError

# The logic lives in the vllm_deploy package, pip-installed beside Ansible: the collection ships it
# (pyproject.toml at its root), so `pip install` of the installed collection's directory provides it.
try:
    import vllm_deploy  # noqa: F401
except ImportError as exc:
    raise AnsibleError(
        f"the vllm_deploy.fleet filters need the Python package vllm_deploy, which Ansible's Python ({sys.executable}) "
        "cannot import — pip install the installed collection's directory "
        "(pip install ~/.ansible/collections/ansible_collections/vllm_deploy/fleet), or `pip install -e .` in a checkout"
    ) from exc


from vllm_deploy import containers, instances, ladder, models  # noqa: E402
from vllm_deploy._validation import _plain  # noqa: E402


# name -> filter: filled by @_filter, returned by FilterModule.filters.
_FILTERS: dict = {}


def _filter(fn):
    """Registers `fn` as a filter under its own name. Any error it meets becomes one AnsibleFilterError
    that names the filter: Ansible would otherwise report a bare TypeError/KeyError from deep in the
    package, with no hint which filter."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except AnsibleFilterError as exc:
            if str(exc).startswith(f"{name}: "):
                raise
            raise AnsibleFilterError(f"{name}: {exc}", orig_exc=exc) from exc
        except Exception as exc:  # noqa: BLE001 - every package error, reported under the filter's name
            detail = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc) or type(exc).__name__
            raise AnsibleFilterError(f"{name}: {detail}", orig_exc=exc) from exc

    _FILTERS[name] = wrapper
    return wrapper


def _expect(value, types, what):
    """TypeError unless value is one of types (None allowed): for filters whose package function
    would otherwise accept anything and answer nonsense (str() of a dict, an 'unknown' diagnosis)."""
    if value is not None and not isinstance(value, types):
        raise TypeError(f"{what} must be {' or '.join(t.__name__ for t in types)}, got {type(value).__name__}")


@_filter
def vllm_inventory_errors(models, vllm_instances, host="", gpus=None, fleet=None, mig_devices=None, mig_gpus=None):
    """Every problem with a host's vllm_models / vllm_instances, each naming the variable and the fix."""
    _expect(host, (str,), "host")
    _expect(gpus, (list,), "gpus")
    _expect(fleet, (dict,), "fleet")
    _expect(mig_devices, (list,), "mig_devices")
    _expect(mig_gpus, (list,), "mig_gpus")
    return instances.validate_inventory(models, vllm_instances, host=host, gpus=gpus, fleet=fleet,
                                        mig_devices=mig_devices, mig_gpus=mig_gpus)


@_filter
def vllm_fleet_errors(values, host=""):
    """Every problem with a host's fleet-wide inputs (vllm_bind, vllm_engine, vllm_versions_override)."""
    _expect(values, (dict,), "the fleet-wide variables")
    _expect(host, (str,), "host")
    return instances.validate_fleet(values or {}, host=host)


@_filter
def vllm_build_instances(vllm_instances, models, gpu_facts, model_facts, defaults):
    """The instance records (flags planned for the node's GPUs or CPU KV space) that the templates render."""
    return instances.build_instances(
        vllm_instances, models, gpu_facts=gpu_facts or {}, model_facts=model_facts or {}, defaults=defaults
    )


@_filter
def vllm_gate_argv(record, helper_dir, config_dir, timeout, prompt=None):
    """The deploy gate's command line for an instance record (one owner: vllm_deploy.instances)."""
    return instances.gate_argv(record, helper_dir, config_dir, timeout, prompt)


@_filter
def vllm_gate_logs_argv(record, helper_dir, since=None, lines=None):
    """The command line that prints an instance's engine log since a moment (or its last lines)."""
    return instances.gate_logs_argv(record, helper_dir, since, lines)


@_filter
def vllm_pinned_versions(override=None):
    """The pins of vllm_deploy/data/versions.yaml with an inventory's overrides merged in (recursively)."""
    from vllm_deploy import compat

    _expect(override, (dict,), "vllm_versions_override")
    return compat.pinned_versions(override or {})


@_filter
def vllm_bool_switch_names(roles_dir):
    """Every boolean switch (options declared type bool in the roles' argument_specs)."""
    from vllm_deploy import switches

    _expect(roles_dir, (str,), "roles_dir")
    return switches.bool_switch_names(roles_dir)


@_filter
def vllm_switch_errors(values, host=""):
    """One line per boolean switch set to something that is not a boolean."""
    from vllm_deploy import switches

    _expect(values, (dict,), "values")
    _expect(host, (str,), "host")
    return switches.switch_errors(values or {}, host)


@_filter
def vllm_renamed_errors(defined, host=""):
    """One line per variable set under a name vllm-deploy no longer reads (renamed)."""
    from vllm_deploy import switches

    _expect(defined, (list,), "defined")
    _expect(host, (str,), "host")
    return switches.renamed_errors(list(defined or []), host)


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
def vllm_gpu_facts(stdout, stderr="", rc=0, present=True, list_stdout=None, table_stdout=None):
    """nvidia-smi --query-gpu CSV (or its failure), and optionally `nvidia-smi -L` with the plain table →
    gpu_count, gpus, driver_version, profile, error, mig_devices, mig_gpus."""
    from vllm_deploy import nvidia_smi

    return nvidia_smi.gpu_facts(stdout or "", stderr or "", int(rc), bool(present), list_stdout or None,
                                table_stdout or None)


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


@_filter
def vllm_diagnose(text):
    """A vLLM server log → {category, summary, figures, fix, phase, phase_confidence, action, ...}."""
    from vllm_deploy import diagnose

    _expect(text, (str, bytes), "the log text")
    return diagnose.diagnose(text or "").to_dict()


@_filter
def vllm_degrade_step(flags, diagnosis, engine, floors=None, tried=None):
    """The degrade ladder's next rung for a failed start (None when not about memory or exhausted)."""
    return ladder.next_step(flags or {}, diagnosis or {}, engine=engine, floors=floors, tried=tried)


@_filter
def vllm_is_memory_failure(diagnosis):
    """Whether the degrade ladder can act on a diagnosis (memory categories); others roll back."""
    _expect(diagnosis, (dict,), "diagnosis")
    return ladder.is_memory_failure(diagnosis)


@_filter
def vllm_backups_of(entries, name):
    """The files a run replaced for an instance (Ansible's backups), to restore on rollback or keep."""
    _expect(entries, (list,), "entries")
    _expect(name, (str,), "name")
    return ladder.backups_of(entries, name)


@_filter
def vllm_record_degraded(record, flags):
    """The instance record a degrade-ladder rung runs: other flags, argv recomputed, marked degraded —
    the same record a later run rebuilds from the ladder's saved outcome, so the unit does not change."""
    return instances.apply_degraded(record, {"requested_flags": record["flags"], "flags": flags})


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
def vllm_degraded_outcomes(slurped):
    """{instance: {requested_flags, flags}} from the slurped /etc/vllm/<instance>.degraded.json files."""
    return models.degraded_outcomes(slurped or [])


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

    _expect(version, (str, int, float), "version")
    return driver.upstream_version(version)


@_filter
def vllm_nvidia_smi_argv(query, binary="nvidia-smi"):
    """'gpus' / 'compute-apps' → the nvidia-smi CSV query's argv, in the field order the parsers read."""
    from vllm_deploy import nvidia_smi

    _expect(query, (str,), "the query")
    return nvidia_smi.query_argv(query, binary)


@_filter
def vllm_nvidia_smi_fields(query):
    """'gpus' / 'compute-apps' / 'metrics' → the fields of that query, in its CSV column order."""
    from vllm_deploy import nvidia_smi

    _expect(query, (str,), "the query")
    return nvidia_smi.query_fields(query)


@_filter
def vllm_plan_actual(record, log, tolerance=0.05):
    """An instance record + its start's log → the planner's figures next to vLLM's (plan.json)."""
    from vllm_deploy import monitoring

    _expect(record, (dict,), "the instance record")
    _expect(log, (str,), "the log")
    return monitoring.plan_vs_actual(record, log or "", float(tolerance))


@_filter
def vllm_plan_textfile(report):
    """A vllm_plan_actual report → node-exporter textfile metrics (vllm_deploy_plan_*{kind=planned|actual})."""
    from vllm_deploy import monitoring

    _expect(report, (dict,), "the plan report")
    return monitoring.plan_textfile(report)


@_filter
def vllm_scrape_targets(hosts, local_host):
    """[{host, address, instances}] → Prometheus static_configs of every instance (labels host, instance, model, gpus)."""
    from vllm_deploy import monitoring

    _expect(hosts, (list,), "the hosts")
    _expect(local_host, (str,), "the Prometheus host")
    return monitoring.scrape_targets(hosts, local_host=local_host)


@_filter
def vllm_monitoring_fleet(hosts, hostvars, local_host):
    """Host names + hostvars → [{host, address, instances}] (the input of vllm_scrape_targets)."""
    from vllm_deploy import monitoring

    _expect(hosts, (list,), "the hosts")
    _expect(local_host, (str,), "the Prometheus host")
    if not hasattr(hostvars, "__getitem__"):
        raise TypeError(f"hostvars must be a mapping, got {type(hostvars).__name__}")
    return monitoring.fleet_hosts(hosts, hostvars, local_host)


@_filter
def vllm_dcgm_targets(hosts, port):
    """[{host, address, dcgm, gpus}] (vllm_monitoring_fleet) → static_configs of the DCGM exporters (labels host, gpus)."""
    from vllm_deploy import monitoring

    _expect(hosts, (list,), "the hosts")
    return monitoring.dcgm_targets(hosts, port)


@_filter
def vllm_pinned_gpus(records):
    """Instance records → {GPU index or UUID: [instance names]} (the GPU collector's pinned GPUs)."""
    from vllm_deploy import monitoring

    _expect(records, (list,), "the instance records")
    return monitoring.pinned_gpus(records)


@_filter
def vllm_status_table(nodes):
    """[{host, instances, systemctl, plans, gpus}] → the fleet as one text table (status.yml)."""
    from vllm_deploy import monitoring

    _expect(nodes, (list,), "the nodes")
    return monitoring.status_table(nodes)


@_filter
def vllm_dpkg_query_argv(packages):
    """Package names or patterns → argv of `dpkg-query -W` in the format vllm_driver_state reads."""
    from vllm_deploy import driver

    return driver.dpkg_query_argv(packages)


@_filter
def vllm_dpkg_installed_version(dpkg_stdout, package):
    """vllm_dpkg_query_argv output → the installed version of one package ("" when not installed)."""
    from vllm_deploy import driver

    _expect(dpkg_stdout, (str,), "the dpkg-query output")
    return driver.installed_version(dpkg_stdout or "", str(package))


@_filter
def vllm_torch_matches(installed, pin):
    """Whether the installed torch version is the pin (a pin without a local label ignores +cu130)."""
    from vllm_deploy import compat

    _expect(installed, (str,), "the installed torch version")
    return compat.torch_matches(installed, pin)


# The gateway (issue 11): HAProxy's tables from every serving host's instance records.
def _hostvar(hostvars, host, name, default=None):
    """One variable of another host (templated), or default when that host does not define it."""
    try:
        value = hostvars[host].get(name, default)
    except (KeyError, AttributeError):
        return default
    return default if value is None else value


@_filter
def vllm_gateway_backends(hostvars, hosts, gateway_host):
    """HAProxy's backend table: every instance record (vllm_plan_instances) of `hosts`, per served name."""
    from vllm_deploy import gateway

    _expect(hosts, (list,), "the serving hosts")
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
    return gateway.backend_table(fleet, str(gateway_host))


@_filter
def vllm_gateway_engine_key_errors(hostvars, hosts, engine_key):
    """Hosts whose engines expect another key than the one the gateway adds (values never shown)."""
    from vllm_deploy import gateway

    _expect(hosts, (list,), "the serving hosts")
    keys = {h: str(_hostvar(hostvars, h, "vllm_api_key") or _hostvar(hostvars, h, "vault_vllm_api_key", "")) for h in hosts or []}
    return gateway.engine_key_mismatches(keys, str(engine_key or ""))


@_filter
def vllm_gateway_models_list(table):
    """The body of the gateway's GET /v1/models."""
    from vllm_deploy import gateway

    _expect(table, (list,), "the backend table")
    return gateway.models_list(table or [])


@_filter
def vllm_gateway_key_table(keys):
    """Client keys as the gateway's map files list them: SHA-256 of each key (never the key), limits filled in
    (0 = no limit), expiry in Unix seconds (0 = never); the validation play checked them."""
    from vllm_deploy import gateway

    _expect(keys, (list,), "vllm_gateway_keys")
    return gateway.key_table(keys or [])


@_filter
def vllm_gateway_server_ref(record, host):
    """`backend/server` of an instance in the gateway's runtime API."""
    from vllm_deploy import gateway

    _expect(record, (dict,), "the instance record")
    return gateway.server_ref(record, str(host))


@_filter
def vllm_canary_figures(window):
    """One side of a canary verdict (vllm-gateway-ctl canary) in words, for the rollout's report."""
    from vllm_deploy import gateway

    _expect(window, (dict,), "the canary window")
    return gateway.canary_figures(window or {})


@_filter
def vllm_gateway_node_records(vllm_instances, vllm_models, multinode_instances=None, host=""):
    """{name, model: {name, served_name}} per instance of the node and per multi-node instance `host` is a rank of,
    from the inventory (rebuild-node drains before planning)."""
    from vllm_deploy import gateway

    _expect(vllm_instances, (list,), "vllm_instances")
    _expect(vllm_models, (dict,), "vllm_models")
    return gateway.node_records(vllm_instances or [], vllm_models or {}, multinode_instances or [], str(host))


@_filter
def vllm_gateway_served_name_errors(vllm_models, host=""):
    """Served names the gateway cannot route on."""
    from vllm_deploy import gateway

    _expect(vllm_models, (dict,), "vllm_models")
    _expect(host, (str,), "host")
    return gateway.validate_served_names(vllm_models, host=host)


@_filter
def vllm_gateway_errors(keys, enabled, group, groups, max_body_bytes, max_tokens, drain_timeout, host="", routes=None,
                        max_n=None, tls=None, vip=None):
    """The gateway's inputs: its group, the keys and their limits, body, max_tokens and n limits, drain timeout, routes,
    TLS (`tls`: {enabled, cert, key, min_version, ciphers, ciphersuites, names, ca_dir, redirect_port, port,
    metrics_port}, gateway.validate_tls's inputs) and the virtual address (`vip`: {vip, interface, vrid, bind})."""
    from vllm_deploy import gateway

    _expect(keys, (list,), "vllm_gateway_keys")
    _expect(groups, (dict,), "groups")
    _expect(host, (str,), "host")
    _expect(tls, (dict,), "the gateway's TLS inputs")
    _expect(vip, (dict,), "the gateway's virtual address inputs")
    return gateway.validate_gateway(enabled=bool(enabled), group=str(group), groups=dict(groups or {}), keys=keys,
                                    max_body_bytes=max_body_bytes, max_tokens=max_tokens,
                                    drain_timeout=drain_timeout, host=str(host), routes=routes, max_n=max_n,
                                    tls=_plain(tls) if tls is not None else None,
                                    vip=_plain(vip) if vip is not None else None)


@_filter
def vllm_gateway_vrrp(hostvars, hosts, host):
    """keepalived's view of `host` among the gateway hosts: {priority, src, peers}. Each host's VRRP address is its
    vllm_gateway_vrrp_address, else what the role recorded from its facts (__vllm_gateway_vrrp_address)."""
    from vllm_deploy import gateway

    _expect(hosts, (list,), "the gateway hosts")
    addresses = {str(h): _hostvar(hostvars, h, "vllm_gateway_vrrp_address") or _hostvar(hostvars, h, "__vllm_gateway_vrrp_address")
                 for h in hosts or []}
    return gateway.vrrp_instance([str(h) for h in hosts or []], str(host), addresses)


@_filter
def vllm_gateway_tls_names(hostvars, hosts, extra=None):
    """The subject alternative names of the gateway's generated certificate: every gateway host's inventory
    name, ansible_host, FQDN and default addresses (from facts, where gathered), its vllm_gateway_bind
    unless a wildcard, plus `extra` (vllm_gateway_tls_names and the address the role's own check uses)."""
    from vllm_deploy import gateway

    _expect(hosts, (list,), "the gateway hosts")
    _expect(extra, (list,), "vllm_gateway_tls_names")
    entries = []
    for host in hosts:
        facts = _hostvar(hostvars, host, "ansible_facts", {}) or {}
        addresses = [(facts.get(k) or {}).get("address") for k in ("default_ipv4", "default_ipv6")]
        entries.append({"name": str(host), "ansible_host": _hostvar(hostvars, host, "ansible_host"),
                        "fqdn": facts.get("fqdn"), "addresses": [a for a in addresses if a],
                        "local": _hostvar(hostvars, host, "vllm_gateway_bind")})
    return gateway.tls_names(_plain(entries), _plain(extra or []))


@_filter
def vllm_multinode_errors(entries, models, host, play_hosts, views, vllm_instances=None, fleet=None, mode="systemd"):
    """Every problem with the multi-node instances a host is a rank of (vllm_deploy.multinode.validate)."""
    from vllm_deploy import multinode

    _expect(host, (str,), "host")
    _expect(play_hosts, (list,), "play_hosts")
    _expect(views, (dict,), "views")
    return multinode.validate(entries, models, host=host, play_hosts=play_hosts, views=views,
                              instances=vllm_instances, fleet=fleet, mode=mode)


@_filter
def vllm_multinode_mine(entries, host):
    """The multi-node instances `host` is a rank of (vllm_deploy.multinode.mine), in inventory order."""
    from vllm_deploy import multinode

    _expect(entries, (list,), "vllm_multinode_instances")
    _expect(host, (str,), "host")
    return [entry for _, entry in multinode.mine(entries, host)]


@_filter
def vllm_rank_unit(entry, host):
    """The systemd unit of `host`'s rank of a multi-node instance (vllm_deploy.multinode.rank_unit): vllm-NAME,
    a Ray worker's ray-NAME. `entry`: a vllm_multinode_instances entry or a rank record."""
    from vllm_deploy import multinode

    _expect(entry, (dict,), "the multi-node instance")
    _expect(host, (str,), "host")
    return multinode.rank_unit(entry, host)


@_filter
def vllm_build_ranks(entries, models, host, addresses, gpu_facts, model_facts, defaults):
    """The records of this host's ranks of multi-node instances (vllm_deploy.multinode.rank_records)."""
    from vllm_deploy import multinode

    _expect(entries, (list,), "vllm_multinode_instances")
    _expect(host, (str,), "host")
    _expect(addresses, (dict,), "addresses")
    return multinode.rank_records(entries, models or {}, host, addresses=addresses or {}, gpu_facts=gpu_facts or {},
                                  model_facts=model_facts or {}, defaults=defaults)


@_filter
def vllm_argv_problems(record, versions, engine):
    """What the pinned vLLM's own argument list refuses in a record's rendered command line."""
    from vllm_deploy import multinode, vllm_args

    _expect(record, (dict,), "record")
    _expect(versions, (dict,), "versions")
    if not record.get("argv"):
        return []
    spec = vllm_args.for_pins(versions, str(engine))
    return [f"{record['name']}: {p}" for p in multinode.argv_problems(record["argv"], spec)]


@_filter
def vllm_lost_ranks(diagnosis, record, states):
    """One line naming the ranks a multi-node instance lost (vllm_deploy.multinode.lost_ranks)."""
    from vllm_deploy import multinode

    _expect(diagnosis, (dict,), "diagnosis")
    _expect(states, (dict,), "states")
    return multinode.lost_ranks(diagnosis or {}, record, states or {})


@_filter
def vllm_changed_for(host, hostvars, name, model_name=None):
    """`host` when its files for instance `name` changed in this run (its registered render results,
    or the model it serves was generated), else '': which ranks of a multi-node instance changed."""
    _expect(host, (str,), "host")
    _expect(name, (str,), "name")
    view = hostvars[host]
    for key in ("__vllm_serve_engine_files", "__vllm_serve_env", "__vllm_serve_ray_units"):
        results = (view.get(key) or {}).get("results") or []
        if any(r.get("changed") and (r.get("item") or {}).get("name") == name for r in results):
            return host
    return host if model_name and model_name in (view.get("vllm_model_changed") or []) else ""


@_filter
def vllm_multinode_diagnosis(diagnosis, record, states):
    """Rank 0's diagnosis, as lost_rank naming the rank when one is gone (vllm_deploy.multinode.diagnose_instance)."""
    from vllm_deploy import multinode

    _expect(diagnosis, (dict,), "diagnosis")
    _expect(record, (dict,), "record")
    return multinode.diagnose_instance(diagnosis or {}, record, states or {})


@_filter
def vllm_rank_fingerprint_problems(fingerprints, record):
    """Where the ranks of a multi-node instance differ: stack, driver, model files (one line each)."""
    from vllm_deploy import multinode

    _expect(fingerprints, (dict,), "fingerprints")
    _expect(record, (dict,), "record")
    return multinode.fingerprint_problems(fingerprints, record)


@_filter
def vllm_rank_watch_argv(record, helper_dir, config_dir, interval=30, probe_timeout=120, failures=3):
    """The command line of rank 0's rank watch for a multi-node instance."""
    from vllm_deploy import multinode

    _expect(record, (dict,), "record")
    _expect(helper_dir, (str,), "helper_dir")
    _expect(config_dir, (str,), "config_dir")
    return multinode.watch_argv(record, helper_dir, config_dir, interval, probe_timeout, failures)


@_filter
def vllm_unit_show(text):
    """`systemctl show -p ...` output as a mapping of property to value."""
    from vllm_deploy import multinode

    _expect(text, (str,), "the systemctl show output")
    return multinode.parse_show(text or "")


@_filter
def vllm_bench_argv(record, python, launcher, config_dir, settings, result_dir):
    """An instance record + the vllm_bench_* settings → the node-side argv of its benchmark sweep."""
    from vllm_deploy import bench

    _expect(record, (dict,), "the instance record")
    _expect(settings, (dict,), "the bench settings")
    return bench.bench_argv(record, python, launcher, config_dir, settings, result_dir)


@_filter
def vllm_bench_progress(lines):
    """The launcher's JSON lines (parsed) → one progress line."""
    from vllm_deploy import bench

    _expect(lines, (list,), "the sweep lines")
    return bench.progress_line(lines)


@_filter
def vllm_tune_candidates(flags, candidates):
    """The instance's current flags + vllm_bench_tune_candidates → the tuned flags of each trial."""
    from vllm_deploy import bench

    _expect(flags, (dict,), "the instance's flags")
    _expect(candidates, (dict,), "vllm_bench_tune_candidates")
    return bench.candidate_flags(flags, candidates)


@_filter
def vllm_tuned_instances(vllm_instances, name, tuned):
    """vllm_instances with the tuned flags pinned on instance `name`."""
    from vllm_deploy import bench

    _expect(vllm_instances, (list,), "vllm_instances")
    _expect(tuned, (dict,), "the tuned flags")
    return bench.tuned_instances(vllm_instances, str(name), tuned)


# The rollout's waves: which changed instances of the fleet restart together (vllm_deploy.waves).
@_filter
def vllm_rollout_replicas(view):
    """{host: {records, changed, reachable, out_of_rotation}} → one replica per engine (a multi-node instance once)."""
    from vllm_deploy import waves

    _expect(view, (dict,), "the fleet view")
    return waves.fleet_replicas(_plain(view or {}))


@_filter
def vllm_rollout_waves(replicas, max_unavailable=1, canary=True, canary_ids=None, may_go_dark=None):
    """vllm_rollout_replicas' list → the rollout plan (waves, canary, skipped, blocked, dark, budget), and its
    `lines` as the deploy prints them before the first restart."""
    from vllm_deploy import waves

    _expect(replicas, (list,), "the replicas")
    _expect(canary, (bool,), "canary")
    _expect(canary_ids, (list, str), "vllm_rollout_canary")
    _expect(may_go_dark, (list, str), "vllm_rollout_may_go_dark")
    plan = waves.plan_waves(_plain(replicas or []), max_unavailable=_plain(max_unavailable),
                            canary=True if canary is None else canary, canary_ids=_plain(canary_ids),
                            may_go_dark=_plain(may_go_dark) or [])
    return {**plan, "lines": waves.wave_lines(plan)}


@_filter
def vllm_rollout_errors(values, host=""):
    """Every problem with the rollout's inputs (budget, canaries, models that may go dark), one line each."""
    from vllm_deploy import waves

    _expect(values, (dict,), "the rollout's inputs")
    _expect(host, (str,), "host")
    return waves.rollout_errors(_plain(values or {}), host=host)


@_filter
def vllm_rollout_canary_servers(canary_ids, hostvars):
    """The gateway servers (backend/server) of the plan's single-host canaries ("HOST/NAME")."""
    from vllm_deploy import gateway

    _expect(canary_ids, (list,), "the canaries")
    out = []
    for rid in canary_ids or []:
        host, _, name = str(rid).partition("/")
        records = [r for r in _plain(hostvars[host].get("vllm_plan_instances") or []) if r["name"] == name]
        if records and "multinode" not in records[0]:
            out.append(gateway.server_ref(records[0], host))
    return out


@_filter
def vllm_rebuild_batch_problems(hosts, hostvars, serial=1, max_unavailable=1, may_go_dark=None):
    """rebuild-node.yml's batches (`serial` hosts at a time, in play order) checked against the rollout's
    budget, from the inventory alone: one line per batch that takes too many replicas of a model out."""
    from vllm_deploy import gateway, waves

    _expect(hosts, (list,), "the play's hosts")
    hosts = list(hosts or [])
    size = str(serial).strip()
    if size.endswith("%"):
        size = max(1, int(len(hosts) * float(size[:-1]) / 100))
    else:
        size = int(size)
    if size < 1:
        raise ValueError(f"rebuild_node_serial: {serial!r} must be a count >= 1 or a percentage like 25%")
    view = {}
    for host in hosts:
        facts = hostvars[host]
        view[host] = {"records": gateway.node_records(_plain(facts.get("vllm_instances") or []),
                                                      _plain(facts.get("vllm_models") or {}),
                                                      _plain(facts.get("vllm_multinode_instances") or []), host)}
    replicas = waves.fleet_replicas(view)
    batches = [hosts[i:i + size] for i in range(0, len(hosts), size)]
    return waves.node_batch_problems(replicas, batches, max_unavailable=_plain(max_unavailable),
                                     may_go_dark=_plain(may_go_dark) or [])


@_filter
def vllm_node_cpu_share(allowed, nodes, index):
    """The cores container node `index` of `nodes` on one machine owns (Docker's --cpuset-cpus), from the
    machine's allowed core list ('0-3' or [0, 1, 2, 3])."""
    from vllm_deploy import cpus

    _expect(allowed, (str, list), "the machine's cores")
    return cpus.node_share(allowed, int(nodes), int(index))


@_filter
def vllm_rollout_view(hosts, hostvars, reachable):
    """The fleet view vllm_rollout_replicas reads, from every play host's records, changed names
    (`__vllm_serve_changed_names`) and changed instances not running (`__vllm_serve_not_serving`: out
    of rotation, started in the first wave); a host not in `reachable` (failed or unreachable) is down."""
    _expect(hosts, (list,), "the play's hosts")
    _expect(reachable, (list,), "the reachable hosts")
    view = {}
    for host in hosts or []:
        facts = hostvars[host]
        view[host] = {"records": _plain(facts.get("vllm_plan_instances") or []),
                      "changed": list(facts.get("__vllm_serve_changed_names") or []),
                      "out_of_rotation": list(facts.get("__vllm_serve_not_serving") or []),
                      "reachable": host in (reachable or [])}
    return view


@_filter
def vllm_rollout_host_wave(records, wave, host):
    """The host's records that restart in this wave, in the wave's order."""
    from vllm_deploy import waves

    _expect(records, (list,), "the host's records")
    _expect(wave, (list,), "the wave")
    return waves.host_wave(_plain(records or []), list(wave or []), str(host))


@_filter
def vllm_rollout_slots(wave):
    """How many instances the busiest host of the wave restarts (one after another)."""
    from vllm_deploy import waves

    _expect(wave, (list,), "the wave")
    return waves.wave_slots(list(wave or []))


@_filter
def vllm_rollout_not_restarted(records, changed, restarted, host):
    """The host's changed records the rollout did not restart (their files go back when it stops)."""
    from vllm_deploy import waves

    _expect(records, (list,), "the host's records")
    _expect(changed, (list,), "the changed instances")
    _expect(restarted, (list,), "the restarted instances")
    return waves.not_restarted(_plain(records or []), list(changed or []), list(restarted or []), str(host))


class FilterModule:
    def filters(self):
        """Every function decorated with @_filter, under its own name (no hand-kept list to forget)."""
        return dict(_FILTERS)
