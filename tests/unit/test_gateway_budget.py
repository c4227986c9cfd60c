"""A per-key token budget (issue 23, item 4): the shipped haproxy.cfg.j2 and vllm-gateway-body.lua in the real
HAProxy (Debian's 2.6, -W as systemd runs it) in front of a recording engine, with the map files tasks/main.yml
writes (tokens.map) and the real vllm-gateway-ctl against its admin socket.

What a generating request may ask for (its largest output-length field times the larger of n and best_of) is
counted per key over a minute: requests within the budget pass and are counted, the one that would cross it
gets 429 with a JSON error and Retry-After and never reaches the engine, a request above the whole budget gets
429 saying so, a budgeted key must bound its output, n and best_of multiply, a key without a budget is not
counted at all, a change through the ctl applies to the next request with the same worker, and a spent budget
comes back within two windows (vllm_gateway_token_budget_window: 2 s for that test, on a gateway of its own)."""

from __future__ import annotations

import http.client
import json
import re
import time

import pytest
import yaml

from gateway_harness import CLIENT_KEY, ROLE, admin, key_ctl, load_ctl, processes, running_gateway
from vllm_deploy import gateway

KEYS = {
    "team-a": CLIENT_KEY,                              # no budget
    "team-budget": "team-budget-key-0123456789ab",
    "team-fan": "team-fan-key-0123456789abcdef",
    "team-sum": "team-sum-key-0123456789abcdef",
    "team-live": "team-live-key-0123456789abcd",
}
BUDGETS = {"team-budget": 100, "team-fan": 1000, "team-sum": 12345 + 777 + 99999}
INVENTORY = [{"name": name, "key": key, **({"tokens_per_min": BUDGETS[name]} if name in BUDGETS else {})}
             for name, key in KEYS.items()]
WINDOW_S = 60  # the role's default window

pytestmark = pytest.mark.xdist_group("gateway_budget")


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    config_dir = tmp_path_factory.mktemp("gateway-budget")
    with running_gateway(config_dir, ["tiny-a"], keys=INVENTORY, master_worker=True) as running:
        yield {**running, "dir": config_dir}


def post(gw, name, path="/v1/completions", **fields):
    """One request with the key of `name`: (status, headers, JSON body), and whether it reached the engine."""
    engine = gw["engines"]["tiny-a"]
    before = len(engine.received)
    body = json.dumps({"model": "tiny-a", "prompt": "hi", **fields}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", gw["port"], timeout=10)
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEYS[name]}"})
    answer = conn.getresponse()
    status, headers, text = answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    conn.close()
    return status, headers, json.loads(text), len(engine.received) > before


def refused(answer, status=429):
    """The request got `status` with an OpenAI-shaped error and never reached the engine."""
    code, headers, body, reached = answer
    assert code == status and not reached, answer
    assert set(body["error"]) == {"message", "type", "param", "code"} and headers["content-type"] == "application/json"
    return body["error"], headers


def test_requests_within_the_budget_pass_and_the_one_that_would_cross_it_gets_429(gw):
    for _ in range(4):
        status, _, _, reached = post(gw, "team-budget", max_tokens=20)
        assert status == 200 and reached  # 80 of 100
    error, headers = refused(post(gw, "team-budget", max_tokens=30))
    assert error["type"] == "rate_limit_error" and error["code"] == "rate_limit_exceeded"
    assert "80 of 100 tokens per 60 s" in error["message"] and "asks for 30" in error["message"], error
    # 80 asked for at an even rate over the window: the 10 over the budget have left after 10/80 of it, 7.5 s -> 8.
    assert headers["retry-after"] == "8", headers
    # The refused request was not counted: what is left still fits, to the last token.
    assert post(gw, "team-budget", max_tokens=20)[0] == 200
    error, _ = refused(post(gw, "team-budget", max_tokens=1))
    assert "100 of 100" in error["message"]
    # Spelled as the engine reads it: the body reader's numbers.
    refused(post(gw, "team-budget", max_tokens="1e0"))


def test_a_budgeted_key_must_bound_its_output_but_not_where_nothing_is_generated(gw):
    error, _ = refused(post(gw, "team-fan"), status=400)
    assert error["code"] == "max_tokens_required" and error["param"] == "max_tokens"
    refused(post(gw, "team-fan", path="/v1/chat/completions", messages=[{"role": "user", "content": "hi"}]), status=400)
    # Embeddings produce no output tokens: neither refused nor counted (the next test starts from 0).
    status, _, _, reached = post(gw, "team-fan", path="/v1/embeddings", input="hi")
    assert status == 200 and reached


def test_n_and_best_of_multiply_and_the_largest_output_field_counts(gw):
    assert post(gw, "team-fan", max_tokens=100, n=4)[0] == 200                 # 400
    assert post(gw, "team-fan", max_tokens=100, n=2, best_of=5)[0] == 200      # 500: best_of sequences -> 900
    error, _ = refused(post(gw, "team-fan", max_tokens=50, n=3))               # 150 -> 1050
    assert "900 of 1000" in error["message"] and "asks for 150" in error["message"], error
    # Chat: max_completion_tokens and max_tokens both given, the larger counts (60, not 10).
    assert post(gw, "team-fan", path="/v1/chat/completions", messages=[{"role": "user", "content": "hi"}],
                max_tokens=10, max_completion_tokens=60)[0] == 200             # 960
    error, _ = refused(post(gw, "team-fan", max_tokens=41))
    assert "960 of 1000" in error["message"], error
    # Above the whole budget: 429 that says so, with no Retry-After (waiting will not help).
    error, headers = refused(post(gw, "team-fan", max_tokens=300, n=4))
    assert "1200 tokens" in error["message"] and "lower max_tokens or n" in error["message"] and "retry-after" not in headers


