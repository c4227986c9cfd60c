"""The fleet's front door: HAProxy's backend table, key table and checks, from every host's instance records.

Pure functions over the instance records that `instances.build_instances` makes
({name, unit, model: {name, path, served_name}, port, bind, ...}); the vllm_gateway role renders
what these return and nothing else:

    backend_table(fleet, gateway_host)  -> [{served_name, backend, servers: [{name, id, host, instance, address, port}]}]
    models_list(table)                  -> the body of GET /v1/models
    key_table(keys)                     -> [{name, key_sha256, rate_per_s, concurrent, tokens_per_min, expires}] (0 = no limit,
                                           never expires); no plain key: the gateway host holds only hashes
    key_hash(key), expiry_epoch(value)  -> what keys.map and expires.map hold for one key
    INFERENCE_ROUTES                    -> the routes the gateway may forward (vllm_gateway_routes)
    tls_names(hosts, extra)             -> the subject alternative names of the gateway's certificate
    vrrp_instance(hosts, host, addrs)   -> {priority, src, peers}: keepalived's view of one gateway host
    peers_section(hosts, host, addrs, ports) -> {local, peers: [{name, address, port}]}: HAProxy's `peers` for the key table
    validate_*(...)                     -> one line per problem: host, variable, problem, fix
    ROUTING_MODES                       -> how a model's backend may pick an instance (vllm_gateway_routing)

`fleet` is {host: {"instances": [records], "address": "10.0.0.5"}}: the address is where the gateway
reaches an engine bound to 0.0.0.0 or :: on that host.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import re
from typing import Any

from vllm_deploy._validation import _is_int

LOOPBACK = ("127.0.0.1", "::1", "localhost")
WILDCARD = ("0.0.0.0", "::")
# HAProxy's proxy and server names: letters, digits, '-', '_', '.', ':'.
_HAPROXY_NAME = re.compile(r"[^A-Za-z0-9_.:-]")
# A served name goes into a map file, a health-check body and a JSON document: keep it to what
# model names use (OpenAI's, Hugging Face's "org/name", vLLM's), never quotes or whitespace.
SERVED_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/+-]{0,127}$")
KEY_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# A key sits in a map file (whitespace splits its columns) and in an Authorization header.
KEY_RE = re.compile(r"^[A-Za-z0-9._~+/=-]{16,256}$")
# A key's token budget is counted in TOKEN_BUDGET_BITS stick-table rates, one per bit of each request's
# cost (haproxy.cfg.j2, vllm-gateway-body.lua): a budget above what they can hold could never be reached.
TOKEN_BUDGET_BITS = 30
TOKEN_BUDGET_MAX = 2 ** TOKEN_BUDGET_BITS - 1
# The window a budget is counted over, in seconds (vllm_gateway_token_budget_window); the budget is scaled to it.
TOKEN_BUDGET_WINDOW_MAX = 600
# The inference routes the gateway may forward (POST, with `model` in the body), by their exact path:
# the ones of vLLM 0.32's OpenAI server that run a model for a client. Everything else the engine
# serves (/metrics, /tokenize's neighbours /detokenize, /docs, /openapi.json, /version, /health,
# /load, /scale_elastic_ep, /v1/chat/completions/batch, ...) is answered 404 by the gateway itself.
INFERENCE_ROUTES = {
    "/v1/completions": "completions",
    "/v1/chat/completions": "chat completions",
    "/v1/embeddings": "embeddings (a pooling model)",
    "/v1/responses": "the Responses API",
    "/v1/messages": "the Anthropic Messages API",
    "/v1/messages/count_tokens": "the Messages API's token count",
    "/tokenize": "tokenize a prompt",
}
DEFAULT_ROUTES = ["/v1/completions", "/v1/chat/completions", "/v1/embeddings"]
# TLS at the gateway: the versions a client may be held to, and what a certificate and key look like
# in the vault (PEM; the key never appears in a message).
TLS_MIN_VERSIONS = ("TLSv1.2", "TLSv1.3")
_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]+-----END CERTIFICATE-----")
_PEM_KEY = re.compile(r"-----BEGIN ((RSA|EC|ENCRYPTED) )?PRIVATE KEY-----[A-Za-z0-9+/=\s]+-----END ((RSA|EC|ENCRYPTED) )?PRIVATE KEY-----")
_DNS_NAME = re.compile(r"^(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$")
# An OpenSSL cipher list / TLS 1.3 suite list goes on HAProxy's bind line as one word.
_CIPHER_LIST = re.compile(r"^[A-Za-z0-9_+!:@=.-]{1,2048}$")


# How a model's backend picks an instance (vllm_gateway_routing): HAProxy's leastconn, or a consistent hash
# of a key the body reader (vllm-gateway-body.lua) finds, bounded by hash-balance-factor.
ROUTING_MODES = {
    "least_conn": "the instance with the fewest requests in flight",
    "session": "a hash of the session header, else of the body's `user`: one client stays on one instance",
    "prefix": "a hash of the prompt's (or the leading messages') first characters: a shared prefix stays on one instance",
}
# The session header goes into haproxy.cfg as req.hdr(NAME): a plain header name, nothing HAProxy would parse.
SESSION_HEADER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")
# HAProxy's hash-balance-factor: 0 (no bound) or a percentage above 100 of the mean requests in flight.
BALANCE_FACTOR_MAX = 1000
# A server's place on HAProxy's consistent-hash ring comes from its numeric id (puid * 4096 + node, hashed):
# ids from the server's name keep every other server's keys where they were when an instance is added or
# removed (declaration order would renumber every later server). Below 10^6, puid * 4096 fits 32 bits.
_SERVER_ID_RANGE = 999_999


def haproxy_name(text: str) -> str:
    """A HAProxy-safe name for `text`; a short hash keeps two names that clean up alike apart."""
    clean = _HAPROXY_NAME.sub("_", text)
    if clean != text:
        clean += "-" + hashlib.sha1(text.encode()).hexdigest()[:6]
    return clean


def backend_name(served_name: str) -> str:
    return "model_" + haproxy_name(served_name)


def server_name(host: str, instance_name: str) -> str:
    return haproxy_name(f"{host}__{instance_name}")


def server_ref(record: dict[str, Any], host: str) -> str:
    """`backend/server` of an instance, as the runtime API names it (`set server <ref> state drain`).
    A multi-node instance is one server, on its first host (rank 0 serves the API), whichever of its
    hosts asks."""
    hosts = (record.get("multinode") or {}).get("hosts") or [host]
    return f"{backend_name(record['model']['served_name'])}/{server_name(hosts[0], record['name'])}"


def instance_address(record: dict[str, Any], host: str, host_address: str | None, gateway_host: str) -> str:
    """Where `gateway_host` reaches the instance; ValueError (host, variable, fix) when it cannot."""
    bind = str(record.get("bind", "127.0.0.1"))
    if bind in LOOPBACK:
        if host != gateway_host:
            raise ValueError(
                f"{host}: instance {record['name']} (bind {bind}) listens on loopback only, which the gateway on "
                f"{gateway_host} cannot reach — bind it to {host}'s private address (vllm_instances[].bind or "
                f"vllm_bind), or run the gateway on {host}")
        return "127.0.0.1" if bind == "localhost" else bind
    if bind in WILDCARD:
        if host == gateway_host:
            return "127.0.0.1" if bind == "0.0.0.0" else "::1"
        if not host_address:
            raise ValueError(
                f"{host}: instance {record['name']} binds {bind} but the gateway does not know {host}'s address — "
                f"set vllm_gateway_backend_address on {host}")
        return str(host_address)
    return bind


def backend_table(fleet: dict[str, Any], gateway_host: str) -> list[dict[str, Any]]:
    """One backend per served name, its servers every instance of the fleet that serves it (sorted: stable config)."""
    by_model: dict[str, list[dict[str, Any]]] = {}
    for host in sorted(fleet):
        entry = fleet[host] or {}
        for record in entry.get("instances") or []:
            if (record.get("multinode") or {}).get("role", "api") != "api":
                continue  # a headless rank or Ray worker serves no API: its instance is rank 0's server
            address = instance_address(record, host, entry.get("address"), gateway_host)
            by_model.setdefault(record["model"]["served_name"], []).append({
                "name": server_name(host, record["name"]),
                "host": host,
                "instance": record["name"],
                "address": address,
                "address_port": f"[{address}]:{record['port']}" if ":" in address else f"{address}:{record['port']}",
                "port": record["port"],
            })
    for servers in by_model.values():
        taken: set[int] = set()
        for server in sorted(servers, key=lambda s: s["name"]):
            server["id"] = _server_id(server["name"], taken)
    return [{"served_name": served, "backend": backend_name(served), "servers": servers}
            for served, servers in sorted(by_model.items())]


def _server_id(name: str, taken: set[int]) -> int:
    """A stable id for server `name` (1.._SERVER_ID_RANGE), the next free one on a collision (in name order)."""
    sid = int(hashlib.sha1(name.encode()).hexdigest()[:8], 16) % _SERVER_ID_RANGE + 1
    while sid in taken:
        sid = sid % _SERVER_ID_RANGE + 1
    taken.add(sid)
    return sid


def models_list(table: list[dict[str, Any]]) -> dict[str, Any]:
    """What the gateway answers to GET /v1/models: the fleet's served names, OpenAI's list shape."""
    return {"object": "list",
            "data": [{"id": b["served_name"], "object": "model", "created": 0, "owned_by": "vllm-deploy"} for b in table]}


def key_hash(key: str) -> str:
    """What keys.map holds for a key: its SHA-256 in lower-case hex, as the gateway computes it from the
    request (`http_auth_bearer,sha2(256),hex,lower`), so the plain key is nowhere on the gateway host."""
    return hashlib.sha256(key.encode()).hexdigest()


def expiry_epoch(value: Any) -> int | None:
    """A key's `expires` as Unix seconds (what expires.map holds; 0 = never), None when it is not one.
    A date (YAML reads 2027-01-31 as one) is that day's 00:00 UTC: the key is refused from then on. A
    timestamp must name its offset (2027-01-31T18:00:00+01:00, or Z): the controller's time zone is not
    the gateway's. vllm-gateway-ctl parses --expires the same way (it runs on the host, standard library
    only, so it keeps its own copy)."""
    if value is None or value == "" or value == 0:
        return 0
    if isinstance(value, datetime.datetime):
        moment = value
    elif isinstance(value, datetime.date):
        moment = datetime.datetime(value.year, value.month, value.day, tzinfo=datetime.timezone.utc)
    elif isinstance(value, str):
        text = value.strip()
        try:
            if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
                return expiry_epoch(datetime.date.fromisoformat(text))
            moment = datetime.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
        except ValueError:
            return None
    else:
        return None
    if moment.tzinfo is None:
        return None
    return int(moment.timestamp())


def key_table(keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keys as the map files list them: the key's hash (never the key), limits filled in (0 = no limit),
    expiry in Unix seconds (0 = never); call validate_keys first."""
    return [{"name": k["name"], "key_sha256": key_hash(k["key"]), "rate_per_s": int(k.get("rate_per_s") or 0),
             "concurrent": int(k.get("concurrent") or 0), "tokens_per_min": int(k.get("tokens_per_min") or 0),
             "expires": expiry_epoch(k.get("expires")) or 0} for k in keys]


