"""The key table's peers (issue 23, a leftover): each key's counters (its requests per second and its token budget,
haproxy.cfg.j2's `backend keys`) survive a reload and are shared by the gateway hosts, in the real HAProxy (Debian's
2.6, -W as systemd runs it) with the shipped haproxy.cfg.j2 and vllm-gateway-body.lua.

* one gateway: a key spends part of its budget (and goes over its rate), the master reloads (SIGUSR2, systemd's
  ExecReload), and the new worker still refuses the request that would cross the budget (and the rate);
* two gateways on loopback, two rendered configs whose peers sections name both (two peers ports): a budget spent
  through one is refused through the other;
* the rendered peers section: a single gateway host's lists itself alone on 127.0.0.1, a two-host group's both, with
  the local one named by `localpeer`; nothing from the inventory reaches the config unchecked;
* the validation play refuses a bad peers port or address in one line naming host, variable and fix."""

from __future__ import annotations

import http.client
import json
import re
import time
import uuid

import pytest

from conftest import filter_plugins, run_playbook
from gateway_harness import (CLIENT_KEY, admin, backend_table, free_port, peers_ready, processes, reload, render_config,
                             running_gateway)
from test_gateway_failover import CHECK_PLAYS
from vllm_deploy import gateway

KEYS = {
    "team-a": CLIENT_KEY,
    "team-budget": "team-budget-key-0123456789ab",
    "team-rate": "team-rate-key-0123456789abcd",
}
INVENTORY = [{"name": "team-a", "key": KEYS["team-a"]},
             {"name": "team-budget", "key": KEYS["team-budget"], "tokens_per_min": 100},
             {"name": "team-rate", "key": KEYS["team-rate"], "rate_per_s": 3}]

pytestmark = pytest.mark.xdist_group("gateway_peers")


