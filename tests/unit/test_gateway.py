"""The gateway's tables and checks, from instance records shaped as instances.build_instance makes them."""

from __future__ import annotations

import datetime
import hashlib

import pytest

from vllm_deploy import gateway, instances

DEFAULTS = {"hf_home": "/var/lib/vllm/hf", "cache_root": "/var/lib/vllm/cache", "engine": "cpu"}
MODELS = {"tiny-a": {"path": "/srv/models/a", "served_name": "tiny-a"},
          "qwen": {"path": "/srv/models/q", "served_name": "Qwen/Qwen2.5-7B-Instruct"}}


def record(name, model, port, bind="127.0.0.1"):
    """A real instance record (the one the templates render), not a hand-made dict."""
    inst = {"name": name, "model": model, "gpus": [], "port": port, "bind": bind, "flags": {"max_model_len": 256}}
    return instances.build_instance(inst, MODELS[model], model, gpu_facts={}, plan=None, defaults=DEFAULTS)


FLEET = {
    "node2": {"instances": [record("b", "tiny-a", 8001, "0.0.0.0"), record("q", "qwen", 8002, "10.0.0.12")],
              "address": "10.0.0.2"},
    "node1": {"instances": [record("a", "tiny-a", 8000)], "address": "10.0.0.1"},
}


def test_backend_table_groups_every_host_s_instances_by_served_name():
    table = gateway.backend_table(FLEET, "node1")
    assert [b["served_name"] for b in table] == ["Qwen/Qwen2.5-7B-Instruct", "tiny-a"]
    tiny = table[1]
    assert tiny["backend"] == "model_tiny-a"
    assert [(s["name"], s["address_port"]) for s in tiny["servers"]] == [
        ("node1__a", "127.0.0.1:8000"),   # loopback: the gateway runs on node1
        ("node2__b", "10.0.0.2:8001"),    # 0.0.0.0: the host's address
    ]
    assert table[0]["servers"][0]["address_port"] == "10.0.0.12:8002"  # a specific bind is used as is


def test_haproxy_names_stay_legal_and_distinct():
    qwen = gateway.backend_table(FLEET, "node1")[0]["backend"]
    assert qwen.startswith("model_Qwen_Qwen2.5-7B-Instruct-") and "/" not in qwen
    assert gateway.backend_name("a/b") != gateway.backend_name("a_b")
    assert gateway.backend_name("a_b") == "model_a_b"


@pytest.mark.parametrize("bind,gateway_host,expected", [
    ("127.0.0.1", "node1", "127.0.0.1:8000"),
    ("0.0.0.0", "node1", "127.0.0.1:8000"),   # the gateway's own node: loopback
    ("::", "node1", "[::1]:8000"),
    ("0.0.0.0", "gw", "10.0.0.1:8000"),
    ("fd00::5", "gw", "[fd00::5]:8000"),
])
def test_instance_address(bind, gateway_host, expected):
    fleet = {"node1": {"instances": [record("a", "tiny-a", 8000, bind)], "address": "10.0.0.1"}}
    assert gateway.backend_table(fleet, gateway_host)[0]["servers"][0]["address_port"] == expected


def test_loopback_engine_on_another_host_is_refused_naming_host_and_fix():
    with pytest.raises(ValueError) as err:
        gateway.backend_table(FLEET, "gw")
    message = str(err.value)
    assert message.startswith("node1: instance a (bind 127.0.0.1)")
    assert "vllm_instances[].bind" in message and "gw" in message


def test_wildcard_engine_without_a_known_address_is_refused():
    fleet = {"node2": {"instances": [record("b", "tiny-a", 8001, "0.0.0.0")], "address": ""}}
    with pytest.raises(ValueError, match="^node2: .*vllm_gateway_backend_address"):
        gateway.backend_table(fleet, "gw")


def test_server_ref_matches_the_table():
    rec = FLEET["node2"]["instances"][0]
    table = gateway.backend_table(FLEET, "node1")
    server = next(s for s in table[1]["servers"] if s["instance"] == "b")
    assert gateway.server_ref(rec, "node2") == f"{table[1]['backend']}/{server['name']}" == "model_tiny-a/node2__b"