def validate_keys(keys: Any, host: str = "") -> list[str]:
    """vllm_gateway_keys: [{name, key, rate_per_s?, concurrent?, tokens_per_min?, expires?}] — never quotes a key in a message."""
    where = f"{host}: " if host else ""
    if not isinstance(keys, list) or not keys:
        return [f"{where}vllm_gateway_keys: must be a non-empty list of {{name, key, rate_per_s, concurrent}} — "
                "without a key nobody can use the gateway; add one per team, the key from the vault"]
    errors: list[str] = []
    names: set[str] = set()
    secrets: dict[str, str] = {}
    for i, entry in enumerate(keys):
        var = f"vllm_gateway_keys[{i}]"
        if not isinstance(entry, dict):
            errors.append(f"{where}{var}: must be a mapping — give name, key and optionally rate_per_s, concurrent")
            continue
        name = entry.get("name")
        if not isinstance(name, str) or not KEY_NAME_RE.match(name):
            errors.append(f"{where}{var}.name: {name!r} is not a key name — use letters, digits, '.', '_' or '-' (e.g. team-search)")
        elif name in names:
            errors.append(f"{where}{var}.name: {name!r} is used twice — give each key its own name")
        else:
            names.add(name)
        label = name if isinstance(name, str) else var
        key = entry.get("key")
        if not isinstance(key, str) or not KEY_RE.match(key):
            errors.append(f"{where}{var}.key: the key of {label} is missing or not 16-256 characters of [A-Za-z0-9._~+/=-] — "
                          "put a random value in the vault (e.g. `openssl rand -hex 24`) and reference it here")
        elif key in secrets:
            errors.append(f"{where}{var}.key: {label} has the same key as {secrets[key]} — give each key its own value")
        else:
            secrets[key] = label
        for limit in ("rate_per_s", "concurrent"):
            value = entry.get(limit)
            if value is not None and (not _is_int(value) or value < 0):
                errors.append(f"{where}{var}.{limit}: must be a whole number >= 0 (0 or absent: no limit), got {value!r} — "
                              f"e.g. {limit}: {10 if limit == 'rate_per_s' else 4}")
        budget = entry.get("tokens_per_min")
        if budget is not None and (not _is_int(budget) or not 0 <= budget <= TOKEN_BUDGET_MAX):
            errors.append(f"{where}{var}.tokens_per_min: must be a whole number 0-{TOKEN_BUDGET_MAX} (0 or absent: no budget), "
                          f"got {budget!r} — the output tokens {label} may ask for per minute, e.g. tokens_per_min: 200000")
        expires = entry.get("expires")
        if expires is not None and (isinstance(expires, bool) or expiry_epoch(expires) is None):
            errors.append(f"{where}{var}.expires: {str(expires)!r} is not a date or a timestamp with its offset — "
                          "give 2027-01-31 (refused from that day's 00:00 UTC) or 2027-01-31T18:00:00+01:00")
        unknown = sorted(set(entry) - {"name", "key", "rate_per_s", "concurrent", "tokens_per_min", "expires"})
        if unknown:
            errors.append(f"{where}{var}: unknown settings {', '.join(unknown)} — a key takes name, key, rate_per_s, "
                          "concurrent, tokens_per_min, expires")
    return errors