def post(gw, name, **fields):
    """One completion with the key of `name` on a new connection: (status, JSON body)."""
    body = json.dumps({"model": "tiny-a", "prompt": "hi", **fields}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", gw["port"], timeout=10)
    conn.request("POST", "/v1/completions", body=body, headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {KEYS[name]}", "Connection": "close"})
    answer = conn.getresponse()
    status, text = answer.status, answer.read()
    conn.close()
    return status, json.loads(text)


def entry(gw, name, timeout=10.0):
    """The key's line of the gateway's `keys` table, once it is there (a peer's push or a reload's lesson may take a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [line for line in admin(gw, f"show table keys key {name}").splitlines() if f"key={name} " in line]
        if lines:
            return lines[0]
        assert time.monotonic() < deadline, f"{name} never reached the table: {admin(gw, 'show table keys')}"
        time.sleep(0.05)


def test_a_reload_keeps_each_key_s_token_budget_and_rate(tmp_path):
    with running_gateway(tmp_path, ["tiny-a"], keys=INVENTORY, master_worker=True) as gw:
        assert "localpeer gw\n" in gw["config"] and re.search(r"\n    peer gw 127\.0\.0\.1:\d+\n", gw["config"])
        peers_ready(gw)  # HAProxy 2.6 hands its table over only once its own start-up resync is over
        for _ in range(4):
            assert post(gw, "team-budget", max_tokens=20)[0] == 200  # 80 of 100
        master, worker = processes(gw)

        # The rate: 3 per second, far over it in a burst, then the reload at once.
        statuses = [post(gw, "team-rate", max_tokens=1)[0] for _ in range(60)]
        assert statuses[:3] == [200] * 3 and set(statuses[3:]) == {429}, statuses
        burst_end = time.monotonic()
        took = reload(gw)
        assert processes(gw)[0] == master and processes(gw)[1] != worker  # same master, a new worker: a reload
        entry(gw, "team-rate")
        status, body = post(gw, "team-rate", max_tokens=1)
        since_burst = time.monotonic() - burst_end
        # The burst's 60 requests stay above 3 per second for more than a second: a counter started from zero
        # would let this one through.
        assert status == 429 and "requests per second" in body["error"]["message"], (status, body, took, since_burst)

        # The budget: 80 of 100 spent before the reload, so 30 more would cross it; 20 still fit, to the token.
        assert "gpc2_rate(60000)=4" in entry(gw, "team-budget")  # 80 = 4 x (16 + 4): bits 2 and 4, four times
        status, body = post(gw, "team-budget", max_tokens=30)
        assert status == 429 and "80 of 100 tokens per 60 s" in body["error"]["message"], body
        assert post(gw, "team-budget", max_tokens=20)[0] == 200
        status, body = post(gw, "team-budget", max_tokens=1)
        assert status == 429 and "100 of 100" in body["error"]["message"], body

        # A second reload hands the table on again (the new worker was taught, so it is ready at once).
        peers_ready(gw)
        reload(gw)
        entry(gw, "team-budget")
        status, body = post(gw, "team-budget", max_tokens=1)
        assert status == 429 and "100 of 100" in body["error"]["message"], body
        print(f"\nreload: new worker in {took:.2f} s; the rate's next request {since_burst:.2f} s after the burst")


def _peers(ports, local):
    """The peers section of two gateway hosts on loopback, as the role's vllm_gateway_peers filter builds it, but on
    127.0.0.1 (the filter refuses loopback for a group: the hosts could not reach each other) with a port each."""
    return {"local": local, "peers": [{"name": name, "address": "127.0.0.1", "port": port} for name, port in ports.items()]}


def test_a_budget_spent_through_one_gateway_is_refused_through_the_other(tmp_path):
    ports = {"gw1": free_port(), "gw2": free_port()}
    (tmp_path / "gw1").mkdir()
    (tmp_path / "gw2").mkdir()
    with running_gateway(tmp_path / "gw1", ["tiny-a"], keys=INVENTORY, master_worker=True,
                         __vllm_gateway_peers=_peers(ports, "gw1")) as gw1, \
         running_gateway(tmp_path / "gw2", ["tiny-a"], keys=INVENTORY, master_worker=True,
                         __vllm_gateway_peers=_peers(ports, "gw2")) as gw2:
        for gw, me in ((gw1, "gw1"), (gw2, "gw2")):
            assert f"localpeer {me}\n" in gw["config"]
            assert f"    peer gw1 127.0.0.1:{ports['gw1']}\n    peer gw2 127.0.0.1:{ports['gw2']}\n" in gw["config"]
        for _ in range(4):
            assert post(gw1, "team-budget", max_tokens=20)[0] == 200  # 80 of 100, through gw1
        deadline = time.monotonic() + 10
        while "gpc4_rate(60000)=4" not in entry(gw2, "team-budget"):
            assert time.monotonic() < deadline, f"gw2 never learnt gw1's counters: {admin(gw2, 'show peers')}"
            time.sleep(0.05)
        status, body = post(gw2, "team-budget", max_tokens=30)
        assert status == 429 and "80 of 100 tokens per 60 s" in body["error"]["message"], body
        assert post(gw2, "team-budget", max_tokens=20)[0] == 200  # 100 of 100, through gw2 ...
        deadline = time.monotonic() + 10
        while True:  # ... and gw1 learns that in turn
            status, body = post(gw1, "team-budget", max_tokens=1)
            if status == 429:
                break
            assert time.monotonic() < deadline, "gw1 never learnt gw2's counters"
            time.sleep(0.1)
        assert "100 of 100" in body["error"]["message"], body
        # each names the other as an active remote peer; a session HAProxy renews under load (heartbeat, resync) may
        # read otherwise for a moment, so the state is awaited, not sampled once
        deadline = time.monotonic() + 10
        while not all("(remote,active)" in admin(gw, "show peers") for gw in (gw1, gw2)):
            assert time.monotonic() < deadline, (admin(gw1, "show peers"), admin(gw2, "show peers"))
            time.sleep(0.1)


def test_the_rendered_peers_section_names_one_host_alone_or_every_host_of_the_group(tmp_path):
    table = backend_table([])
    single = gateway.peers_section(["gw-1"], "gw-1", {}, {"gw-1": 10100})
    text = render_config(tmp_path, 8080, table, __vllm_gateway_peers=single)
    assert "\n    localpeer gw-1\n" in text
    assert "\npeers vllm_gateway\n    peer gw-1 127.0.0.1:10100\n\n" in text
    assert re.search(r"\n    stick-table type string len 64 .* peers vllm_gateway\n", text)
    hosts = ["gw1", "gw2.example"]
    addrs = {"gw1": "10.0.0.11", "gw2.example": "10.0.0.12"}
    for me in hosts:
        pair = gateway.peers_section(hosts, me, addrs, {"gw1": 10100, "gw2.example": 10101})
        text = render_config(tmp_path, 8080, table, __vllm_gateway_peers=pair)
        assert f"\n    localpeer {me}\n" in text
        assert "\npeers vllm_gateway\n    peer gw1 10.0.0.11:10100\n    peer gw2.example 10.0.0.12:10101\n\n" in text
    # The table is keyed by the key's name (keys.map's value), never by the key.
    assert "track-sc0 var(txn.client) table keys" in text
    assert "set-var(txn.client) http_auth_bearer,sha2(256),hex,lower,map(" in text


def test_the_peers_filter_reads_each_host_s_recorded_address_and_port():
    peers = filter_plugins()["vllm_gateway_peers"]
    hostvars = {"gw1": {"__vllm_gateway_peers_address": "10.0.0.11", "__vllm_gateway_peers_port": 10100},
                "gw2": {"vllm_gateway_peers_address": "10.0.0.12"}}  # not in this run: its inventory, the default port
    assert peers(hostvars, ["gw1", "gw2"], "gw2", 10100) == {"local": "gw2", "peers": [
        {"name": "gw1", "address": "10.0.0.11", "port": 10100}, {"name": "gw2", "address": "10.0.0.12", "port": 10100}]}


@pytest.mark.parametrize("hosts, me, addrs, ports, text", [
    (["gw1", "gw2"], "gw1", {"gw1": "10.0.0.11", "gw2": None}, {"gw1": 1, "gw2": 1}, "gw1: the peers address of gw2 is not known"),
    (["gw1", "gw2"], "gw1", {"gw1": "10.0.0.11", "gw2": "10.0.0.11"}, {"gw1": 1, "gw2": 1},
     "gw2: its peers address 10.0.0.11:1 is also gw1's"),
    (["gw1", "gw2"], "gw2", {"gw1": "10.0.0.11\n    peer evil 10.6.6.6", "gw2": "10.0.0.12"}, {"gw1": 1, "gw2": 1},
     "gw1: its peers address '10.0.0.11\\n    peer evil 10.6.6.6' is not an IPv4 address"),
    (["gw1", "gw2"], "gw2", {"gw1": "127.0.0.1", "gw2": "10.0.0.12"}, {"gw1": 1, "gw2": 1}, "gw1: its peers address '127.0.0.1' cannot be reached"),
    (["gw1", "gw2"], "gw2", {"gw1": "10.0.0.11", "gw2": "10.0.0.12"}, {"gw1": "1 # x", "gw2": 1}, "gw1: vllm_gateway_peers_port: must be a port"),
    (["gw1"], "gw9", {}, {"gw1": 1}, "gw9: not a gateway host"),
    (["gw1", "gw2"], "gw1", {"gw1": "10.0.0.11", "gw2": "8.8.8.8"}, {"gw1": 1, "gw2": 1},
     "gw2: its peers address 8.8.8.8 (its default route's, from the facts) is a public address"),
])
def test_peers_section_refuses_naming_the_host_and_fix(hosts, me, addrs, ports, text):
    with pytest.raises(ValueError) as err:
        gateway.peers_section(hosts, me, addrs, ports)
    assert str(err.value).startswith(text), str(err.value)


def test_a_public_address_the_inventory_gives_is_taken():
    section = gateway.peers_section(["gw1", "gw2"], "gw1", {"gw1": "10.0.0.11", "gw2": "8.8.8.8"}, {"gw1": 1, "gw2": 1}, {"gw2"})
    assert section["peers"][1] == {"name": "gw2", "address": "8.8.8.8", "port": 1}


def test_a_host_name_becomes_a_peer_name_haproxy_takes():
    section = gateway.peers_section(["gw 1;x"], "gw 1;x", {}, {"gw 1;x": 10100})
    assert re.fullmatch(r"gw_1_x-[0-9a-f]{6}", section["local"]) and section["peers"][0]["name"] == section["local"]


OK_PEERS = dict(port=10100, address="", vrrp_address="", hosts=["gw1", "gw2"],
                other_ports={"vllm_gateway_port": 8080, "vllm_gateway_metrics_port": 8405, "vllm_gateway_http_redirect_port": None})


@pytest.mark.parametrize("change", [{}, {"address": "10.0.0.11"}, {"vrrp_address": "10.0.0.11"},
                                    {"hosts": ["gw1"], "address": "127.0.0.1"}, {"port": 65535}])
def test_validate_peers_takes_a_port_of_their_own_and_a_reachable_address(change):
    assert gateway.validate_peers(**{**OK_PEERS, **change}) == []


@pytest.mark.playbook
def test_a_bad_peers_port_or_address_is_refused_in_one_line_before_any_host_is_touched(tmp_path):
    """Two gateway hosts that do not exist (had the run gone on, it could not touch anything): each mistake is one
    line naming the host, the variable and the fix, from the validation play."""
    absent = f"vllm-unit-absent-{uuid.uuid4().hex[:8]}"
    inventory = {"all": {
        "children": {"vllm_gateway": {"hosts": {
            "gw1": {"ansible_connection": "community.docker.docker", "ansible_host": absent,
                    "vllm_gateway_peers_port": 8080, "vllm_gateway_peers_address": "10.0.0.11\n    peer evil 10.6.6.6:1"},
            "gw2": {"ansible_connection": "community.docker.docker", "ansible_host": absent,
                    "vllm_gateway_peers_port": 70000, "vllm_gateway_vrrp_address": "127.0.0.1"}}}},
        "vars": {"vllm_gateway_backend_hosts": [], "vllm_gateway_keys": [{"name": "peers", "key": CLIENT_KEY}],
                 "vault_vllm_api_key": "peers-engine-key-0123456789"},
    }}
    path = tmp_path / "hosts.yml"
    path.write_text(json.dumps(inventory))
    rc, out = run_playbook(CHECK_PLAYS, tmp_path=tmp_path, inventory=str(path), connection=None, timeout=120)
    assert rc != 0, out[-3000:]
    assert ("gw1: vllm_gateway_peers_port: 8080 is vllm_gateway_port — give the peers a port of their own (e.g. 10100)"
            in out), out[-3000:]
    # The value as Ansible prints a list of strings: its newline escaped (once or twice), the line whole.
    assert re.search(r"gw1: vllm_gateway_peers_address: '10\.0\.0\.11\\+n peer evil 10\.6\.6\.6:1' is not an IPv4 address — "
                     r"give gw1's own IPv4 address on the gateway hosts' private network", out), out[-3000:]
    assert "gw2: vllm_gateway_peers_port: must be a port 1-65535, got 70000 — e.g. 10100" in out, out[-3000:]
    assert ("gw2: vllm_gateway_vrrp_address: '127.0.0.1' cannot be reached by the other gateway hosts (0.0.0.0, loopback, "
            "multicast, link-local or broadcast) — give gw2's own IPv4 address" in out), out[-3000:]
    assert "Gather the network facts" not in out and "unreachable=0" in out, out[-3000:]
