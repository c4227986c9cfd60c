"""The gateway's limits hold for every spelling of a body (issue 23, item 3): the shipped haproxy.cfg.j2,
rendered with the role's defaults, run by the real HAProxy (Debian's 2.6, Lua 5.3) with the real
vllm-gateway-body.lua and lua-cjson, in front of two recording engines on 127.0.0.1.

Each hostile body gets its exact status and error code; a refused one never reaches an engine, an
accepted one reaches the engine of the model Python's json reads from it, byte for byte as sent."""

from __future__ import annotations

import http.client
import json
import math

import pytest

from gateway_harness import CLIENT_KEY, ENGINE_KEY, running_gateway

MAX_TOKENS = 4096
MAX_N = 8
CAPPED = ("max_tokens", "max_completion_tokens", "max_output_tokens", "n", "best_of")


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory):
    with running_gateway(tmp_path_factory.mktemp("gateway"), ["tiny-a", "tiny-b"],
                         vllm_gateway_max_tokens=MAX_TOKENS) as gw:
        yield gw


def send(port, body: bytes, path="/v1/completions", method="POST", key=CLIENT_KEY):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    conn.request(method, path, body=body, headers=headers)
    answer = conn.getresponse()
    status, text = answer.status, answer.read()
    conn.close()
    return status, text


def python_reads(body: bytes) -> dict:
    """What the engine reads: Python's json, and pydantic's int of a capped field (numeric strings too)."""
    data = json.loads(body)
    assert isinstance(data, dict)
    for name in CAPPED:
        if isinstance(data.get(name), str):
            data[name] = float(data[name].strip().replace("_", ""))
    return data


def b(text: str) -> bytes:
    return text.encode()