def test_node_records_name_the_same_servers_as_the_planned_records():
    inventory = [{"name": "b", "model": "tiny-a", "port": 8001}, {"name": "q", "model": "qwen", "port": 8002}]
    from_inventory = [gateway.server_ref(r, "node2") for r in gateway.node_records(inventory, MODELS)]
    planned = [gateway.server_ref(r, "node2") for r in FLEET["node2"]["instances"]]
    assert from_inventory == planned


def test_models_list_is_openai_shaped():
    body = gateway.models_list(gateway.backend_table(FLEET, "node1"))
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["Qwen/Qwen2.5-7B-Instruct", "tiny-a"]
    assert all(m["object"] == "model" for m in body["data"])


GOOD_KEYS = [{"name": "team-a", "key": "a" * 24, "rate_per_s": 10},
             {"name": "team-b", "key": "b" * 24, "concurrent": 2, "tokens_per_min": 200000}]


def test_key_table_holds_hashes_and_fills_no_limit_as_zero():
    table = gateway.key_table(GOOD_KEYS + [{"name": "team-c", "key": "c" * 24, "expires": datetime.date(2027, 1, 31)}])
    assert table == [
        {"name": "team-a", "key_sha256": hashlib.sha256(b"a" * 24).hexdigest(), "rate_per_s": 10, "concurrent": 0,
         "tokens_per_min": 0, "expires": 0},
        {"name": "team-b", "key_sha256": hashlib.sha256(b"b" * 24).hexdigest(), "rate_per_s": 0, "concurrent": 2,
         "tokens_per_min": 200000, "expires": 0},
        {"name": "team-c", "key_sha256": hashlib.sha256(b"c" * 24).hexdigest(), "rate_per_s": 0, "concurrent": 0,
         "tokens_per_min": 0, "expires": 1801353600},
    ]
    # What the role writes comes from this table alone: no plain key in it, so none in a map file or a diff.
    assert not any(k in repr(table) for k in ("a" * 24, "b" * 24, "c" * 24))


# 1801353600 = 2027-01-31T00:00:00Z (date -u -d 2027-01-31 +%s).
@pytest.mark.parametrize("value,epoch", [
    (None, 0), ("", 0),
    (datetime.date(2027, 1, 31), 1801353600), ("2027-01-31", 1801353600),
    ("2027-01-31T00:00:00Z", 1801353600), ("2027-01-31T01:30:00+01:30", 1801353600),
    (datetime.datetime(2027, 1, 31, tzinfo=datetime.timezone.utc), 1801353600),
    ("2027-01-31T00:00:00", None),  # no offset: whose midnight?
    (datetime.datetime(2027, 1, 31), None), ("next year", None), ("2027-13-01", None), (1801353600, None),
])
def test_expiry_epoch(value, epoch):
    assert gateway.expiry_epoch(value) == epoch


