"""Client keys that change without a reload (issue 23, item 4): the shipped haproxy.cfg.j2 rendered with keys,
run by the real HAProxy (Debian's 2.6) as systemd runs it (-W: a master and its worker), with the map files
tasks/main.yml writes (SHA-256 of each key, never the key), and the real vllm-gateway-ctl against its admin
socket.

Under a small load from Python threads (loopback, bounded): a key revoked mid-load gets 401 from its next
request while the other key's requests all succeed, a new key works at once, a new rate limit answers 429,
an expiry refuses the key with 401 saying so, all with the same master and worker (no reload); the map
files, the configuration and `key list` never hold a plain key, the ctl takes a key from stdin only, and a
fresh HAProxy started from the re-written files sees the same keys."""

from __future__ import annotations

import datetime
import hashlib
import http.client
import json
import os
import socket
import subprocess
import threading
import time

import pytest

from gateway_harness import (CLIENT_KEY, ENGINE_KEY, backend_table, free_port, haproxy_binary, key_ctl, load_ctl, processes,
                             render_config, running_gateway)
from vllm_deploy import gateway

KEY_B = "team-b-key-0123456789abcdef"
KEY_OLD = "team-old-key-0123456789abcdef"
NEW_KEYS = {"team-new": "team-new-key-0123456789abcdef", "team-limit": "team-limit-key-0123456789abcd",
            "team-soon": "team-soon-key-0123456789abcde"}
PLAIN_KEYS = [CLIENT_KEY, KEY_B, KEY_OLD, ENGINE_KEY, *NEW_KEYS.values()]
INVENTORY = [{"name": "team-a", "key": CLIENT_KEY}, {"name": "team-b", "key": KEY_B, "concurrent": 8},
             {"name": "team-old", "key": KEY_OLD, "expires": datetime.date(2020, 1, 1)}]
COMPLETION = json.dumps({"model": "tiny-a", "prompt": "hi", "max_tokens": 4}).encode()

# The tests build on one another's changes to one running HAProxy (the module's fixture): one worker
# runs them all, in order (make test-unit: pytest-xdist's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("gateway_keys")


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    config_dir = tmp_path_factory.mktemp("gateway-keys")
    with running_gateway(config_dir, ["tiny-a"], keys=INVENTORY, master_worker=True) as running:
        yield {**running, "dir": config_dir}


def call(gw, key):
    conn = http.client.HTTPConnection("127.0.0.1", gw["port"], timeout=10)
    conn.request("POST", "/v1/completions", body=COMPLETION,
                 headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})})
    answer = conn.getresponse()
    status, body = answer.status, answer.read()
    conn.close()
    return status, json.loads(body)


class Load:
    """Bounded client threads, each sending up to `limit` completions with its key until stopped,
    recording (key name, start, end, status) of every request."""

    def __init__(self, gw, keys, limit=300):
        self.gw, self.stop, self.results, self.lock = gw, threading.Event(), [], threading.Lock()
        self.threads = [threading.Thread(target=self._client, args=(name, key, limit), daemon=True) for name, key in keys]

    def _client(self, name, key, limit):
        for _ in range(limit):
            if self.stop.is_set():
                return
            start = time.monotonic()
            try:
                status = call(self.gw, key)[0]
            except OSError as exc:
                status = type(exc).__name__
            with self.lock:
                self.results.append((name, start, time.monotonic(), status))

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def count(self, name):
        with self.lock:
            return sum(1 for r in self.results if r[0] == name)

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


def wait_for(predicate, seconds=20):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_gateway_host_holds_hashes_and_refuses_what_it_did(gw):
    keys_map = (gw["dir"] / "keys.map").read_text()
    assert f"{hashlib.sha256(CLIENT_KEY.encode()).hexdigest()} team-a\n" in keys_map
    assert not any(k in keys_map or k in gw["config"] for k in PLAIN_KEYS)
    assert call(gw, CLIENT_KEY)[0] == 200
    for key in (None, "not-a-key-of-this-gateway", ENGINE_KEY, hashlib.sha256(CLIENT_KEY.encode()).hexdigest()):
        status, body = call(gw, key)  # the hash is no key either
        assert (status, body["error"]["code"]) == (401, "invalid_api_key"), key