def test_the_counters_add_up_to_the_token(gw):
    """Each bit of a cost is its own counter: three unrelated costs read back as their exact sum."""
    for tokens in (12345, 777, 99999):
        assert post(gw, "team-sum", max_tokens=tokens)[0] == 200
    error, _ = refused(post(gw, "team-sum", max_tokens=1))
    assert f"{BUDGETS['team-sum']} of {BUDGETS['team-sum']}" in error["message"], error


def test_a_key_without_a_budget_is_unlimited_and_not_counted(gw):
    for _ in range(10):
        status, _, _, reached = post(gw, "team-a", max_tokens=100000, n=8)
        assert status == 200 and reached
    assert post(gw, "team-a")[0] == 200  # no max_tokens: fine without a budget
    entry = admin(gw, "show table keys key team-a")
    rates = re.findall(r"gpc(\d+)_rate\(60000\)=(\d+)", entry)
    assert len(rates) == gateway.TOKEN_BUDGET_BITS and {value for _, value in rates} == {"0"}, entry


def test_a_budget_set_or_lifted_through_the_ctl_applies_to_the_next_request_without_a_reload(gw):
    before = processes(gw)
    assert post(gw, "team-live", max_tokens=5000)[0] == 200  # no budget yet: not counted
    rc, out = key_ctl(gw, "limits", "team-live", "--tokens-per-min", "600")
    assert rc == 0 and out["changed"] and out["maps"] == ["tokens.map"], out
    assert post(gw, "team-live", max_tokens=500)[0] == 200
    error, _ = refused(post(gw, "team-live", max_tokens=200))
    assert "500 of 600" in error["message"], error
    assert key_ctl(gw, "limits", "team-live", "--tokens-per-min", "0")[0] == 0
    assert post(gw, "team-live", max_tokens=200)[0] == 200
    assert key_ctl(gw, "limits", "team-live", "--tokens-per-min", "2000")[0] == 0
    assert post(gw, "team-live", max_tokens=1000)[0] == 200  # 500 + 1000 (the unbudgeted 200 was not counted)
    refused(post(gw, "team-live", max_tokens=501))
    assert "team-live 2000" in (gw["dir"] / "tokens.map").read_text()  # a restart keeps it
    assert processes(gw) == before


def test_the_ctl_adds_a_key_with_a_budget_lists_it_and_refuses_a_bad_one(gw):
    new_key = "team-new-key-0123456789abcdef"
    rc, out = key_ctl(gw, "add", "team-new", "--tokens-per-min", "10", stdin=new_key)
    assert rc == 0 and out["ok"], out
    KEYS["team-new"] = new_key
    assert post(gw, "team-new", max_tokens=10)[0] == 200
    refused(post(gw, "team-new", max_tokens=1))
    listed = {k["name"]: k for k in key_ctl(gw, "list")[1]["keys"]}
    assert listed["team-new"]["tokens_per_min"] == 10 and listed["team-a"]["tokens_per_min"] == 0
    for bad in ("-1", str(2 ** 30)):
        rc, out = key_ctl(gw, "limits", "team-new", "--tokens-per-min", bad)
        assert rc == 1 and "--tokens-per-min must be a whole number" in out["message"], out


def test_a_spent_budget_comes_back_within_two_windows(tmp_path):
    """A 2 s window, the budget scaled to it (3000 per minute: 100 per 2 s). HAProxy's rate holds what was asked
    for fully in its window and fades it over the next (a lone count holds through it): back within two windows."""
    window, key = 2, "team-refill-key-0123456789ab"
    KEYS["team-refill"] = key
    with running_gateway(tmp_path, ["tiny-a"], keys=[{"name": "team-refill", "key": key, "tokens_per_min": 3000}],
                         vllm_gateway_token_budget_window=window) as small:
        assert f"gpc_rate(30,{window}s)" in small["config"]
        status, _, _, reached = post(small, "team-refill", max_tokens=100)
        spent = time.monotonic()
        assert status == 200 and reached
        error, headers = refused(post(small, "team-refill", max_tokens=1))
        assert f"100 of 100 tokens per {window} s" in error["message"] and 1 <= int(headers["retry-after"]) <= window
        error, _ = refused(post(small, "team-refill", max_tokens=101))
        assert "101 tokens" in error["message"] and f"100 tokens per {window} s" in error["message"]
        deadline = spent + 2 * window + 1
        while (answer := post(small, "team-refill", max_tokens=100))[0] == 429:
            assert time.monotonic() < deadline, "the budget did not come back within two windows"
            time.sleep(0.25)
        assert answer[0] == 200 and answer[3]
        back = time.monotonic() - spent
        assert back >= window - 0.5, back  # not before its window ended
        print(f"\nbudget of 100 per {window} s spent at 0 s, back at {back:.1f} s")


def test_the_counters_the_table_stores_are_the_ones_the_budget_is_validated_against():
    """The template's gpc_rate(N), the Lua action's argument and the ctl's bound come from one number."""
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["__vllm_gateway_token_budget_bits"] == gateway.TOKEN_BUDGET_BITS
    assert gateway.TOKEN_BUDGET_MAX == 2 ** gateway.TOKEN_BUDGET_BITS - 1
    assert load_ctl().TOKEN_BUDGET_MAX == gateway.TOKEN_BUDGET_MAX
    template = (ROLE / "templates" / "haproxy.cfg.j2").read_text()
    assert "gpc_rate({{ __vllm_gateway_token_budget_bits }},{{ vllm_gateway_token_budget_window }}s)" in template
    assert "lua.vllm_gateway_token_budget {{ __vllm_gateway_token_budget_bits }} {{ vllm_gateway_token_budget_window }}" in template