@pytest.mark.parametrize("keys,expected", [
    (GOOD_KEYS, []),
    ([], ["vllm_gateway_keys: must be a non-empty list"]),
    ("k", ["vllm_gateway_keys: must be a non-empty list"]),
    ([{"name": "team a", "key": "a" * 24}], ["vllm_gateway_keys[0].name: 'team a' is not a key name"]),
    ([{"name": "t", "key": "short"}], ["vllm_gateway_keys[0].key: the key of t is missing"]),
    ([{"name": "t", "key": "a" * 24 + " x"}], ["vllm_gateway_keys[0].key: the key of t is missing"]),
    ([GOOD_KEYS[0], {"name": "team-a", "key": "c" * 24}], ["vllm_gateway_keys[1].name: 'team-a' is used twice"]),
    ([GOOD_KEYS[0], {"name": "x", "key": "a" * 24}], ["vllm_gateway_keys[1].key: x has the same key as team-a"]),
    ([{"name": "t", "key": "a" * 24, "rate_per_s": "10"}], ["vllm_gateway_keys[0].rate_per_s: must be a whole number"]),
    ([{"name": "t", "key": "a" * 24, "concurrent": -1}], ["vllm_gateway_keys[0].concurrent: must be a whole number"]),
    ([{"name": "t", "key": "a" * 24, "concurrent": True}], ["vllm_gateway_keys[0].concurrent: must be a whole number"]),
    ([{"name": "t", "key": "a" * 24, "rpm": 3}], ["vllm_gateway_keys[0]: unknown settings rpm"]),
    ([{"name": "t", "key": "a" * 24, "tokens_per_min": 0}], []),  # 0: no budget, as absent
    ([{"name": "t", "key": "a" * 24, "tokens_per_min": gateway.TOKEN_BUDGET_MAX}], []),
    ([{"name": "t", "key": "a" * 24, "tokens_per_min": "100k"}], ["vllm_gateway_keys[0].tokens_per_min: must be a whole number 0-"]),
    ([{"name": "t", "key": "a" * 24, "tokens_per_min": -1}], ["vllm_gateway_keys[0].tokens_per_min: must be a whole number 0-"]),
    ([{"name": "t", "key": "a" * 24, "tokens_per_min": 1.5e5}], ["vllm_gateway_keys[0].tokens_per_min: must be a whole number 0-"]),
    ([{"name": "t", "key": "a" * 24, "tokens_per_min": True}], ["vllm_gateway_keys[0].tokens_per_min: must be a whole number 0-"]),
    ([{"name": "t", "key": "a" * 24, "tokens_per_min": 2 ** 30}], ["vllm_gateway_keys[0].tokens_per_min: must be a whole number 0-"]),
    ([{"name": "t", "key": "a" * 24, "tpm": 3}], ["vllm_gateway_keys[0]: unknown settings tpm"]),
    ([{"name": "t", "key": "a" * 24, "expires": "2027-01-31"}], []),
    ([{"name": "t", "key": "a" * 24, "expires": datetime.date(2020, 1, 1)}], []),  # listed, refused as expired
    ([{"name": "t", "key": "a" * 24, "expires": "2027-01-31T18:00:00+01:00"}], []),
    ([{"name": "t", "key": "a" * 24, "expires": "2027-01-31T18:00:00"}], ["vllm_gateway_keys[0].expires: '2027-01-31T18:00:00' is not"]),
    ([{"name": "t", "key": "a" * 24, "expires": "soon"}], ["vllm_gateway_keys[0].expires: 'soon' is not a date"]),
    ([{"name": "t", "key": "a" * 24, "expires": True}], ["vllm_gateway_keys[0].expires: 'True' is not a date"]),
])
def test_validate_keys(keys, expected):
    errors = gateway.validate_keys(keys, host="gw")
    assert len(errors) == len(expected), errors
    for line, start in zip(errors, expected):
        assert line.startswith("gw: " + start), line
        assert "—" in line  # every problem says the fix


def test_key_errors_never_quote_a_key():
    secret = "s3cr3t-value-that-must-not-show"
    errors = gateway.validate_keys([{"name": "t", "key": secret + " "}, {"name": "u", "key": secret, "rate_per_s": "x"}])
    assert errors and not any(secret in e for e in errors)


def test_validate_served_names():
    assert gateway.validate_served_names(MODELS) == []
    errors = gateway.validate_served_names({"m": {"path": "/m", "served_name": "it's"}}, host="h")
    assert errors == [errors[0]] and errors[0].startswith("h: vllm_models.m.served_name: \"it's\" cannot be routed")


def test_validate_gateway_names_the_missing_group_and_bad_limits():
    ok = dict(enabled=True, group="vllm_gateway", groups={"vllm_gateway": ["gw"]}, keys=GOOD_KEYS,
              max_body_bytes=262144, max_tokens=None, drain_timeout=300)
    assert gateway.validate_gateway(**ok) == []
    assert gateway.validate_gateway(**{**ok, "enabled": False, "keys": []}) == []
    errors = gateway.validate_gateway(**{**ok, "groups": {"vllm_gateway": []}, "max_body_bytes": "1m",
                                         "max_tokens": 0, "drain_timeout": -5}, host="gw")
    assert [e.split(":")[1].strip() for e in errors] == [
        "vllm_gateway_group", "vllm_gateway_max_body_bytes", "vllm_gateway_max_tokens", "vllm_gateway_drain_timeout"]


@pytest.mark.parametrize("max_n, ok", [(None, True), (1, True), (8, True), (0, False), (-1, False), (2.5, False),
                                        ("8", False), (True, False)])
