"""The real gateway on this machine, for the tests that run it (test_gateway_body_lua.py, test_gateway_tls.py):
the shipped haproxy.cfg.j2 rendered with the role's defaults, the files tasks/main.yml writes beside it,
Debian's /usr/sbin/haproxy on a free port of 127.0.0.1, and recording engines behind it. The key table's peers
are a single gateway host's on another free port of 127.0.0.1 (test_gateway_peers.py gives two gateways both);
reload() reloads a master_worker gateway as systemd does (SIGUSR2 to the master).

A test needing what is not installed (haproxy, lua-cjson) is skipped naming the package."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jinja2
import pytest
import yaml

from conftest import REPO
from vllm_deploy import gateway

ROLE = REPO / "roles" / "vllm_gateway"
CTL = ROLE / "files" / "vllm-gateway-ctl"


def load_ctl():
    """roles/vllm_gateway/files/vllm-gateway-ctl as a module (it has no .py name: it is installed as a command)."""
    path = ROLE / "files" / "vllm-gateway-ctl"
    loader = importlib.machinery.SourceFileLoader("vllm_gateway_ctl", str(path))
    spec = importlib.util.spec_from_loader("vllm_gateway_ctl", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
CLIENT_KEY = "client-key-0123456789abcdef"
ENGINE_KEY = "engine-key-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Engine(ThreadingHTTPServer):
    """An engine that records what reaches it (the gateway's own health checks aside) and answers 200
    with an OpenAI-shaped completion. `served`: the model it serves (default its name: one instance per
    model); `delay`: seconds each client request takes; max_in_flight: the most it held at once."""

    daemon_threads = True

    def __init__(self, name: str, served: str | None = None, delay: float = 0.0):
        self.name, self.served, self.delay, self.received = name, served or name, delay, []
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), EngineHandler)


class EngineHandler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        client = self.headers.get("Host") != "vllm-gateway"  # the gateway's completion check sets this Host
        if client:
            self.server.received.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
            with self.server.lock:
                self.server.in_flight += 1
                self.server.max_in_flight = max(self.server.max_in_flight, self.server.in_flight)
            time.sleep(self.server.delay)
            with self.server.lock:
                self.server.in_flight -= 1
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        request = request if isinstance(request, dict) else {}
        tokens = request.get("max_tokens") if type(request.get("max_tokens")) is int else 3
        completion = {
            "id": "cmpl-test", "object": "text_completion", "created": 0, "model": self.server.name,
            "choices": [{"index": 0, "text": f"hello from {self.server.name}", "logprobs": None, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1},
        }
        if request.get("stream") is True:  # one event with all of it, the usage chunk, [DONE]
            events = [json.dumps({**completion, "usage": None}), json.dumps({**completion, "choices": []}), "[DONE]"]
            answer = "".join(f"data: {event}\n\n" for event in events).encode()
            kind = "text/event-stream"
        else:
            answer, kind = json.dumps(completion).encode(), "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        try:
            self.wfile.write(answer)
        except ConnectionError:
            pass  # a health check that read the status line and closed

    def log_message(self, *args):
        pass


def backend_table(engines):
    """The real backend table of a fleet whose one host runs the engines and the gateway."""
    return gateway.backend_table({"gw": {"address": "127.0.0.1", "instances": [
        {"name": e.name, "model": {"served_name": e.served}, "port": e.server_address[1], "bind": "127.0.0.1"}
        for e in engines]}}, "gw")


def render_config(config_dir, port, table, **overrides) -> str:
    """haproxy.cfg.j2 with the role's defaults and `overrides`, as the template module renders it (trim_blocks).
    The peers are a single gateway host's (gw alone, on 127.0.0.1) on a free port unless `overrides` give
    __vllm_gateway_peers (what the role's vllm_gateway_peers filter returns)."""
    variables = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    variables.update({
        "ansible_managed": "Ansible managed", "vllm_gateway_config_dir": str(config_dir),
        "vllm_gateway_socket": str(config_dir / "admin.sock"), "vllm_gateway_bind": "127.0.0.1",
        "vllm_gateway_port": port, "vllm_gateway_metrics_port": None, "__vllm_gateway_table": table,
        "vllm_gateway_peers_port": overrides.pop("vllm_gateway_peers_port", None) or free_port(),
    })
    variables["__vllm_gateway_peers"] = gateway.peers_section(["gw"], "gw", {}, {"gw": variables["vllm_gateway_peers_port"]})
    variables.update(overrides)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROLE / "templates")), trim_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["comment"] = lambda text: "#\n# " + text + "\n#"
    env.filters["to_json"] = json.dumps
    env.filters["bool"] = lambda value: value if isinstance(value, bool) else str(value).lower() in ("true", "yes", "1", "on")
    text = env.get_template("haproxy.cfg.j2").render(variables)
    # The only lines changed for the test: it runs as whoever runs pytest, not as the haproxy user.
    return "".join(line for line in text.splitlines(keepends=True)
                   if line.strip() not in ("user haproxy", "group haproxy"))


