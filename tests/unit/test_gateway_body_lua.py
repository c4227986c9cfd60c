"""The gateway's limits hold for every spelling of a body (issue 23, item 3): the shipped haproxy.cfg.j2,
rendered with the role's defaults, run by the real HAProxy (Debian's 2.6, Lua 5.3) with the real
vllm-gateway-body.lua and lua-cjson, in front of two recording engines on 127.0.0.1.

Each hostile body gets its exact status and error code; a refused one never reaches an engine, an
accepted one reaches the engine of the model Python's json reads from it, byte for byte as sent."""

from __future__ import annotations

import http.client
import json
import math
import os
import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jinja2
import pytest
import yaml

from conftest import REPO
from vllm_deploy import gateway

ROLE = REPO / "roles" / "vllm_gateway"
CLIENT_KEY = "client-key-0123456789abcdef"
ENGINE_KEY = "engine-key-0123456789abcdef"
MAX_TOKENS = 4096
MAX_N = 8
CAPPED = ("max_tokens", "max_completion_tokens", "max_output_tokens", "n", "best_of")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Engine(ThreadingHTTPServer):
    """An engine that records what reaches it (the gateway's own health checks aside) and answers 200."""

    daemon_threads = True

    def __init__(self, name: str):
        self.name, self.received = name, []
        super().__init__(("127.0.0.1", 0), EngineHandler)


class EngineHandler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Host") != "vllm-gateway":  # the gateway's completion check sets this Host
            self.server.received.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        answer = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        try:
            self.wfile.write(answer)
        except ConnectionError:
            pass  # a health check that read the status line and closed

    def log_message(self, *args):
        pass


def backend_table(engines):
    """The real backend table of a fleet whose one host runs the two engines and the gateway."""
    return gateway.backend_table({"gw": {"address": "127.0.0.1", "instances": [
        {"name": e.name, "model": {"served_name": e.name}, "port": e.server_address[1], "bind": "127.0.0.1"}
        for e in engines]}}, "gw")


def render_config(config_dir, port, table) -> str:
    """haproxy.cfg.j2 with the role's defaults, as the template module renders it (trim_blocks)."""
    variables = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    variables.update({
        "ansible_managed": "Ansible managed", "vllm_gateway_config_dir": str(config_dir),
        "vllm_gateway_socket": str(config_dir / "admin.sock"), "vllm_gateway_bind": "127.0.0.1",
        "vllm_gateway_port": port, "vllm_gateway_metrics_port": None, "vllm_gateway_max_tokens": MAX_TOKENS,
        "__vllm_gateway_table": table,
    })
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROLE / "templates")), trim_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["comment"] = lambda text: "#\n# " + text + "\n#"
    env.filters["to_json"] = json.dumps
    text = env.get_template("haproxy.cfg.j2").render(variables)
    # The only lines changed for the test: it runs as whoever runs pytest, not as the haproxy user.
    return "".join(line for line in text.splitlines(keepends=True)
                   if line.strip() not in ("user haproxy", "group haproxy"))


def write_tables(config_dir, table):
    """The files tasks/main.yml writes beside the config, and the Lua file it copies."""
    (config_dir / "keys.map").write_text(f"{CLIENT_KEY} team-a\n")
    (config_dir / "rate.map").write_text("team-a 0\n")
    (config_dir / "concurrent.map").write_text("team-a 0\n")
    (config_dir / "models.map").write_text("".join(f"{b['served_name']} {b['backend']}\n" for b in table))
    (config_dir / "models.json").write_text(json.dumps(gateway.models_list(table)) + "\n")
    shutil.copy(ROLE / "files" / "vllm-gateway-body.lua", config_dir / "vllm-gateway-body.lua")


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory):
    haproxy = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)
    if not haproxy:
        pytest.skip("haproxy is not installed (Debian: apt-get install haproxy lua-cjson; make setup installs them)")
    config_dir = tmp_path_factory.mktemp("gateway")
    engines = [Engine("tiny-a"), Engine("tiny-b")]
    for engine in engines:
        threading.Thread(target=engine.serve_forever, daemon=True).start()
    port = free_port()
    config = config_dir / "haproxy.cfg"
    table = backend_table(engines)
    config.write_text(render_config(config_dir, port, table))
    write_tables(config_dir, table)
    env = {**os.environ, "VLLM_GATEWAY_ENGINE_KEY": ENGINE_KEY}
    check = subprocess.run([haproxy, "-c", "-f", str(config)], env=env, capture_output=True, text=True)
    if "module 'cjson' not found" in check.stdout + check.stderr:
        pytest.skip("lua-cjson is not installed (Debian: apt-get install lua-cjson; make setup installs it)")
    assert check.returncode == 0, check.stdout + check.stderr
    proc = subprocess.Popen([haproxy, "-db", "-f", str(config)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read()
                time.sleep(0.05)
        yield {"port": port, "engines": {e.name: e for e in engines}}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for engine in engines:
            engine.shutdown()
            engine.server_close()


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