def test_validate_gateway_takes_a_whole_max_n_or_none(max_n, ok):
    inputs = dict(enabled=True, group="vllm_gateway", groups={"vllm_gateway": ["gw"]}, keys=GOOD_KEYS,
                  max_body_bytes=262144, max_tokens=4096, drain_timeout=300, host="gw")
    errors = gateway.validate_gateway(**inputs, max_n=max_n)
    if ok:
        assert errors == []
    else:
        assert len(errors) == 1 and errors[0].startswith(f"gw: vllm_gateway_max_n: must be a whole number >= 1 or null (no cap), got {max_n!r}"), errors


@pytest.mark.parametrize("window, ok", [(60, True), (1, True), (600, True), (0, False), (601, False), (2.5, False),
                                         ("60", False), (True, False), (None, False)])
def test_validate_gateway_takes_a_token_budget_window_of_whole_seconds(window, ok):
    inputs = dict(enabled=True, group="vllm_gateway", groups={"vllm_gateway": ["gw"]}, keys=GOOD_KEYS,
                  max_body_bytes=262144, max_tokens=4096, drain_timeout=300, host="gw")
    errors = gateway.validate_gateway(**inputs, token_window=window)
    if ok:
        assert errors == []
    else:
        assert len(errors) == 1 and errors[0].startswith(
            f"gw: vllm_gateway_token_budget_window: must be whole seconds 1-600, got {window!r} — e.g. 60"), errors


def test_validate_routes_takes_only_known_inference_routes():
    assert gateway.validate_routes(gateway.DEFAULT_ROUTES) == []
    assert gateway.validate_routes(["/v1/completions", "/v1/responses", "/tokenize"]) == []
    errors = gateway.validate_routes(["/v1/completions", "/metrics", "/v1/completions/", "/scale_elastic_ep"], host="gw")
    assert [e.split(":")[1].strip() for e in errors] == ["vllm_gateway_routes[1]", "vllm_gateway_routes[2]", "vllm_gateway_routes[3]"]
    assert all(e.startswith("gw: ") and "use one of /v1/completions" in e for e in errors)
    for bad in ([], "/v1/completions", None):
        errors = gateway.validate_routes(bad, host="gw")
        assert len(errors) == 1 and errors[0].startswith("gw: vllm_gateway_routes: must be a non-empty list"), errors
    ok = dict(enabled=True, group="vllm_gateway", groups={"vllm_gateway": ["gw"]}, keys=GOOD_KEYS,
              max_body_bytes=262144, max_tokens=None, drain_timeout=300)
    assert gateway.validate_gateway(**ok, routes=["/docs"], host="gw")[0].startswith("gw: vllm_gateway_routes[0]: '/docs'")


def test_engine_key_mismatches_name_hosts_not_values():
    errors = gateway.engine_key_mismatches({"node1": "k1", "node2": "k2"}, "k1")
    assert len(errors) == 1 and errors[0].startswith("node2: vault_vllm_api_key differs")
    assert "k1" not in errors[0] and "k2" not in errors[0]


# A multi-node instance (issue 15) is one backend server: rank 0's host serves its API, the
# headless ranks serve none, and a drain asked by any of its hosts names that one server.
MULTINODE_RANKS = {
    "gpu1": {"address": "10.0.0.1", "instances": [
        {"name": "big", "model": {"name": "llama-405b", "served_name": "llama-405b"}, "port": 8000, "bind": "10.0.0.1",
         "multinode": {"rank": 0, "role": "api", "hosts": ["gpu1", "gpu2"]}}]},
    "gpu2": {"address": "10.0.0.2", "instances": [
        {"name": "big", "model": {"name": "llama-405b", "served_name": "llama-405b"}, "port": 8000, "bind": "10.0.0.2",
         "multinode": {"rank": 1, "role": "headless", "hosts": ["gpu1", "gpu2"]}}]},
}


def test_a_multinode_instance_is_one_server_on_its_first_host():
    table = gateway.backend_table(MULTINODE_RANKS, "gw")
    assert [(b["served_name"], [s["name"] for s in b["servers"]]) for b in table] == [("llama-405b", ["gpu1__big"])]
    assert table[0]["servers"][0]["address_port"] == "10.0.0.1:8000"
    for host in ("gpu1", "gpu2"):
        record = MULTINODE_RANKS[host]["instances"][0]
        assert gateway.server_ref(record, host) == f"{table[0]['backend']}/gpu1__big"