def map_files(keys) -> dict[str, str]:
    """The key maps tasks/main.yml writes for vllm_gateway_keys (from the role's key table: hashes, never keys)."""
    table = gateway.key_table(keys)
    return {"keys.map": "".join(f"{k['key_sha256']} {k['name']}\n" for k in table),
            **{f"{column.split('_')[0]}.map": "".join(f"{k['name']} {k[column]}\n" for k in table)
               for column in ("rate_per_s", "concurrent", "tokens_per_min", "expires")}}


def write_tables(config_dir, table, keys=None):
    """The files tasks/main.yml writes beside the config, and the Lua file it copies."""
    for name, text in map_files(keys or [{"name": "team-a", "key": CLIENT_KEY}]).items():
        (config_dir / name).write_text(text)
    (config_dir / "models.map").write_text("".join(f"{b['served_name']} {b['backend']}\n" for b in table))
    (config_dir / "models.json").write_text(json.dumps(gateway.models_list(table)) + "\n")
    shutil.copy(ROLE / "files" / "vllm-gateway-body.lua", config_dir / "vllm-gateway-body.lua")


def haproxy_binary() -> str:
    """Debian's haproxy, or skip naming the package."""
    haproxy = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)
    if not haproxy:
        pytest.skip("haproxy is not installed (Debian: apt-get install haproxy lua-cjson; make setup installs them)")
    return haproxy