def validate_served_names(models: Any, host: str = "") -> list[str]:
    """Served names the gateway routes on must be plain model names (they go into a map file and a check body)."""
    if not isinstance(models, dict):
        return []
    where = f"{host}: " if host else ""
    errors = []
    for mname, model in models.items():
        served = (model or {}).get("served_name", mname) if isinstance(model, dict) else mname
        if isinstance(served, str) and not SERVED_NAME_RE.match(served):
            errors.append(f"{where}vllm_models.{mname}.served_name: {served!r} cannot be routed by the gateway — "
                          "use letters, digits and . _ : / + - (e.g. qwen2.5-7b or Qwen/Qwen2.5-7B-Instruct)")
    return errors


def validate_routes(routes: Any, host: str = "") -> list[str]:
    """vllm_gateway_routes: a non-empty list of the inference routes the gateway knows (INFERENCE_ROUTES)."""
    where = f"{host}: " if host else ""
    known = ", ".join(INFERENCE_ROUTES)
    if not isinstance(routes, list) or not routes:
        return [f"{where}vllm_gateway_routes: must be a non-empty list of inference routes, got {routes!r} — "
                f"e.g. {DEFAULT_ROUTES} (known: {known})"]
    errors = []
    for i, route in enumerate(routes):
        if route not in INFERENCE_ROUTES:
            errors.append(f"{where}vllm_gateway_routes[{i}]: {route!r} is not an inference route the gateway forwards — "
                          f"use one of {known} (GET /v1/models is always answered by the gateway itself)")
    return errors