def test_a_rebuilt_rank_host_drains_the_multinode_instance_it_is_part_of():
    entries = [{"name": "big", "model": "llama-405b", "hosts": ["gpu1", "gpu2"]},
               {"name": "other", "model": "llama-405b", "hosts": ["gpu3", "gpu4"]}]
    models = {"llama-405b": {"path": "/srv/m"}}
    records = gateway.node_records([], models, entries, "gpu2")
    assert [r["name"] for r in records] == ["big"]
    assert gateway.server_ref(records[0], "gpu2").endswith("/gpu1__big")


# TLS at the gateway (issue 23, item 1). Stand-ins shaped like PEM: the checks read the armour, never show it.
PEM_CERT = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----\n"
PEM_KEY = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEG\n-----END PRIVATE KEY-----\n"
TLS_OK = dict(enabled=True, cert="", key="", min_version="TLSv1.2",
              ciphers="ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256",
              ciphersuites="TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384", names=[], ca_dir="/inv/.vllm-gateway-ca",
              redirect_port=None, port=8443, metrics_port=8405)


@pytest.mark.parametrize("change, variable, words", [
    ({}, None, None),
    ({"cert": PEM_CERT, "key": PEM_KEY}, None, None),
    ({"enabled": False, "ca_dir": ""}, None, None),
    ({"redirect_port": 80, "names": ["llm.example.internal", "10.0.0.10", "*.gw.example", "::1"]}, None, None),
    ({"min_version": "TLSv1.3"}, None, None),
    ({"enabled": "yes"}, "vllm_gateway_tls", "true or false"),
    ({"cert": PEM_CERT}, "vllm_gateway_tls_key", "empty while vllm_gateway_tls_cert is set"),
    ({"key": PEM_KEY}, "vllm_gateway_tls_cert", "empty while vllm_gateway_tls_key is set"),
    ({"cert": "MIIB...", "key": PEM_KEY}, "vllm_gateway_tls_cert", "not a PEM certificate"),
    ({"cert": PEM_CERT, "key": "secret-key-text"}, "vllm_gateway_tls_key", "not a PEM private key"),
    ({"cert": PEM_CERT, "key": PEM_KEY.replace("PRIVATE", "ENCRYPTED PRIVATE")}, "vllm_gateway_tls_key", "passphrase"),
    ({"ca_dir": ""}, "vllm_gateway_tls_ca_dir", "generated CA"),
    ({"min_version": "TLSv1.1"}, "vllm_gateway_tls_min_version", "TLSv1.2 (default) or TLSv1.3"),
    ({"min_version": "1.2"}, "vllm_gateway_tls_min_version", "not offered"),
    ({"ciphers": "ECDHE-RSA-AES128-GCM-SHA256 AES128-SHA"}, "vllm_gateway_tls_ciphers", "without spaces"),
    ({"ciphersuites": ""}, "vllm_gateway_tls_ciphersuites", "one OpenSSL list"),
    ({"names": "llm.example.internal"}, "vllm_gateway_tls_names", "must be a list"),
    ({"names": ["llm example"]}, "vllm_gateway_tls_names[0]", "neither a DNS name nor an IP address"),
    ({"redirect_port": 8443}, "vllm_gateway_http_redirect_port", "is vllm_gateway_port"),
    ({"redirect_port": 8405}, "vllm_gateway_http_redirect_port", "is vllm_gateway_metrics_port"),
    ({"redirect_port": 70000}, "vllm_gateway_http_redirect_port", "a port 1-65535 or null"),
    ({"redirect_port": "80"}, "vllm_gateway_http_redirect_port", "a port 1-65535 or null"),
    ({"enabled": False, "redirect_port": 80}, "vllm_gateway_http_redirect_port", "no https to redirect to"),
])
def test_validate_tls_names_host_variable_and_fix(change, variable, words):
    errors = gateway.validate_tls(**{**TLS_OK, **change}, host="gw")
    if variable is None:
        assert errors == []
        return
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"gw: {variable}: ") and words in errors[0] and " — " in errors[0], errors