def test_an_expired_key_gets_401_saying_it_expired(gw):
    status, body = call(gw, KEY_OLD)
    assert status == 401 and "expired" in body["error"]["message"] and body["error"]["code"] == "invalid_api_key"


def test_a_key_revoked_mid_load_is_refused_at_once_and_a_new_one_works_without_a_reload(gw):
    before = processes(gw)
    with Load(gw, [("team-a", CLIENT_KEY), ("team-a", CLIENT_KEY), ("team-b", KEY_B), ("team-b", KEY_B)]) as load:
        wait_for(lambda: load.count("team-b") >= 20)
        revoke_start = time.monotonic()
        rc, out = key_ctl(gw, "revoke", "team-b")
        revoked = time.monotonic()
        assert rc == 0 and out["ok"] and out["changed"], out
        wait_for(lambda: sum(1 for r in load.results if r[0] == "team-b" and r[1] > revoked) >= 10)
        rc, out = key_ctl(gw, "add", "team-new", stdin=NEW_KEYS["team-new"] + "\n")
        assert rc == 0 and out["ok"], out
        assert call(gw, NEW_KEYS["team-new"])[0] == 200  # at once: the very next request
        wait_for(lambda: load.count("team-a") >= 60)
    a = [r[3] for r in load.results if r[0] == "team-a"]
    b_before = [r[3] for r in load.results if r[0] == "team-b" and r[2] < revoke_start]
    b_after = [r[3] for r in load.results if r[0] == "team-b" and r[1] > revoked]
    assert a and set(a) == {200}, f"team-a: {sorted(set(map(str, a)))}"
    assert b_before and set(b_before) == {200}
    assert b_after and set(b_after) == {401}
    assert processes(gw) == before  # no reload: the same master and worker served it all
    print(f"\nteam-a: {len(a)} requests, all 200; team-b: {len(b_before)} x 200 before the revoke, {len(b_after)} x 401 after")


def test_a_new_rate_limit_answers_429_at_once(gw):
    before = processes(gw)
    assert key_ctl(gw, "add", "team-limit", stdin=NEW_KEYS["team-limit"])[0] == 0
    assert {call(gw, NEW_KEYS["team-limit"])[0] for _ in range(6)} == {200}
    time.sleep(2.1)  # HAProxy's 1 s rate weighs in the period before: two periods later those six are forgotten
    rc, out = key_ctl(gw, "limits", "team-limit", "--rate-per-s", "2")
    assert rc == 0 and out["changed"], out
    began = time.monotonic()
    statuses = [call(gw, NEW_KEYS["team-limit"])[0] for _ in range(16)]
    took = time.monotonic() - began
    # At most 2 a second get through, counted over the seconds the calls took (a loaded machine sends them slower),
    # with HAProxy's weighing of the second before; the rest are refused.
    assert 200 in statuses and statuses.count(200) <= 2 * (took + 1) + 1, (statuses, took)
    assert set(statuses) == {200, 429}, statuses
    assert key_ctl(gw, "limits", "team-limit", "--rate-per-s", "0")[0] == 0
    assert {call(gw, NEW_KEYS["team-limit"])[0] for _ in range(6)} == {200}
    assert processes(gw) == before


