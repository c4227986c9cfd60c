"""Routing for the prefix cache (issue 24): the shipped haproxy.cfg.j2 rendered with vllm_gateway_routing, run by
the real HAProxy (Debian's 2.6) with the role's Lua body reader, in front of recording engines of which several
serve one model. Which instance took a request is the engine that answered it (its name is in the answer's
`model`, and each engine records what reached it).

prefix: requests sharing a prompt start or a system prompt land on one instance, different prefixes spread
evenly, a hot prefix is held to hash-balance-factor's bound of requests in flight, a drained instance's prefixes
move to the others and come back when it is enabled again (vllm-gateway-ctl, the role's runtime-API tool).
session: the session header or the body's `user` keeps a client on one instance. No key: spread (round
robin along the ring).
least_conn stays the default. Everything on 127.0.0.1, bounded (a few hundred small requests)."""

from __future__ import annotations

import collections
import http.client
import json
import subprocess
import sys
import threading

import pytest

from gateway_harness import CLIENT_KEY, ROLE, Engine, running_gateway

CTL = ROLE / "files" / "vllm-gateway-ctl"
ROUTING = {"tiny-p": "prefix", "tiny-s": "session"}
SYSTEM = "You are the support assistant of ACME. Answer from the manual below.\n" + "Manual section. " * 80

# The drain test changes the shared gateway and puts it back: one worker runs the module, in order.
pytestmark = pytest.mark.xdist_group("gateway_routing")


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    engines = ([Engine(f"p{i}", served="tiny-p") for i in range(3)] + [Engine(f"s{i}", served="tiny-s") for i in range(3)]
               + [Engine(f"l{i}", served="tiny-l") for i in range(2)])
    # Without the load bound: these tests pin down where each key hashes, one request at a time, and on a
    # busy machine HAProxy may not yet have counted the previous request as finished when the next one
    # arrives, which the bound (1.5x the mean in flight) would then send elsewhere. The bound has its own
    # test below, with requests really at once.
    with running_gateway(tmp_path_factory.mktemp("gateway-routing"), [], engines=engines, vllm_gateway_routing=ROUTING,
                         vllm_gateway_prefix_chars=1024, vllm_gateway_hash_balance_factor=0) as running:
        yield running