def test_tls_errors_never_quote_the_certificate_or_key():
    secret = "-----BEGIN PRIVATE KEY-----\nTOPSECRETKEYMATERIAL\n-----END PRIVATE KEY-----"
    for change in ({"cert": "TOPSECRETKEYMATERIAL", "key": secret}, {"cert": PEM_CERT, "key": "TOPSECRETKEYMATERIAL"},
                   {"key": secret}, {"cert": PEM_CERT, "key": secret.replace("PRIVATE", "ENCRYPTED PRIVATE")}):
        errors = gateway.validate_tls(**{**TLS_OK, **change}, host="gw")
        assert errors and not any("TOPSECRET" in e for e in errors), errors


def test_validate_gateway_checks_tls_only_where_given():
    ok = dict(enabled=True, group="vllm_gateway", groups={"vllm_gateway": ["gw"]}, keys=GOOD_KEYS,
              max_body_bytes=262144, max_tokens=None, drain_timeout=300, host="gw")
    assert gateway.validate_gateway(**ok) == []
    assert gateway.validate_gateway(**ok, tls=TLS_OK) == []
    errors = gateway.validate_gateway(**ok, tls={**TLS_OK, "min_version": "SSLv3"})
    assert [e.split(":")[1].strip() for e in errors] == ["vllm_gateway_tls_min_version"]
    assert gateway.validate_gateway(**{**ok, "enabled": False}, tls={**TLS_OK, "min_version": "SSLv3"}) == []


def test_tls_names_cover_every_gateway_host_sorted_and_once():
    hosts = [{"name": "gw2", "ansible_host": "10.0.0.12", "fqdn": "gw2.example.internal", "addresses": ["10.0.0.12", "fd00::12"],
              "local": "127.0.0.1"},
             {"name": "gw1", "ansible_host": None, "fqdn": "", "addresses": [], "local": "127.0.0.1"},
             {"name": "gw3", "local": "0.0.0.0"}]
    assert gateway.tls_names(hosts, ["llm.example.internal", "10.0.0.10", "gw1"]) == [
        "DNS:gw1", "DNS:gw2", "DNS:gw2.example.internal", "DNS:gw3", "DNS:llm.example.internal",
        "IP:10.0.0.10", "IP:10.0.0.12", "IP:127.0.0.1", "IP:fd00::12"]
    # A name a certificate cannot hold (an inventory alias with a space) is left out, not passed to OpenSSL.
    assert gateway.tls_names([{"name": "my gateway", "local": "127.0.0.1"}]) == ["IP:127.0.0.1"]


# Routing for the prefix cache (issue 24): vllm_gateway_routing against the serving hosts' inventory.
ROUTING_FLEET = {
    "node1": {"models": {"tiny": {"path": "/srv/tiny", "served_name": "tiny-chat"}, "big": {"path": "/srv/big"}},
              "instances": [{"name": "a", "model": "tiny"}, {"name": "b", "model": "big"}]},
    "node2": {"models": {"tiny": {"path": "/srv/tiny", "served_name": "tiny-chat"}},
              "instances": [{"name": "a", "model": "tiny", "flags": {"enable_prefix_caching": False}}]},
}
ROUTING_OK = dict(routing={"big": "prefix"}, default="least_conn", prefix_chars=1024, session_header="X-Session-Id",
                  balance_factor=150)


@pytest.mark.parametrize("change, line", [
    ({"routing": {"big": "prefx"}},
     "gw: vllm_gateway_routing.big: 'prefx' is not a routing mode — use one of least_conn, session, prefix"),
    ({"routing": {"tiny": "prefix"}},
     "gw: vllm_gateway_routing.tiny: no serving host has a model served as 'tiny' (served: big, tiny-chat) — key "
     "vllm_gateway_routing by the served_name clients send as `model`"),
    ({"routing": ["big"]}, "gw: vllm_gateway_routing: must be a mapping of served model name to least_conn, session, prefix"),
    ({"routing": {"tiny-chat": "session"}},
     "gw: vllm_gateway_routing.tiny-chat: session routing keeps a prefix on one instance for its cache, but instance a "
     "on node2 sets flags.enable_prefix_caching: false — remove that flag (vLLM caches prefixes by default), or route "
     "tiny-chat with least_conn"),
    ({"routing": {}, "default": "prefix"}, "gw: vllm_gateway_routing.tiny-chat: prefix routing keeps a prefix"),
    ({"default": "round_robin"}, "gw: vllm_gateway_routing_default: 'round_robin' is not a routing mode"),
    ({"prefix_chars": 8}, "gw: vllm_gateway_prefix_chars: must be a whole number of characters 16-65536, got 8"),
    ({"prefix_chars": "1024"}, "gw: vllm_gateway_prefix_chars: must be a whole number of characters 16-65536, got '1024'"),
    ({"session_header": "X-Session Id"}, "gw: vllm_gateway_session_header: 'X-Session Id' is not a header name"),
    ({"session_header": "x)"}, "gw: vllm_gateway_session_header: 'x)' is not a header name"),
    ({"balance_factor": 100}, "gw: vllm_gateway_hash_balance_factor: must be 0 (no bound) or a whole percentage 101-1000, got 100"),
    ({"balance_factor": 1.5}, "gw: vllm_gateway_hash_balance_factor: must be 0 (no bound) or a whole percentage 101-1000, got 1.5"),
], ids=["mode", "not-served-name", "not-a-mapping", "caching-off", "caching-off-by-default", "default", "prefix-short",
        "prefix-string", "header-space", "header-paren", "factor-100", "factor-float"])