@contextmanager
def running_gateway(config_dir, engine_names, keys=None, master_worker=False, engines=None, **overrides):
    """HAProxy with the rendered config in front of one recording engine per name (or the Engines given in
    `engines`, several may serve one model): yields {"port", "engines": {name: Engine}, "config", "pid", "socket"}.
    `overrides` are role variables (vllm_gateway_port defaults to a free port), `keys` vllm_gateway_keys
    (default: CLIENT_KEY as team-a). master_worker: as systemd runs it (-W, a master and its worker), so a
    reload would show as a new worker."""
    haproxy = haproxy_binary()
    engines = list(engines or []) + [Engine(name) for name in engine_names]
    for engine in engines:
        threading.Thread(target=engine.serve_forever, daemon=True).start()
    proc = None
    try:
        port = overrides.pop("vllm_gateway_port", None) or free_port()
        config = config_dir / "haproxy.cfg"
        table = backend_table(engines)
        config.write_text(render_config(config_dir, port, table, **overrides))
        write_tables(config_dir, table, keys)
        env = {**os.environ, "VLLM_GATEWAY_ENGINE_KEY": ENGINE_KEY}
        check = subprocess.run([haproxy, "-c", "-f", str(config)], env=env, capture_output=True, text=True)
        if "module 'cjson' not found" in check.stdout + check.stderr:
            pytest.skip("lua-cjson is not installed (Debian: apt-get install lua-cjson; make setup installs it)")
        assert check.returncode == 0, check.stdout + check.stderr
        # -S: the master's own CLI, as Debian's unit starts it (EXTRAOPTS), where reload() sees the master ready again.
        master = ["-W", "-S", str(config_dir / "master.sock")] if master_worker else []
        proc = subprocess.Popen([haproxy, *master, "-db", "-f", str(config)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        listening = [port] + [p for p in [overrides.get("vllm_gateway_http_redirect_port")] if p]
        for p in listening:
            _wait_accepting(socket.AF_INET, ("127.0.0.1", p), proc)
        # The runtime API too: a master-worker HAProxy's listeners can answer before its worker's admin socket exists
        # (a loaded CI run connected to it in that moment: FileNotFoundError).
        for path in [config_dir / "admin.sock"] + ([config_dir / "master.sock"] if master_worker else []):
            _wait_accepting(socket.AF_UNIX, str(path), proc)
        yield {"port": port, "engines": {e.name: e for e in engines}, "config": config.read_text(), "pid": proc.pid,
               "socket": str(config_dir / "admin.sock"), "master_socket": str(config_dir / "master.sock")}
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
        for engine in engines:
            engine.shutdown()
            engine.server_close()


def _wait_accepting(family, address, proc, timeout=10.0):
    """Until HAProxy accepts a connection at address (a listener's (host, port), or its runtime API's UNIX socket),
    or fail naming it; fails at once when HAProxy exited."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.settimeout(1)
                sock.connect(address)
            return
        except OSError:
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, f"HAProxy did not accept a connection at {address} in {timeout:.0f} s"
            time.sleep(0.05)


# --- a running gateway's runtime API and key tool (the key and token-budget tests) --------------------

def admin(gw, line, socket_key="socket"):
    """One line to HAProxy's runtime API (the gateway's admin socket; socket_key="master_socket": the master's CLI): its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(gw[socket_key])
        sock.sendall(line.encode() + b"\n")
        if socket_key == "master_socket":
            sock.shutdown(socket.SHUT_WR)  # the master's CLI answers once the client has said all (as socat does)
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
    return b"".join(chunks).decode()


def processes(gw):
    """(master PID, worker PID): a reload would fork a new worker."""
    info = dict(line.split(": ", 1) for line in admin(gw, "show info").splitlines() if ": " in line)
    return gw["pid"], int(info["Pid"])


def key_ctl(gw, *args, stdin=""):
    """vllm-gateway-ctl key ARGS as an operator runs it on the gateway host: (exit status, its JSON line or stderr)."""
    run = subprocess.run([sys.executable, str(CTL), "key", *args, "--socket", gw["socket"], "--config-dir", str(gw["dir"])],
                         input=stdin, capture_output=True, text=True, timeout=30)
    return run.returncode, json.loads(run.stdout) if run.stdout.strip() else run.stderr


def peers_ready(gw, timeout=15.0):
    """Wait until the gateway's peers section has finished its own resync (`show peers`: flags with 0x1, learnt from
    the local peer or nothing to learn, and 0x2, from the remote ones or none to ask): HAProxy 2.6 hands its table to
    the next process only then. A process that found nothing to learn gets there after the 5 s resync timeout."""
    deadline = time.monotonic() + timeout
    while True:
        flags = re.search(r"flags=0x([0-9a-f]+)", admin(gw, "show peers"))
        if flags and int(flags.group(1), 16) & 0x3 == 0x3:
            return
        assert time.monotonic() < deadline, admin(gw, "show peers")
        time.sleep(0.1)


def reload(gw, timeout=30.0):
    """A reload as the role's handler does it (systemd's ExecReload: the config checked, then SIGUSR2 to the master of
    a master_worker gateway): returns once a new worker answers on the admin socket and the master's CLI lists it (the
    master is back in its loop, where the next SIGUSR2 is heard), with the seconds it took."""
    master, old = processes(gw)
    began = time.monotonic()
    os.kill(master, signal.SIGUSR2)
    while time.monotonic() < began + timeout:
        try:
            new = processes(gw)[1]
            if new != old and re.search(rf"^{new}\s+worker\s", admin(gw, "show proc", "master_socket"), re.M):
                return time.monotonic() - began
        except (OSError, KeyError, ValueError):
            pass  # a socket between the two workers, or the master between its two lives
        time.sleep(0.02)
    children = subprocess.run(["ps", "-o", "pid,etimes,args", "--ppid", str(master)], capture_output=True, text=True).stdout
    raise AssertionError(f"no new worker {timeout} s after SIGUSR2 to the master {master} (worker {old}); its processes:\n{children}")