def _served_names(models: Any) -> dict[str, str]:
    """served name -> vllm_models key, of one host's vllm_models."""
    out = {}
    for key, model in (models or {}).items() if isinstance(models, dict) else ():
        served = model.get("served_name", key) if isinstance(model, dict) else key
        out[str(served)] = str(key)
    return out


def validate_routing(routing: Any, default: Any, prefix_chars: Any, session_header: Any, balance_factor: Any,
                     fleet: dict[str, Any], host: str = "") -> list[str]:
    """vllm_gateway_routing ({served name: mode}), its default and its knobs, against the serving hosts'
    inventory (`fleet`: {host: {"models": vllm_models, "instances": vllm_instances}}): a mode names a model
    the fleet serves, and no engine of a prefix- or session-routed model turns prefix caching off."""
    where = f"{host}: " if host else ""
    modes = ", ".join(ROUTING_MODES)
    errors = []
    if default not in ROUTING_MODES:
        errors.append(f"{where}vllm_gateway_routing_default: {default!r} is not a routing mode — use one of {modes}")
    served: dict[str, list[tuple[str, dict]]] = {}
    for h in sorted(fleet):
        names = _served_names((fleet[h] or {}).get("models"))
        for served_name in names:
            served.setdefault(served_name, [])
        for inst in (fleet[h] or {}).get("instances") or []:
            if isinstance(inst, dict) and isinstance(inst.get("model"), str):
                model = ((fleet[h] or {}).get("models") or {}).get(inst["model"])
                served_name = model.get("served_name", inst["model"]) if isinstance(model, dict) else inst["model"]
                served.setdefault(str(served_name), []).append((h, inst))
    if not isinstance(routing, dict):
        errors.append(f"{where}vllm_gateway_routing: must be a mapping of served model name to {modes}, got {routing!r} — "
                      "e.g. {my-model: prefix}; {} routes every model with vllm_gateway_routing_default")
        routing = {}
    for name, mode in routing.items():
        var = f"vllm_gateway_routing.{name}"
        if mode not in ROUTING_MODES:
            errors.append(f"{where}{var}: {mode!r} is not a routing mode — use one of {modes}")
        if name not in served:
            known = ", ".join(sorted(served)) or "none"
            errors.append(f"{where}{var}: no serving host has a model served as {name!r} (served: {known}) — "
                          "key vllm_gateway_routing by the served_name clients send as `model`")
    for name in sorted(served):
        mode = routing.get(name, default)
        if mode not in ("prefix", "session"):
            continue
        for h, inst in served[name]:
            if isinstance(inst.get("flags"), dict) and inst["flags"].get("enable_prefix_caching") is False:
                errors.append(f"{where}vllm_gateway_routing.{name}: {mode} routing keeps a prefix on one instance for its "
                              f"cache, but instance {inst.get('name')} on {h} sets flags.enable_prefix_caching: false — "
                              f"remove that flag (vLLM caches prefixes by default), or route {name} with least_conn")
    if not _is_int(prefix_chars) or not 16 <= prefix_chars <= 65536:
        errors.append(f"{where}vllm_gateway_prefix_chars: must be a whole number of characters 16-65536, got {prefix_chars!r} — "
                      "e.g. 1024 (about the length of a system prompt; longer keys split users of one prompt apart)")
    if not isinstance(session_header, str) or not SESSION_HEADER_RE.match(session_header):
        errors.append(f"{where}vllm_gateway_session_header: {session_header!r} is not a header name — "
                      "use letters, digits and '-' (e.g. X-Session-Id)")
    if not _is_int(balance_factor) or not (balance_factor == 0 or 100 < balance_factor <= BALANCE_FACTOR_MAX):
        errors.append(f"{where}vllm_gateway_hash_balance_factor: must be 0 (no bound) or a whole percentage 101-{BALANCE_FACTOR_MAX}, "
                      f"got {balance_factor!r} — e.g. 150: no instance takes more than 1.5x the mean requests in flight")
    return errors


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def tls_names(hosts: list[dict[str, Any]], extra: list[str] | None = None) -> list[str]:
    """The subject alternative names of the gateway's generated certificate, as community.crypto's
    openssl_csr takes them ("DNS:gw1", "IP:10.0.0.5"): each gateway host's inventory name, ansible_host,
    FQDN and addresses, the address its own check uses (`local`: the handler verifies the certificate
    too), and vllm_gateway_tls_names. `hosts` is [{name, ansible_host, fqdn, addresses, local}], any
    field absent or empty. Sorted and without duplicates, so the same inventory gives the same
    certificate on every run."""
    seen: set[str] = set()
    for entry in hosts:
        values = [entry.get("name"), entry.get("ansible_host"), entry.get("fqdn"), entry.get("local"),
                  *(entry.get("addresses") or [])]
        for value in values:
            if isinstance(value, str) and value and value not in ("0.0.0.0", "::"):
                seen.add(value)
    seen.update(n for n in (extra or []) if isinstance(n, str) and n)
    out = []
    for value in seen:
        if _is_ip(value):
            out.append(f"IP:{ipaddress.ip_address(value)}")
        elif _DNS_NAME.match(value):
            out.append(f"DNS:{value.rstrip('.')}")
    return sorted(set(out))