def test_validate_routing_names_host_variable_and_fix(change, line):
    errors = gateway.validate_routing(**{**ROUTING_OK, **change}, fleet=ROUTING_FLEET, host="gw")
    assert len(errors) == 1 and errors[0].startswith(line), errors


@pytest.mark.parametrize("change", [{}, {"routing": {"tiny-chat": "least_conn", "big": "session"}}, {"balance_factor": 0},
                                    {"balance_factor": 101}, {"prefix_chars": 16}, {"session_header": "X-Conversation-Id"}])
def test_validate_routing_passes_good_settings(change):
    assert gateway.validate_routing(**{**ROUTING_OK, **change}, fleet=ROUTING_FLEET, host="gw") == []


def test_server_ids_come_from_names_so_a_new_instance_moves_no_other_server():
    def ids(hosts):
        fleet = {h: {"address": "10.0.0.1", "instances": [{"name": "a", "model": {"served_name": "m"}, "port": 8000,
                                                           "bind": "0.0.0.0"}]} for h in hosts}
        return {s["name"]: s["id"] for s in gateway.backend_table(fleet, "gw")[0]["servers"]}
    two, three = ids(["node1", "node3"]), ids(["node1", "node2", "node3"])
    assert all(three[name] == sid for name, sid in two.items())
    assert len(set(three.values())) == 3 and all(1 <= sid < 1_000_000 for sid in three.values())
    taken = {gateway._server_id("x", set())}
    assert gateway._server_id("x", taken) == next(iter(taken)) + 1  # a collision takes the next free id
# The virtual address in front of several gateway hosts (vllm_gateway_vip): one line per problem, naming the variable.
VIP_OK = dict(vip="10.0.0.50/24", interface="eth0", vrid=51, hosts=["gw1", "gw2"], bind="0.0.0.0")


@pytest.mark.parametrize("change, variable, text", [
    ({"vip": "10.0.0.50"}, "vllm_gateway_vip", "is not an IPv4 address with its prefix"),
    ({"vip": "10.0.0.300/24"}, "vllm_gateway_vip", "is not an IPv4 address with its prefix"),
    ({"vip": "fd00::50/64"}, "vllm_gateway_vip", "is not an IPv4 address with its prefix"),
    ({"vip": "10.0.0.50/24 dev eth1"}, "vllm_gateway_vip", "is not an IPv4 address with its prefix"),
    ({"vip": 42}, "vllm_gateway_vip", "is not an IPv4 address with its prefix"),
    ({"vip": "127.0.0.5/8"}, "vllm_gateway_vip", "cannot be a shared service address"),
    ({"vip": "10.0.0.255/24"}, "vllm_gateway_vip", "network or broadcast address of 10.0.0.0/24"),
    ({"vip": "10.0.0.0/24"}, "vllm_gateway_vip", "network or broadcast address"),
    ({"vrid": 0}, "vllm_gateway_vrid", "must be a whole number 1-255, got 0"),
    ({"vrid": 256}, "vllm_gateway_vrid", "must be a whole number 1-255"),
    ({"vrid": "51"}, "vllm_gateway_vrid", "must be a whole number 1-255"),
    ({"vrid": True}, "vllm_gateway_vrid", "must be a whole number 1-255"),
    ({"interface": "eth0; reboot"}, "vllm_gateway_vip_interface", "is not a network interface name"),
    ({"interface": "a-very-long-interface"}, "vllm_gateway_vip_interface", "is not a network interface name"),
    ({"interface": "eth0\n}"}, "vllm_gateway_vip_interface", "is not a network interface name"),
    ({"hosts": ["gw1"]}, "vllm_gateway_vip", "has 1 host(s): nothing to fail over to"),
    ({"bind": "10.0.0.11"}, "vllm_gateway_bind", "set vllm_gateway_bind: 0.0.0.0"),
    ({"bind": "10.0.0.50"}, "vllm_gateway_bind", "set vllm_gateway_bind: 0.0.0.0"),
])
def test_validate_vip_names_host_variable_and_fix(change, variable, text):
    errors = gateway.validate_vip(**{**VIP_OK, **change}, host="gw1")
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"gw1: {variable}: ") and text in errors[0] and " — " in errors[0], errors[0]