def test_an_expiry_set_through_the_ctl_refuses_the_key_then(gw):
    # Some seconds ahead: the ctl is a Python process, and on a loaded machine (CI runs this beside image builds)
    # it took over a second to start, so a 1-2 s expiry had passed before the first request.
    soon = int(time.time()) + 6
    stamp = datetime.datetime.fromtimestamp(soon, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert key_ctl(gw, "add", "team-soon", "--expires", stamp, stdin=NEW_KEYS["team-soon"])[0] == 0
    assert call(gw, NEW_KEYS["team-soon"])[0] == 200
    time.sleep(max(0.0, soon - time.time()) + 0.2)
    status, body = call(gw, NEW_KEYS["team-soon"])
    assert status == 401 and "expired" in body["error"]["message"]
    listed = {k["name"]: k for k in key_ctl(gw, "list")[1]["keys"]}
    assert listed["team-soon"]["expires"] == stamp and listed["team-soon"]["expired"] is True
    assert key_ctl(gw, "limits", "team-soon", "--expires", "never")[0] == 0
    assert call(gw, NEW_KEYS["team-soon"])[0] == 200


def test_key_list_and_the_map_files_never_hold_a_plain_key_or_a_hash_in_the_list(gw):
    rc, out = key_ctl(gw, "list")
    assert rc == 0 and out["ok"]
    listed = {k["name"]: k for k in out["keys"]}
    assert "team-b" not in listed and {"team-a", "team-old", "team-new", "team-limit"} <= set(listed)
    assert listed["team-old"] == {"name": "team-old", "rate_per_s": 0, "concurrent": 0, "tokens_per_min": 0,
                                  "expires": "2020-01-01T00:00:00Z", "expired": True}
    text = json.dumps(out)
    hashes = [hashlib.sha256(k.encode()).hexdigest() for k in PLAIN_KEYS]
    assert not any(k in text for k in PLAIN_KEYS + hashes)
    for name in ("keys.map", "rate.map", "concurrent.map", "tokens.map", "expires.map"):
        content = (gw["dir"] / name).read_text()
        assert not any(k in content for k in PLAIN_KEYS), name
    # Written whole (a temporary file renamed over the old one): none left behind.
    assert not [p.name for p in gw["dir"].iterdir() if p.name.startswith(".") and ".map." in p.name]


def test_the_ctl_takes_a_key_from_stdin_only(gw):
    key = "argv-key-0123456789abcdef"
    for args in (["add", "team-argv", key], ["add", "team-argv", "--key", key]):
        rc, out = key_ctl(gw, *args, stdin="")
        assert rc == 2 and "unrecognized arguments" in out, out  # argparse refuses: there is no place for it
    rc, out = key_ctl(gw, "add", "team-argv", stdin="")
    assert rc == 1 and not out["ok"] and "stdin" in out["message"]
    rc, out = key_ctl(gw, "add", "team-argv", stdin="short\n")
    assert rc == 1 and "short" not in out["message"]
    assert "team-argv" not in {k["name"] for k in key_ctl(gw, "list")[1]["keys"]}
    rc, out = key_ctl(gw, "add", "team-a", stdin="another-key-0123456789abcdef")
    assert rc == 1 and "already has a key" in out["message"]


def test_a_fresh_haproxy_started_from_the_rewritten_maps_sees_the_same_keys(gw, tmp_path):
    """What a restart would load: the files the ctl re-wrote, read by a second HAProxy on another port."""
    mode = (gw["dir"] / "keys.map").stat().st_mode
    port = free_port()
    config = tmp_path / "haproxy.cfg"
    engine = gw["engines"]["tiny-a"]
    config.write_text(render_config(gw["dir"], port, backend_table([engine]), vllm_gateway_socket=str(tmp_path / "a.sock")))
    proc = subprocess.Popen([haproxy_binary(), "-db", "-f", str(config)], env={**os.environ, "VLLM_GATEWAY_ENGINE_KEY": ENGINE_KEY},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        fresh = {**gw, "port": port}
        wait_for(lambda: _listening(port), 10)
        assert call(fresh, NEW_KEYS["team-new"])[0] == 200
        assert call(fresh, CLIENT_KEY)[0] == 200
        assert call(fresh, KEY_B)[0] == 401
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert (gw["dir"] / "keys.map").stat().st_mode == mode  # the deploy's mode kept


def _listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def test_the_ctl_keeps_the_same_key_rules_as_the_role():
    """vllm-gateway-ctl runs on the gateway host with the standard library only, so it keeps its own
    copies of the key and name patterns and of the expiry rule: they must say what vllm_deploy.gateway says."""
    ctl_module = load_ctl()
    assert ctl_module.KEY_RE.pattern == gateway.KEY_RE.pattern
    assert ctl_module.KEY_NAME_RE.pattern == gateway.KEY_NAME_RE.pattern
    for text in ("2027-01-31", "2027-01-31T18:00:00+01:00", "2027-01-31T18:00:00Z", " 2030-06-01 "):
        assert ctl_module.expiry_epoch(text) == gateway.expiry_epoch(text), text
    for text in ("2027-01-31T18:00:00", "tomorrow", "2027-13-01"):
        assert gateway.expiry_epoch(text) is None
        with pytest.raises(ctl_module.Refused):
            ctl_module.expiry_epoch(text)