# (case, body, status, error code, the engine that serves it). Caps: max_tokens 4096, n/best_of 8.
OK = (200, None)
CASES = [
    # Accepted: reach the engine Python's json names, body unchanged.
    ("plain", b'{"model": "tiny-a", "prompt": "hi", "max_tokens": 16}', *OK, "tiny-a"),
    ("max_tokens at the cap", b'{"model": "tiny-a", "max_tokens": 4096}', *OK, "tiny-a"),
    ("numeric string at the cap", b'{"model": "tiny-a", "max_tokens": "4096"}', *OK, "tiny-a"),
    ("large max_tokens first, small last", b'{"model": "tiny-a", "max_tokens": 100000, "max_tokens": 16}', *OK, "tiny-a"),
    ("large value nested, not top level", b'{"model": "tiny-a", "extra": {"max_tokens": 100000, "n": 99}}', *OK, "tiny-a"),
    ("n and best_of at the cap", b'{"model": "tiny-a", "n": 8, "best_of": 8}', *OK, "tiny-a"),
    ("duplicate model: the last routes", b'{"model": "tiny-a", "prompt": "x", "model": "tiny-b"}', *OK, "tiny-b"),
    ("unknown model first, known last", b'{"model": "gpt-9", "model": "tiny-b"}', *OK, "tiny-b"),
    ("escaped model name", b'{"model": "tiny\\u002da"}', *OK, "tiny-a"),
    ("escaped first letter of model", b'{"\\u006dodel": "\\u0074iny-b"}', *OK, "tiny-b"),
    ("chat without max_tokens (not capped here)", b'{"model": "tiny-a", "messages": [{"role": "user", "content": "hi"}]}', *OK, "tiny-a"),
    ("max_tokens null", b'{"model": "tiny-a", "max_tokens": null, "n": null}', *OK, "tiny-a"),
    ("non-integer under the cap (the engine judges)", b'{"model": "tiny-a", "max_tokens": 10.5}', *OK, "tiny-a"),
    ("negative (the engine judges)", b'{"model": "tiny-a", "max_tokens": -1}', *OK, "tiny-a"),
    ("huge number outside the capped fields", b'{"model": "tiny-a", "temperature": 1e400}', *OK, "tiny-a"),
    ("escaped quotes, backslashes and controls", b'{"model": "tiny-a", "prompt": "\\"\\\\\\n\\t\\u0001\\\\"}', *OK, "tiny-a"),
    ("pretty-printed, a string ending in a backslash", b'{\n\t"model": "tiny-a",\n\t"stop": ["\\\\", "\\""]\n}\n', *OK, "tiny-a"),
    ("unicode prompt and whitespace", b'\r\n {"model":"tiny-b","prompt":"\xc3\xa9t\xc3\xa9 \\ud83d\\ude00"}\n', *OK, "tiny-b"),
    # max_tokens / max_completion_tokens / max_output_tokens above the cap, however spelled.
    ("max_tokens above", b'{"model": "tiny-a", "max_tokens": 4097}', 400, "max_tokens_too_large", None),
    ("max_tokens 1e5", b'{"model": "tiny-a", "max_tokens": 1e5}', 400, "max_tokens_too_large", None),
    ("max_tokens 100000.0", b'{"model": "tiny-a", "max_tokens": 100000.0}', 400, "max_tokens_too_large", None),
    ("max_tokens \"100000\"", b'{"model": "tiny-a", "max_tokens": "100000"}', 400, "max_tokens_too_large", None),
    ("max_tokens \" 1e5 \"", b'{"model": "tiny-a", "max_tokens": " 1e5 "}', 400, "max_tokens_too_large", None),
    ("max_tokens \"+100000\"", b'{"model": "tiny-a", "max_tokens": "+100000"}', 400, "max_tokens_too_large", None),
    ("max_tokens \"100_000\"", b'{"model": "tiny-a", "max_tokens": "100_000"}', 400, "max_tokens_too_large", None),
    ("small max_tokens first, large last", b'{"model": "tiny-a", "max_tokens": 16, "max_tokens": 100000}', 400, "max_tokens_too_large", None),
    ("escaped key max_tok\\u0065ns", b'{"model": "tiny-a", "max_tok\\u0065ns": 100000}', 400, "max_tokens_too_large", None),
    ("max_tokens 1e400", b'{"model": "tiny-a", "max_tokens": 1e400}', 400, "max_tokens_too_large", None),
    ("max_completion_tokens above", b'{"model": "tiny-a", "max_completion_tokens": 100000}', 400, "max_tokens_too_large", None),
    ("max_completion_tokens \"1E5\"", b'{"model": "tiny-a", "max_completion_tokens": "1E5"}', 400, "max_tokens_too_large", None),
    ("max_output_tokens above", b'{"model": "tiny-a", "max_output_tokens": 5000}', 400, "max_tokens_too_large", None),
    ("large value top level beside a small nested one", b'{"model": "tiny-a", "extra": {"max_tokens": 1}, "max_tokens": 9999}', 400, "max_tokens_too_large", None),
    # Fan-out.
    ("n above", b'{"model": "tiny-a", "n": 9}', 400, "n_too_large", None),
    ("best_of above", b'{"model": "tiny-a", "best_of": 100}', 400, "n_too_large", None),
    ("n \"16\"", b'{"model": "tiny-a", "n": "16"}', 400, "n_too_large", None),
    ("n 1e1", b'{"model": "tiny-a", "n": 1e1}', 400, "n_too_large", None),
    ("escaped key \\u006e, last of two", b'{"model": "tiny-a", "n": 1, "\\u006e": 64}', 400, "n_too_large", None),
    # A capped field the gateway cannot read as a number.
    ("max_tokens a word", b'{"model": "tiny-a", "max_tokens": "lots"}', 400, "invalid_number", None),
    ("max_tokens hex string", b'{"model": "tiny-a", "max_tokens": "0x186a0"}', 400, "invalid_number", None),
    ("max_tokens fullwidth digits", '{"model": "tiny-a", "max_tokens": "１００"}'.encode(), 400, "invalid_number", None),
    ("max_tokens a list", b'{"model": "tiny-a", "max_tokens": [100000]}', 400, "invalid_number", None),
    ("best_of an object", b'{"model": "tiny-a", "best_of": {"v": 1}}', 400, "invalid_number", None),
    # Not JSON, or JSON the two parsers could read apart.
    ("malformed", b'{"model": "tiny-a", "max_tokens": 16', 400, "invalid_json", None),
    ("trailing comma", b'{"model": "tiny-a",}', 400, "invalid_json", None),
    ("trailing data", b'{"model": "tiny-a"} {"max_tokens": 100000}', 400, "invalid_json", None),
    ("a JSON array", b'[{"model": "tiny-a"}]', 400, "invalid_json", None),
    ("a JSON string", b'"tiny-a"', 400, "invalid_json", None),
    ("empty body", b'', 400, "invalid_json", None),
    ("NaN", b'{"model": "tiny-a", "temperature": NaN}', 400, "invalid_json", None),
    ("max_tokens Infinity", b'{"model": "tiny-a", "max_tokens": Infinity}', 400, "invalid_json", None),
    ("hex number", b'{"model": "tiny-a", "max_tokens": 0x10}', 400, "invalid_json", None),
    ("leading zero", b'{"model": "tiny-a", "max_tokens": 0100000}', 400, "invalid_json", None),
    ("NUL byte after the object", b'{"model": "tiny-a"}\x00{"max_tokens": 100000}', 400, "invalid_json", None),
    ("single quotes", b"{'model': 'tiny-a'}", 400, "invalid_json", None),
    ("UTF-8 BOM", b'\xef\xbb\xbf{"model": "tiny-a"}', 400, "invalid_json", None),
    ("lone surrogate (Python's json takes it)", b'{"model": "tiny-a", "prompt": "\\ud800"}', 400, "invalid_json", None),
    ("raw newline in a string", b'{"model": "tiny-a", "prompt": "a\nb"}', 400, "invalid_json", None),
    ("raw tab in a string", b'{"model": "tiny-a", "prompt": "a\tb"}', 400, "invalid_json", None),
    ("raw control character after an escaped quote", b'{"model": "tiny-a", "prompt": "\\"\x01"}', 400, "invalid_json", None),
    ("raw tab in a string after a backslash string", b'{"model": "tiny-a", "stop": ["\\\\", "a\tb"]}', 400, "invalid_json", None),
    ("not UTF-8", b'{"model": "tiny-a", "prompt": "\xff"}', 400, "invalid_json", None),
    ("nested 2000 deep", b'{"model": "tiny-a", "x": ' + b'[' * 2000 + b']' * 2000 + b'}', 400, "invalid_json", None),
    # Model.
    ("no model", b'{"prompt": "hi"}', 400, None, None),
    ("model a number", b'{"model": 5}', 400, None, None),
    ("model null", b'{"model": null}', 400, None, None),
    ("known model first, unknown last", b'{"model": "tiny-a", "model": "gpt-9"}', 404, "model_not_found", None),
    ("model with a NUL escape", b'{"model": "tiny-a\\u0000"}', 404, "model_not_found", None),
]