def validate_tls(*, enabled: Any, cert: Any, key: Any, min_version: Any, ciphers: Any, ciphersuites: Any,
                 names: Any, ca_dir: Any, redirect_port: Any, port: Any, metrics_port: Any = None,
                 host: str = "") -> list[str]:
    """TLS at the gateway (vllm_gateway_tls and its companions): a certificate with its key or the
    generated CA, a version and cipher lists HAProxy takes, names a certificate can hold, and a plain-HTTP
    redirect port of its own. Never quotes a key or a certificate."""
    where = f"{host}: " if host else ""
    if not isinstance(enabled, bool):
        return [f"{where}vllm_gateway_tls: must be true or false, got {enabled!r} — true serves HTTPS on vllm_gateway_port"]
    errors = _redirect_port_errors(where, enabled, redirect_port, port, metrics_port)
    if not enabled:
        return errors
    return (errors + _cert_key_errors(where, cert, key, ca_dir) + _tls_protocol_errors(where, min_version, ciphers, ciphersuites)
            + _tls_name_errors(where, names))


def _redirect_port_errors(where: str, enabled: bool, redirect_port: Any, port: Any, metrics_port: Any) -> list[str]:
    """vllm_gateway_http_redirect_port: null, or a port of its own while TLS is on."""
    if redirect_port is None:
        return []
    if not _is_int(redirect_port) or not 1 <= redirect_port <= 65535:
        return [f"{where}vllm_gateway_http_redirect_port: must be a port 1-65535 or null, got {redirect_port!r} — "
                "e.g. 80 (plain HTTP there answers 308 to https)"]
    if not enabled:
        return [f"{where}vllm_gateway_http_redirect_port: set to {redirect_port} but vllm_gateway_tls is false, so "
                "there is no https to redirect to — set vllm_gateway_tls: true, or the port to null"]
    if redirect_port == port:
        return [f"{where}vllm_gateway_http_redirect_port: {redirect_port} is vllm_gateway_port, where TLS is served — "
                "give the plain-HTTP redirect a port of its own (e.g. 80), or null"]
    if redirect_port == metrics_port:
        return [f"{where}vllm_gateway_http_redirect_port: {redirect_port} is vllm_gateway_metrics_port — "
                "give the plain-HTTP redirect a port of its own (e.g. 80), or null"]
    return []


def _cert_key_errors(where: str, cert: Any, key: Any, ca_dir: Any) -> list[str]:
    """A PEM certificate with its unencrypted PEM key, or neither and a directory for the generated CA."""
    errors = []
    cert_given = cert not in (None, "")
    key_given = key not in (None, "")
    if cert_given and not key_given:
        errors.append(f"{where}vllm_gateway_tls_key: empty while vllm_gateway_tls_cert is set — give the certificate's "
                      "private key from the vault (PEM), or leave both empty for the generated CA")
    elif key_given and not cert_given:
        errors.append(f"{where}vllm_gateway_tls_cert: empty while vllm_gateway_tls_key is set — give the certificate "
                      "(PEM, server certificate first, then any intermediates) from the vault, or leave both empty for the generated CA")
    if cert_given and (not isinstance(cert, str) or not _PEM_CERT.search(cert)):
        errors.append(f"{where}vllm_gateway_tls_cert: not a PEM certificate (-----BEGIN CERTIFICATE-----) — "
                      "put the server certificate's PEM text in the vault and reference it here")
    if key_given:
        if isinstance(key, str) and "ENCRYPTED" in key:
            errors.append(f"{where}vllm_gateway_tls_key: the key is protected by a passphrase, which HAProxy cannot ask for "
                          "at start — store it decrypted in the vault (openssl pkey -in KEY -out PLAIN)")
        elif not isinstance(key, str) or not _PEM_KEY.search(key):
            errors.append(f"{where}vllm_gateway_tls_key: not a PEM private key (-----BEGIN PRIVATE KEY-----) — "
                          "put the key's PEM text in the vault and reference it here")
    if not cert_given and not key_given and (not isinstance(ca_dir, str) or not ca_dir.strip()):
        errors.append(f"{where}vllm_gateway_tls_ca_dir: empty, and no vllm_gateway_tls_cert is given — "
                      "name a directory on the controller for the generated CA (default: .vllm-gateway-ca in the inventory directory)")
    return errors


