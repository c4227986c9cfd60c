"""Filters for the gateway (issue 11): HAProxy's tables from every serving host's instance records, the
gateway's inputs, its certificate's names, the runtime API's server names, the canary's figures.

Registered by @_filter (plugins/plugin_utils/_filters.py); an error names the filter."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_deploy.fleet.plugins.plugin_utils._filters import FilterRegistry, expect, plain

_filter = FilterRegistry()


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

    expect(hosts, (list,), "the serving hosts")
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

    expect(hosts, (list,), "the serving hosts")
    keys = {h: str(_hostvar(hostvars, h, "vllm_api_key") or _hostvar(hostvars, h, "vault_vllm_api_key", "")) for h in hosts or []}
    return gateway.engine_key_mismatches(keys, str(engine_key or ""))


@_filter
def vllm_gateway_models_list(table):
    """The body of the gateway's GET /v1/models."""
    from vllm_deploy import gateway

    expect(table, (list,), "the backend table")
    return gateway.models_list(table or [])


@_filter
def vllm_gateway_key_table(keys):
    """Client keys as the gateway's map files list them: SHA-256 of each key (never the key), limits filled in
    (0 = no limit), expiry in Unix seconds (0 = never); the validation play checked them."""
    from vllm_deploy import gateway

    expect(keys, (list,), "vllm_gateway_keys")
    return gateway.key_table(keys or [])


@_filter
def vllm_gateway_server_ref(record, host):
    """`backend/server` of an instance in the gateway's runtime API."""
    from vllm_deploy import gateway

    expect(record, (dict,), "the instance record")
    return gateway.server_ref(record, str(host))


@_filter
def vllm_canary_figures(window):
    """One side of a canary verdict (vllm-gateway-ctl canary) in words, for the rollout's report."""
    from vllm_deploy import gateway

    expect(window, (dict,), "the canary window")
    return gateway.canary_figures(window or {})


@_filter
def vllm_gateway_node_records(vllm_instances, vllm_models, multinode_instances=None, host=""):
    """{name, model: {name, served_name}} per instance of the node and per multi-node instance `host` is a rank of,
    from the inventory (rebuild-node drains before planning)."""
    from vllm_deploy import gateway

    expect(vllm_instances, (list,), "vllm_instances")
    expect(vllm_models, (dict,), "vllm_models")
    return gateway.node_records(vllm_instances or [], vllm_models or {}, multinode_instances or [], str(host))


@_filter
def vllm_gateway_served_name_errors(vllm_models, host=""):
    """Served names the gateway cannot route on."""
    from vllm_deploy import gateway

    expect(vllm_models, (dict,), "vllm_models")
    expect(host, (str,), "host")
    return gateway.validate_served_names(vllm_models, host=host)


@_filter
def vllm_gateway_errors(keys, enabled, group, groups, max_body_bytes, max_tokens, drain_timeout, host="", routes=None,
                        max_n=None, tls=None, vip=None, token_window=60, peers=None):
    """The gateway's inputs: its group, the keys and their limits, body, max_tokens and n limits, the token budget's
    window, drain timeout, routes,
    TLS (`tls`: {enabled, cert, key, min_version, ciphers, ciphersuites, names, ca_dir, redirect_port, port,
    metrics_port}, gateway.validate_tls's inputs), the virtual address (`vip`: {vip, interface, vrid, bind}) and the peers
    (`peers`: {port, address, vrrp_address, other_ports: {variable: port}})."""
    from vllm_deploy import gateway

    expect(keys, (list,), "vllm_gateway_keys")
    expect(groups, (dict,), "groups")
    expect(host, (str,), "host")
    expect(tls, (dict,), "the gateway's TLS inputs")
    expect(vip, (dict,), "the gateway's virtual address inputs")
    expect(peers, (dict,), "the gateway's peers inputs")
    return gateway.validate_gateway(enabled=bool(enabled), group=str(group), groups=dict(groups or {}), keys=keys,
                                    max_body_bytes=max_body_bytes, max_tokens=max_tokens,
                                    drain_timeout=drain_timeout, host=str(host), routes=routes, max_n=max_n,
                                    token_window=token_window,
                                    tls=plain(tls) if tls is not None else None,
                                    vip=plain(vip) if vip is not None else None,
                                    peers=plain(peers) if peers is not None else None)