def send(gw, body, path="/v1/completions", headers=None):
    """POST through the gateway: (status, name of the engine that answered)."""
    conn = http.client.HTTPConnection("127.0.0.1", gw["port"], timeout=30)
    conn.request("POST", path, body=json.dumps(body),
                 headers={"Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    answer = response.read()
    conn.close()
    return response.status, json.loads(answer).get("model") if response.status == 200 else answer.decode()


def engine_of(gw, body, **kwargs):
    status, engine = send(gw, body, **kwargs)
    assert status == 200, engine
    return engine


def ctl(gw, *args):
    run = subprocess.run([sys.executable, str(CTL), *args, "--socket", gw["socket"]], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(run.stdout)


def test_the_config_routes_each_model_by_its_mode(gw):
    backends = gw["config"].split("\nbackend ")
    by_name = {b.split("\n", 1)[0]: b for b in backends[1:]}
    assert "balance hash var(txn.route_prefix)" in by_name["model_tiny-p"]
    assert "balance hash var(txn.route_session)" in by_name["model_tiny-s"]
    assert "req.hdr(X-Session-Id)" in by_name["model_tiny-s"]
    for name in ("model_tiny-p", "model_tiny-s"):
        assert "hash-type consistent" in by_name[name] and "hash-balance-factor" not in by_name[name]  # 0: no bound
    assert "balance leastconn" in by_name["model_tiny-l"] and "hash" not in by_name["model_tiny-l"]
    assert "lua.vllm_gateway_body 0 8 1024" in gw["config"]


def test_requests_sharing_a_prefix_land_on_one_instance(gw):
    # Completions: a shared document, then each user's own question.
    for doc in range(6):
        document = f"Document {doc}: " + "the quarterly report says revenue grew. " * 40
        assert len({engine_of(gw, {"model": "tiny-p", "prompt": document + f"Question {q}?"}) for q in range(8)}) == 1
    # Chat: a system prompt longer than the key, many users, several turns each.
    landed = {engine_of(gw, {"model": "tiny-p", "messages": [{"role": "system", "content": SYSTEM},
                                                             {"role": "user", "content": f"user {u} turn 1"}]})
              for u in range(10)}
    assert len(landed) == 1


def test_a_conversation_keeps_its_instance_as_it_grows(gw):
    # A short system prompt: the key takes the first user message too, never the later turns.
    for user in range(8):
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"I am user {user}, help me"}]
        seen = set()
        for turn in range(4):
            seen.add(engine_of(gw, {"model": "tiny-p", "messages": messages}, path="/v1/chat/completions"))
            messages = messages + [{"role": "assistant", "content": f"answer {turn}"},
                                   {"role": "user", "content": f"follow-up {turn}"}]
        assert len(seen) == 1, (user, seen)


def test_different_prefixes_spread_evenly(gw):
    counts = collections.Counter(engine_of(gw, {"model": "tiny-p", "prompt": f"Document {i}. " + "text " * 30})
                                 for i in range(240))
    assert set(counts) == {"p0", "p1", "p2"}
    # An even share is 80 each: no instance above 1.5x of it, none below half of it.
    assert max(counts.values()) <= 120 and min(counts.values()) >= 40, counts


def test_a_session_keeps_its_instance(gw):
    by_header = {}
    for session in range(24):
        seen = {engine_of(gw, {"model": "tiny-s", "prompt": f"turn {t} of some chat", "user": f"other-{t}"},
                          headers={"X-Session-Id": f"session-{session}"}) for t in range(5)}
        assert len(seen) == 1, (session, seen)  # the header wins over `user`, which changes every turn
        by_header[session] = seen.pop()
    assert len(set(by_header.values())) >= 2  # sessions spread over the instances
    for user in range(12):
        seen = {engine_of(gw, {"model": "tiny-s", "prompt": f"turn {t}", "user": f"user-{user}"}) for t in range(5)}
        assert len(seen) == 1, (user, seen)


@pytest.mark.parametrize("model,body", [
    ("tiny-s", {"prompt": "no header, no user"}),
    ("tiny-p", {"input": None}),  # no prompt, messages or input text: no prefix key
], ids=["session-without-key", "prefix-without-prompt"])
def test_a_request_without_a_key_is_spread(gw, model, body):
    # HAProxy's fallback: round robin along the hash ring (successive points, so not a strict rotation).
    counts = collections.Counter(engine_of(gw, {"model": model, **body}) for _ in range(60))
    assert len(counts) == 3 and max(counts.values()) <= 35, counts


def test_a_drained_instance_hands_its_prefixes_over_and_gets_them_back(gw):
    prompts = [f"Shared document {i}. " + "body " * 30 for i in range(90)]
    before = {p: engine_of(gw, {"model": "tiny-p", "prompt": p}) for p in prompts}
    ref = "model_tiny-p/gw__p0"
    assert list(before.values()).count("p0") >= 10
    ctl(gw, "drain", ref, "--timeout", "10")
    try:
        during = {p: engine_of(gw, {"model": "tiny-p", "prompt": p}) for p in prompts}
    finally:
        ctl(gw, "enable", ref, "--timeout", "20")
    after = {p: engine_of(gw, {"model": "tiny-p", "prompt": p}) for p in prompts}
    assert "p0" not in during.values()
    moved = {p for p in prompts if before[p] != during[p]}
    assert moved == {p for p in prompts if before[p] == "p0"}  # only the drained instance's prefixes moved
    assert {during[p] for p in moved} == {"p1", "p2"}  # shared by the others, not piled on one
    assert after == before  # all of them back where their cache is


def test_least_conn_stays_the_default(gw):
    counts = collections.Counter(engine_of(gw, {"model": "tiny-l", "prompt": SYSTEM}) for _ in range(8))
    assert sorted(counts.values()) == [4, 4], counts  # one shared prompt, yet spread: no affinity


def hot_prefix_in_flight(tmp_path, factor):
    """12 requests at once with one prefix to three slow instances: the most any instance held at once."""
    tmp_path.mkdir()
    engines = [Engine(f"h{i}", served="tiny-h", delay=0.6) for i in range(3)]
    with running_gateway(tmp_path, [], engines=engines, vllm_gateway_routing={"tiny-h": "prefix"},
                         vllm_gateway_hash_balance_factor=factor) as hot:
        assert (f"hash-balance-factor {factor}" in hot["config"]) == bool(factor)
        results = []
        threads = [threading.Thread(target=lambda: results.append(send(hot, {"model": "tiny-h", "prompt": SYSTEM})))
                   for _ in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert [status for status, _ in results] == [200] * 12, results
        return max(e.max_in_flight for e in engines), max(len(e.received) for e in engines)


def test_a_hot_prefix_is_held_to_the_balance_bound(tmp_path):
    # 150: at most 1.5x the mean in flight per instance, ceil(1.5 * 12 / 3) = 6; without the bound one
    # instance takes all 12 (counted as received: on a busy machine the first may finish before the last arrives).
    assert hot_prefix_in_flight(tmp_path / "bound", 150)[0] <= 6
    assert hot_prefix_in_flight(tmp_path / "unbound", 0)[1] == 12