def _tls_protocol_errors(where: str, min_version: Any, ciphers: Any, ciphersuites: Any) -> list[str]:
    """A minimum version of 1.2 or 1.3, and each cipher list one OpenSSL list."""
    errors = []
    if min_version not in TLS_MIN_VERSIONS:
        errors.append(f"{where}vllm_gateway_tls_min_version: {min_version!r} is not offered — use TLSv1.2 (default) or "
                      "TLSv1.3; TLS 1.0 and 1.1 are not allowed")
    for var, value, example in (("vllm_gateway_tls_ciphers", ciphers, "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256"),
                                ("vllm_gateway_tls_ciphersuites", ciphersuites, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384")):
        if not isinstance(value, str) or not _CIPHER_LIST.match(value):
            errors.append(f"{where}{var}: must be one OpenSSL list, names joined by ':' without spaces, got {value!r} — "
                          f"e.g. {example} (the role's default is Mozilla's intermediate profile)")
    return errors


def _tls_name_errors(where: str, names: Any) -> list[str]:
    """vllm_gateway_tls_names: a list of DNS names and IP addresses."""
    if not isinstance(names, list):
        return [f"{where}vllm_gateway_tls_names: must be a list of DNS names or IP addresses, got {names!r} — "
                "e.g. [llm.example.internal, 10.0.0.10]"]
    return [f"{where}vllm_gateway_tls_names[{i}]: {name!r} is neither a DNS name nor an IP address — "
            "give the name or address clients use to reach the gateway (e.g. llm.example.internal)"
            for i, name in enumerate(names) if not isinstance(name, str) or not (_is_ip(name) or _DNS_NAME.match(name))]


# Linux interface names: at most 15 bytes (IFNAMSIZ - 1), no '/', ':' or whitespace; a VLAN's dot is fine.
_IFNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,14}$")
# VRRP priorities: 255 is the address owner's, 0 "leaving now"; the first gateway host gets the highest.
VRRP_TOP_PRIORITY = 200


def _vip_interface(vip: Any) -> ipaddress.IPv4Interface | None:
    """An IPv4 address with its prefix ("10.0.0.50/24"), else None."""
    if not isinstance(vip, str) or vip.count("/") != 1:
        return None
    try:
        iface = ipaddress.ip_interface(vip)
    except ValueError:
        return None
    return iface if isinstance(iface, ipaddress.IPv4Interface) else None


def validate_vip(*, vip: Any, interface: Any, vrid: Any, hosts: list[str], bind: Any, host: str = "") -> list[str]:
    """The virtual address in front of several gateway hosts (vllm_gateway_vip and its companions):
    an IPv4 address with its prefix, a VRID 1-255, a safe interface name, two or more gateway hosts,
    and HAProxy bound to every address."""
    where = f"{host}: " if host else ""
    if vip in (None, ""):
        return []
    errors = []
    iface = _vip_interface(vip)
    ip = iface.ip if iface is not None else None
    if iface is None:
        errors.append(f"{where}vllm_gateway_vip: {vip!r} is not an IPv4 address with its prefix — give the shared address "
                      "and its network's prefix length, e.g. 10.0.0.50/24 (on the gateway hosts' own network), or leave it empty")
    elif ip.is_loopback or ip.is_multicast or ip.is_unspecified or ip.is_link_local or iface.network.prefixlen == 0:
        errors.append(f"{where}vllm_gateway_vip: {vip} cannot be a shared service address (loopback, multicast, link-local "
                      "or 0.0.0.0) — give a free address of the gateway hosts' network, e.g. 10.0.0.50/24")
    elif iface.network.prefixlen < 31 and ip in (iface.network.network_address, iface.network.broadcast_address):
        errors.append(f"{where}vllm_gateway_vip: {ip} is the network or broadcast address of {iface.network} — "
                      "give a free host address of that network")
    if not _is_int(vrid) or not 1 <= vrid <= 255:
        errors.append(f"{where}vllm_gateway_vrid: must be a whole number 1-255, got {vrid!r} — pick one no other VRRP "
                      "router on that network uses (e.g. 51)")
    if interface not in (None, "") and (not isinstance(interface, str) or not _IFNAME.match(interface)):
        errors.append(f"{where}vllm_gateway_vip_interface: {interface!r} is not a network interface name — give the "
                      "interface the VIP's network is on (e.g. eth0, ens3, bond0.42), or leave it empty for the default route's")
    if len(hosts) < 2:
        errors.append(f"{where}vllm_gateway_vip: set to {vip!r} but the gateway group has {len(hosts)} host(s): nothing to fail "
                      "over to — add a second gateway host to the group, or leave vllm_gateway_vip empty")
    # Every address: HAProxy answers on the VIP the moment it arrives (no ip_nonlocal_bind), and keepalived's
    # check reaches this host's own HAProxy at 127.0.0.1 (bound to the VIP, a backup's check would reach the master's).
    if bind not in WILDCARD:
        errors.append(f"{where}vllm_gateway_bind: {bind!r} — with vllm_gateway_vip the gateway listens on every address, so "
                      f"it answers on the VIP as soon as the address moves to it and its check tests its own HAProxy — "
                      "set vllm_gateway_bind: 0.0.0.0 (restrict who reaches it with a firewall)")
    return errors


def _require_addresses(host: str, hosts: list[str], addresses: dict[str, Any], what: str, variable: str) -> None:
    """ValueError naming the gateway hosts whose `what` address this run does not know, and the fix."""
    missing = [h for h in hosts if not addresses.get(h)]
    if missing:
        raise ValueError(
            f"{host}: the {what} address of {', '.join(missing)} is not known (no network facts in this run) — run the "
            f"gateway play on every gateway host together (e.g. -l gpu-nodes:vllm_gateway), or set {variable} "
            f"on {', '.join(missing)}")


def vrrp_instance(hosts: list[str], host: str, addresses: dict[str, Any]) -> dict[str, Any]:
    """keepalived's view of `host` among the gateway `hosts` (the group, in inventory order): its priority
    (the first host VRRP_TOP_PRIORITY, each next one less), its own VRRP address and its unicast peers.
    `addresses` maps each host to its address on the VIP's network (None: not known in this run).
    ValueError naming the hosts and the fix when a peer's address is not known."""
    if host not in hosts:
        raise ValueError(f"{host}: not a gateway host ({', '.join(hosts)}), so it holds no share of the VIP")
    _require_addresses(host, hosts, addresses, "VRRP", "vllm_gateway_vrrp_address")
    src = str(addresses[host])
    peers = [str(addresses[h]) for h in hosts if h != host]
    if src in peers:
        twin = [h for h in hosts if h != host and str(addresses[h]) == src]
        raise ValueError(f"{host}: its VRRP address {src} is also {', '.join(twin)}'s — give each gateway host its own "
                         "address on the VIP's network (vllm_gateway_vrrp_address)")
    return {"priority": max(1, VRRP_TOP_PRIORITY - hosts.index(host)), "src": src, "peers": peers}


def _peer_address_error(value: Any) -> str | None:
    """Why `value` cannot be a gateway host's peers address (one IPv4 address another host can connect to), or None."""
    if not isinstance(value, str) or not value:
        return "is not an IPv4 address"
    try:
        ip = ipaddress.IPv4Address(value)
    except ValueError:
        return "is not an IPv4 address"
    if ip.is_unspecified or ip.is_multicast or ip.is_loopback or ip.is_link_local or ip == ipaddress.IPv4Address("255.255.255.255"):
        return "cannot be reached by the other gateway hosts (0.0.0.0, loopback, multicast, link-local or broadcast)"
    return None


def validate_peers(*, port: Any, address: Any, vrrp_address: Any, hosts: list[str], other_ports: dict[str, Any],
                   host: str = "") -> list[str]:
    """HAProxy's peers between the gateway hosts (vllm_gateway_peers_port, vllm_gateway_peers_address): a port
    1-65535 of its own, and where an address is given (or the VRRP address it defaults to) one IPv4 address the
    other gateway hosts reach. A single gateway host's peer is 127.0.0.1: its address is not read."""
    where = f"{host}: " if host else ""
    errors = []
    if not _is_int(port) or not 1 <= port <= 65535:
        errors.append(f"{where}vllm_gateway_peers_port: must be a port 1-65535, got {port!r} — e.g. 10100 (the gateway hosts "
                      "share their keys' counters there; open it between them only)")
    else:
        for var, other in other_ports.items():
            if other is not None and other == port:
                errors.append(f"{where}vllm_gateway_peers_port: {port} is {var} — give the peers a port of their own (e.g. 10100)")
    if len(hosts) > 1:
        for var, value in (("vllm_gateway_peers_address", address), ("vllm_gateway_vrrp_address", vrrp_address)):
            if value in (None, ""):
                continue
            problem = _peer_address_error(value)
            if problem:
                errors.append(f"{where}{var}: {value!r} {problem} — give {host or 'this host'}'s own IPv4 address on the "
                              "gateway hosts' private network (e.g. 10.0.0.11), or leave it empty for the address of the "
                              "VIP's interface")
            if address not in (None, ""):
                break  # the peers address is given: the VRRP address is keepalived's alone
    return errors


def peers_section(hosts: list[str], host: str, addresses: dict[str, Any], ports: dict[str, Any],
                  chosen: set[str] | None = None) -> dict[str, Any]:
    """HAProxy's `peers` section for `host` among the gateway `hosts` (the group, in inventory order): every host
    a peer named from its inventory name, at its address (`addresses`: host -> IPv4 address on the private network,
    None where not known in this run) and port (`ports`: host -> its vllm_gateway_peers_port); `local` is this host's
    peer name (global `localpeer`). A single gateway host is its own only peer, on 127.0.0.1: enough for a reload to
    hand the table to the new process. ValueError (host, variable, fix) when an address or port is missing, not one
    HAProxy may be given, or shared, or when an address found from the facts (a host not in `chosen`, the hosts whose
    address the inventory gives) is a public one: the peers protocol is not encrypted."""
    if host not in hosts:
        raise ValueError(f"{host}: not a gateway host ({', '.join(hosts)}), so it has no place among the gateway's peers")
    for h in hosts:
        if not _is_int(ports.get(h)) or not 1 <= ports[h] <= 65535:
            raise ValueError(f"{h}: vllm_gateway_peers_port: must be a port 1-65535, got {ports.get(h)!r} — e.g. 10100")
    names = {h: haproxy_name(h) for h in hosts}
    if len(hosts) == 1:
        return {"local": names[host], "peers": [{"name": names[host], "address": "127.0.0.1", "port": ports[host]}]}
    _require_addresses(host, hosts, addresses, "peers", "vllm_gateway_peers_address")
    peers, seen = [], {}
    for h in hosts:
        address = str(addresses[h])
        problem = _peer_address_error(address)
        if problem:
            raise ValueError(f"{h}: its peers address {address!r} {problem} — set vllm_gateway_peers_address on {h} to its "
                             "IPv4 address on the gateway hosts' private network")
        if h not in (chosen or set()) and ipaddress.IPv4Address(address).is_global:
            raise ValueError(f"{h}: its peers address {address} (its default route's, from the facts) is a public address, and the "
                             "peers protocol is not encrypted — set vllm_gateway_peers_address (or vllm_gateway_vip_interface) on "
                             f"{h} to its address on the gateway hosts' private network, or to {address} to accept it")
        if (address, ports[h]) in seen:
            raise ValueError(f"{h}: its peers address {address}:{ports[h]} is also {seen[address, ports[h]]}'s — give each "
                             "gateway host its own address on the private network (vllm_gateway_peers_address)")
        seen[address, ports[h]] = h
        peers.append({"name": names[h], "address": address, "port": ports[h]})
    return {"local": names[host], "peers": peers}


def validate_gateway(*, enabled: bool, group: str, groups: dict[str, list[str]], keys: Any, max_body_bytes: Any,
                     max_tokens: Any, drain_timeout: Any, host: str = "", routes: Any = None,
                     max_n: Any = None, tls: dict[str, Any] | None = None, vip: dict[str, Any] | None = None,
                     token_window: Any = 60, peers: dict[str, Any] | None = None) -> list[str]:
    """The gateway's own inputs: the group exists and has hosts, keys well formed, limits in range,
    the routes it forwards known inference routes, TLS (`tls`: validate_tls's inputs) consistent, the
    virtual address (`vip`: validate_vip's inputs but the hosts, which are the group's) usable, the peers
    (`peers`: validate_peers's inputs but the hosts) a port of their own and addresses the other hosts reach."""
    if not enabled:
        return []
    where = f"{host}: " if host else ""
    errors = []
    if not groups.get(group):
        errors.append(f"{where}vllm_gateway_group: group {group!r} has no hosts but vllm_gateway_enabled is true — "
                      f"add the gateway host(s) to [{group}] in the inventory (it may be a GPU node), or set vllm_gateway_enabled: false")
    errors += validate_keys(keys, host)
    if not _is_int(max_body_bytes) or not 1024 <= max_body_bytes <= 64 * 1024 * 1024:
        errors.append(f"{where}vllm_gateway_max_body_bytes: must be a whole number of bytes 1024-67108864, got {max_body_bytes!r} — "
                      "e.g. 262144 (each connection buffers this much twice)")
    if max_tokens is not None and (not _is_int(max_tokens) or max_tokens < 1):
        errors.append(f"{where}vllm_gateway_max_tokens: must be a whole number >= 1 or null (no cap), got {max_tokens!r} — e.g. 4096")
    if max_n is not None and (not _is_int(max_n) or max_n < 1):
        errors.append(f"{where}vllm_gateway_max_n: must be a whole number >= 1 or null (no cap), got {max_n!r} — "
                      "e.g. 8 (completions one request may ask for with n or best_of)")
    if not _is_int(token_window) or not 1 <= token_window <= TOKEN_BUDGET_WINDOW_MAX:
        errors.append(f"{where}vllm_gateway_token_budget_window: must be whole seconds 1-{TOKEN_BUDGET_WINDOW_MAX}, got "
                      f"{token_window!r} — e.g. 60 (each key's tokens_per_min counted per minute) or 10 (a sixth of it per 10 s)")
    if not _is_int(drain_timeout) or drain_timeout < 0:
        errors.append(f"{where}vllm_gateway_drain_timeout: must be whole seconds >= 0, got {drain_timeout!r} — "
                      "e.g. 300 (the longest generation you let finish before a restart)")
    errors += validate_routes(DEFAULT_ROUTES if routes is None else routes, host)
    if tls is not None:
        errors += validate_tls(**tls, host=host)
    if vip is not None:
        errors += validate_vip(**vip, hosts=list(groups.get(group) or []), host=host)
    if peers is not None:
        errors += validate_peers(**peers, hosts=list(groups.get(group) or []), host=host)
    return errors


def engine_key_mismatches(fleet_keys: dict[str, str], gateway_key: str) -> list[str]:
    """Hosts whose engines expect another API key than the one the gateway adds (values never shown)."""
    return [f"{host}: vault_vllm_api_key differs from the gateway's engine key (vllm_gateway_engine_key) — "
            "give the fleet's engines one key, or set vllm_gateway_engine_key to it"
            for host, key in sorted(fleet_keys.items()) if key != gateway_key]


def canary_figures(window: dict[str, Any]) -> str:
    """What one side of a canary verdict served over the window, in words (the rollout prints it):
    '120 requests, 0 errors, time to first token 14.2 ms, inter-token latency 5.1 ms (engine metrics)',
    or the gateway's mean time per request where the engines' metrics were not read."""
    text = f"{window.get('requests', 0)} requests, {window.get('errors', 0)} errors"
    if window.get("latency_source") == "engine metrics":
        return (f"{text}, time to first token {window.get('ttft_ms'):g} ms, "
                f"inter-token latency {window.get('itl_ms'):g} ms (engine metrics)")
    return f"{text}, {window.get('ttime_ms', 0)} ms per request (the gateway's average)"


def node_records(vllm_instances: list[dict[str, Any]], vllm_models: dict[str, Any],
                 multinode_instances: list[dict[str, Any]] | None = None, host: str = "") -> list[dict[str, Any]]:
    """The part of each instance record the gateway names a server by, from the inventory alone
    (rebuild-node.yml drains a node before its records are planned): the node's own instances and
    the multi-node instances `host` is a rank of (the whole instance stops with any of its ranks)."""
    out = []
    for inst in vllm_instances or []:
        model = (vllm_models or {}).get(inst["model"]) or {}
        out.append({"name": inst["name"], "model": {"name": inst["model"], "served_name": model.get("served_name", inst["model"])}})
    for inst in multinode_instances or []:
        hosts = inst.get("hosts") if isinstance(inst, dict) else None
        if isinstance(hosts, list) and host in hosts:
            model = (vllm_models or {}).get(inst.get("model")) or {}
            out.append({"name": inst["name"], "model": {"name": inst["model"], "served_name": model.get("served_name", inst["model"])},
                        "multinode": {"hosts": list(hosts)}})
    return out