@_filter
def vllm_gateway_vrrp(hostvars, hosts, host):
    """keepalived's view of `host` among the gateway hosts: {priority, src, peers}. Each host's VRRP address is its
    vllm_gateway_vrrp_address, else what the role recorded from its facts (__vllm_gateway_vrrp_address)."""
    from vllm_deploy import gateway

    expect(hosts, (list,), "the gateway hosts")
    addresses = {str(h): _hostvar(hostvars, h, "vllm_gateway_vrrp_address") or _hostvar(hostvars, h, "__vllm_gateway_vrrp_address")
                 for h in hosts or []}
    return gateway.vrrp_instance([str(h) for h in hosts or []], str(host), addresses)


@_filter
def vllm_gateway_peers(hostvars, hosts, host, default_port):
    """HAProxy's peers section for `host` among the gateway hosts: {local, peers: [{name, address, port}]}. Each host's
    address and port are what the role recorded on it (__vllm_gateway_peers_address: its vllm_gateway_peers_address, else
    its vllm_gateway_vrrp_address, else the address of the VIP's interface; __vllm_gateway_peers_port), else its
    inventory's vllm_gateway_peers_address and vllm_gateway_peers_port (a host not in this run), else `default_port`.
    A single gateway host's peer is 127.0.0.1; a public address from the facts is refused (not one the inventory gives)."""
    from vllm_deploy import gateway

    expect(hosts, (list,), "the gateway hosts")
    addresses = {str(h): _hostvar(hostvars, h, "__vllm_gateway_peers_address") or _hostvar(hostvars, h, "vllm_gateway_peers_address")
                 for h in hosts or []}
    ports = {str(h): _hostvar(hostvars, h, "__vllm_gateway_peers_port") or _hostvar(hostvars, h, "vllm_gateway_peers_port", default_port)
             for h in hosts or []}
    chosen = {str(h) for h in hosts or []
              if _hostvar(hostvars, h, "vllm_gateway_peers_address") or _hostvar(hostvars, h, "vllm_gateway_vrrp_address")}
    return gateway.peers_section([str(h) for h in hosts or []], str(host), addresses, ports, chosen)


@_filter
def vllm_gateway_routing_errors(hostvars, hosts, routing, default, prefix_chars, session_header, balance_factor, host=""):
    """vllm_gateway_routing and its knobs, against the vllm_models and vllm_instances of the serving `hosts`
    (inventory only: the validation play runs before any host is touched)."""
    from vllm_deploy import gateway

    expect(hosts, (list,), "the serving hosts")
    expect(host, (str,), "host")
    fleet = {str(h): {"models": plain(_hostvar(hostvars, h, "vllm_models", {})),
                      "instances": plain(_hostvar(hostvars, h, "vllm_instances", []))} for h in hosts or []}
    return gateway.validate_routing(plain(routing), default, prefix_chars, session_header, balance_factor, fleet, host=host)


@_filter
def vllm_gateway_tls_names(hostvars, hosts, extra=None):
    """The subject alternative names of the gateway's generated certificate: every gateway host's inventory
    name, ansible_host, FQDN and default addresses (from facts, where gathered), its vllm_gateway_bind
    unless a wildcard, plus `extra` (vllm_gateway_tls_names and the address the role's own check uses)."""
    from vllm_deploy import gateway

    expect(hosts, (list,), "the gateway hosts")
    expect(extra, (list,), "vllm_gateway_tls_names")
    entries = []
    for host in hosts:
        facts = _hostvar(hostvars, host, "ansible_facts", {}) or {}
        addresses = [(facts.get(k) or {}).get("address") for k in ("default_ipv4", "default_ipv6")]
        entries.append({"name": str(host), "ansible_host": _hostvar(hostvars, host, "ansible_host"),
                        "fqdn": facts.get("fqdn"), "addresses": [a for a in addresses if a],
                        "local": _hostvar(hostvars, host, "vllm_gateway_bind")})
    return gateway.tls_names(plain(entries), plain(extra or []))


class FilterModule:
    def filters(self):
        return _filter.filters()