@pytest.mark.parametrize("change", [{}, {"vip": ""}, {"vip": None, "hosts": ["gw1"], "vrid": 0}, {"interface": ""},
                                    {"interface": "bond0.42"}, {"bind": "::"}, {"vip": "192.168.7.9/32"},
                                    {"vrid": 1}, {"vrid": 255}, {"hosts": ["gw1", "gw2", "gw3"]}])
def test_validate_vip_takes_a_usable_address_or_none(change):
    assert gateway.validate_vip(**{**VIP_OK, **change}) == []


def test_validate_vip_reports_every_mistake_at_once():
    errors = gateway.validate_vip(vip="10.0.0.50", interface="eth0 x", vrid=0, hosts=["gw1"], bind="10.0.0.11", host="gw1")
    assert [e.split(":")[1].strip() for e in errors] == [
        "vllm_gateway_vip", "vllm_gateway_vrid", "vllm_gateway_vip_interface", "vllm_gateway_vip", "vllm_gateway_bind"], errors


def test_validate_gateway_checks_the_vip_against_the_group():
    ok = dict(enabled=True, group="vllm_gateway", groups={"vllm_gateway": ["gw1", "gw2"]}, keys=GOOD_KEYS,
              max_body_bytes=262144, max_tokens=None, drain_timeout=300, host="gw1")
    vip = {k: v for k, v in VIP_OK.items() if k != "hosts"}
    assert gateway.validate_gateway(**ok, vip=vip) == []
    errors = gateway.validate_gateway(**{**ok, "groups": {"vllm_gateway": ["gw1"]}}, vip=vip)
    assert [e.split(":")[1].strip() for e in errors] == ["vllm_gateway_vip"]
    assert gateway.validate_gateway(**{**ok, "enabled": False}, vip={**vip, "vrid": 0}) == []


def test_vrrp_priorities_follow_the_group_order_and_peers_are_the_others():
    hosts = ["gw1", "gw2", "gw3"]
    addrs = {"gw1": "10.0.0.11", "gw2": "10.0.0.12", "gw3": "10.0.0.13"}
    assert gateway.vrrp_instance(hosts, "gw1", addrs) == {"priority": 200, "src": "10.0.0.11", "peers": ["10.0.0.12", "10.0.0.13"]}
    assert gateway.vrrp_instance(hosts, "gw3", addrs) == {"priority": 198, "src": "10.0.0.13", "peers": ["10.0.0.11", "10.0.0.12"]}


@pytest.mark.parametrize("host, addrs, text", [
    ("gw1", {"gw1": "10.0.0.11", "gw2": None}, "gw1: the VRRP address of gw2 is not known"),
    ("gw1", {"gw1": "10.0.0.11", "gw2": "10.0.0.11"}, "gw1: its VRRP address 10.0.0.11 is also gw2's"),
    ("gw9", {"gw1": "10.0.0.11", "gw2": "10.0.0.12"}, "gw9: not a gateway host"),
])
def test_vrrp_instance_refuses_naming_the_host_and_fix(host, addrs, text):
    with pytest.raises(ValueError) as err:
        gateway.vrrp_instance(["gw1", "gw2"], host, addrs)
    assert str(err.value).startswith(text)