def test_every_spelling_gets_its_answer_and_only_accepted_bodies_reach_an_engine(gateway_url):
    port, engines = gateway_url["port"], gateway_url["engines"]
    wrong = []
    for case, body, status, code, engine in CASES:
        before = {name: len(e.received) for name, e in engines.items()}
        got, text = send(port, body)
        reached = {name: e.received[before[name]:] for name, e in engines.items()}
        if got != status:
            wrong.append(f"{case}: status {got}, wanted {status}: {text[:200]!r}")
            continue
        if status != 200:
            error = json.loads(text)["error"]
            assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error", case
            if error["code"] != code:
                wrong.append(f"{case}: code {error['code']!r}, wanted {code!r}")
            if any(reached.values()):
                wrong.append(f"{case}: refused, yet reached {[n for n, r in reached.items() if r]}")
            continue
        got_there = [(name, r) for name, rs in reached.items() for r in rs]
        if [name for name, _ in got_there] != [engine]:
            wrong.append(f"{case}: reached {[name for name, _ in got_there]}, wanted [{engine}]")
            continue
        request = got_there[0][1]
        assert request["body"] == body, f"{case}: the body changed on the way"
        assert request["auth"] == f"Bearer {ENGINE_KEY}", case
        # The engine's own reading of what the gateway let through: its model, and caps that hold.
        seen = python_reads(body)
        assert seen["model"] == engine, case
        for name in CAPPED:
            value = seen.get(name)
            cap = MAX_N if name in ("n", "best_of") else MAX_TOKENS
            assert not isinstance(value, (int, float)) or math.isnan(value) or value <= cap, case
    assert not wrong, "\n".join(wrong)
    assert len(CASES) >= 30


def test_the_route_allowlist_and_keys_answer_before_the_body_is_read(gateway_url):
    port, engines = gateway_url["port"], gateway_url["engines"]
    before = sum(len(e.received) for e in engines.values())
    hostile = b'{"model": "tiny-a", "max_tokens": 1e5, "model": NaN'
    assert send(port, hostile, key=None)[0] == 401
    assert json.loads(send(port, hostile, path="/metrics")[1])["error"]["code"] == "route_not_found"
    assert json.loads(send(port, hostile, method="PUT")[1])["error"]["code"] == "method_not_allowed"
    status, text = send(port, b"", path="/v1/models", method="GET")
    assert status == 200 and [m["id"] for m in json.loads(text)["data"]] == ["tiny-a", "tiny-b"]
    too_big = b'{"model": "tiny-a", "prompt": "' + b"x" * 262144 + b'"}'
    assert json.loads(send(port, too_big)[1])["error"]["code"] == "request_too_large"
    assert sum(len(e.received) for e in engines.values()) == before


def test_the_messages_say_what_to_fix(gateway_url):
    port = gateway_url["port"]
    error = json.loads(send(port, b'{"model": "tiny-a", "max_tokens": "1e9"}')[1])["error"]
    assert error == {"message": f"max_tokens is above the cap of this gateway: {MAX_TOKENS}",
                     "type": "invalid_request_error", "param": "max_tokens", "code": "max_tokens_too_large"}
    error = json.loads(send(port, b'{"model": "tiny-a", "n": 50}')[1])["error"]
    assert error["param"] == "n" and error["message"] == f"n and best_of are above the cap of this gateway: {MAX_N}"
    error = json.loads(send(port, b'{"prompt": "hi"}')[1])["error"]
    assert error == {"message": "you must provide a model parameter", "type": "invalid_request_error",
                     "param": "model", "code": None}
    error = json.loads(send(port, b'{"model": "gpt-9"}')[1])["error"]
    assert error["message"].startswith("The model `gpt-9` does not exist") and error["code"] == "model_not_found"
