"""The fleet behind one endpoint (issue 11), checked as a user would: through the gateway on node1.

Requests come from the machine running molecule to node1's address (the scenario's own container);
the engine-exposure checks run inside the nodes. The load tests drive the real deploy while
scripts/loadgen.py sends requests through the gateway, and print the counts.
"""

import collections
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import helpers
import pytest

PROJECT = helpers.PROJECT
ENGINE_KEY = "molecule-engine-key-9b2e41"
KEY = "molecule-gw-key-team-a-5d0c"
SLOW_KEY = "molecule-gw-key-slow-77e1"
MODELS = ["tiny-a", "tiny-b"]
CTL = "/usr/local/libexec/vllm-deploy/vllm-gateway-ctl"

testinfra_hosts = ["ansible://mol-gw-node1"]


@pytest.fixture(scope="module")
def node2():
    return helpers.node("mol-gw-node2")


@pytest.fixture(scope="module")
def gateway_url(host):
    address = host.check_output("hostname -I").split()[0]
    return f"http://{address}:8080"


def call(url, path, body=None, key=KEY, method=None, raw=None, headers=None):
    """(status, headers (case-insensitive: HAProxy sends them lower-case), parsed JSON body) of one request."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {}), **(headers or {})}
    req = urllib.request.Request(url + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, resp.headers, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, err.headers, json.loads(err.read())


def servers(host):
    return json.loads(host.check_output(f"{CTL} status"))["servers"]


def deploy(extra_vars=None, tags=None):
    """deploy.yml against the scenario's nodes, as an operator runs it (helpers.ansible_playbook)."""
    run = helpers.ansible_playbook(*(["-e", json.dumps(extra_vars)] if extra_vars else []),
                                   *(["--tags", tags] if tags else []), timeout=1500)
    return run.returncode, run.output


def deploy_check(extra_vars):
    run = helpers.ansible_playbook("--check", "--diff", "-e", json.dumps(extra_vars), timeout=1500)
    return run.returncode, run.output


def start_load(url, requests, workdir, stop=True, pause=0.0):
    progress = Path(workdir) / "progress.json"
    stop_file = Path(workdir) / "stop"
    cmd = [sys.executable, str(PROJECT / "scripts" / "loadgen.py"), "--url", url, "--key", KEY,
           "--models", ",".join(MODELS), "--requests", str(requests), "--concurrency", "4", "--max-tokens", "16",
           "--progress-file", str(progress), "--pause", str(pause), "--json"] + (["--stop-file", str(stop_file)] if stop else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the load is really flowing before anything is restarted
        if progress.exists() and json.loads(progress.read_text() or "{}").get("complete", 0) >= 8:
            return proc, stop_file
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.5)
    proc.kill()
    pytest.fail("the load generator did not complete 8 requests through the gateway within 120 s")


def gateway_log(host, since):
    """What the gateway logged besides the 200s since `since` (epoch): errors, check failures, state changes."""
    lines = host.check_output(f"journalctl -u haproxy --no-pager -o cat --since @{int(since)}").splitlines()
    return [line for line in lines if '" 200 ' not in line and " 200 " not in line][-60:]


def finish_load(proc, timeout=600):
    out, err = proc.communicate(timeout=timeout)
    assert out.strip(), err
    return json.loads(out.strip().splitlines()[-1])


# --- weights from the store through the fleet cache (issue 22) ----------------------------------------

STORE = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent")) / "store"


def store_files(rev):
    """{path: bytes} of a revision as prepare.yml published it (the store's own directory)."""
    root = STORE / "root" / "tiny-a" / rev
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "manifest.json"}


def store_log_lines():
    return (STORE / "access.log").read_text().splitlines() if (STORE / "access.log").exists() else []


def store_bytes(lines, rev, name=None):
    """Body bytes nginx sent for tiny-a/<rev>'s files (manifests apart) in these access-log lines."""
    total = 0
    for line in lines:
        parts = line.split('"')
        method, uri = parts[1].split()[:2]
        status, size = parts[2].split()[:2]
        if method == "GET" and uri.startswith(f"/tiny-a/{rev}/") and not uri.endswith("/manifest.json") \
                and (name is None or uri.endswith("/" + name)) and status in ("200", "206"):
            total += int(size)
    return total


def served_dir(node, unit="vllm-a"):
    """The directory the unit's engine serves (--model), from systemd's own view of the unit."""
    argv = node.check_output(f"systemctl show -p ExecStart --value {unit}").split()
    return argv[argv.index("--model") + 1]


def assert_holds(node, directory, rev):
    """Every file of the revision on the node, byte for byte as the store has it."""
    for rel, data in store_files(rev).items():
        assert node.check_output(f"sha256sum {directory}/{rel}").split()[0] == hashlib.sha256(data).hexdigest(), rel


def test_models_lists_the_fleets_served_names(gateway_url):
    status, _, body = call(gateway_url, "/v1/models")
    assert status == 200
    assert body["object"] == "list"
    assert sorted(m["id"] for m in body["data"]) == MODELS


# What the engines serve besides inference (vLLM 0.32's /openapi.json: reference/environment.md), the
# inference routes this gateway does not enable (vllm_gateway_routes: the default three), and the
# enabled ones spelled as a client might to slip past an allowlist.
NOT_ROUTES = [
    "/metrics", "/tokenize", "/detokenize", "/docs", "/openapi.json", "/version", "/health", "/ping", "/load",
    "/scale_elastic_ep", "/is_scaling_elastic_ep", "/kv_event_sources", "/invocations", "/generative_scoring",
    "/v1/chat/completions/batch", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens", "/v1/systemone", "/",
    "//v1/completions", "/v1//completions", "/v1/completions/", "/v1/./completions", "/v1/x/../completions",
    "/v1/../metrics", "/%2e%2e/metrics", "/V1/completions", "/v1/%63ompletions", "/v1/completions%2f",
    "/v1/completions;x", "/v1/chat%2fcompletions", "/v1/models/", "/v1/models/tiny-a",
]


def test_only_the_inference_routes_reach_an_engine(host, gateway_url):
    """Every other path, however spelled, gets the gateway's own 404 (and a wrong method its 405) with a
    valid key and a body naming a served model; no engine sees any of these requests."""
    before = {name: s["total"] for name, s in servers(host).items()}
    body = {"model": "tiny-a", "prompt": "Hello", "max_tokens": 1}
    answers = {}
    for path in NOT_ROUTES:
        for method in ("POST", "GET"):
            status, _, reply = call(gateway_url, path, body if method == "POST" else None, method=method)
            answers[(method, path)] = (status, reply.get("error", {}).get("code"))
    wrong = {k: v for k, v in answers.items() if v != (404, "route_not_found")}
    assert not wrong, wrong
    for method, path, allow in (("GET", "/v1/completions", "POST"), ("PUT", "/v1/chat/completions", "POST"),
                                ("DELETE", "/v1/completions", "POST"), ("POST", "/v1/models", "GET")):
        status, headers, reply = call(gateway_url, path, body if method != "GET" else None, method=method)
        assert (status, reply["error"]["code"], headers["Allow"]) == (405, "method_not_allowed", allow), (method, path, reply)
    assert {name: s["total"] for name, s in servers(host).items()} == before
    status, _, reply = call(gateway_url, "/v1/completions", body)  # the route itself still answers
    assert status == 200 and reply["usage"]["completion_tokens"] == 1


def test_each_model_is_served_by_its_instances_on_both_nodes(host, gateway_url):
    before = {k: v for k, v in servers(host).items()}
    assert set(before) == {"model_tiny-a/mol-gw-node1__a", "model_tiny-a/mol-gw-node2__a",
                           "model_tiny-b/mol-gw-node1__b", "model_tiny-b/mol-gw-node2__b"}
    assert all(s["status"] == "UP" for s in before.values()), before
    for model in MODELS:
        for _ in range(4):
            status, _, body = call(gateway_url, "/v1/completions", {"model": model, "prompt": "Hello", "max_tokens": 4})
            assert status == 200, body
            assert body["model"] == model
            assert body["usage"]["completion_tokens"] == 4
    # leastconn spreads sequential requests over the instances of a model: both nodes answered
    served = {name: s["total"] for name, s in servers(host).items()}
    assert all(served[name] > before[name]['total'] for name in before), served


def test_the_fleet_cache_fetched_tiny_a_once_and_both_nodes_serve_it(host, node2):
    """tiny-a is `source: url`: the store served each of its files once for the two nodes, and both
    nodes' instance a serve a revision directory under the model's path holding exactly the store's files."""
    size = sum(len(b) for b in store_files("r1").values())
    assert store_bytes(store_log_lines(), "r1") == size, "the store did not serve tiny-a exactly once"
    dirs = {served_dir(node) for node in (host, node2)}
    assert len(dirs) == 1, dirs
    (directory,) = dirs
    assert re.fullmatch(r"/srv/models/tiny-a/[0-9a-f]{12}", directory), directory
    for node in (host, node2):
        assert_holds(node, directory, "r1")


def test_the_gateway_exports_each_server_s_state_for_prometheus(host):
    """HAProxy's own exporter on vllm_gateway_metrics_port: what role vllm_monitoring's gateway job scrapes."""
    address = host.check_output("hostname -I").split()[0]
    with urllib.request.urlopen(f"http://{address}:8405/metrics", timeout=30) as resp:
        text = resp.read().decode()
    up = {line.split('server="')[1].split('"')[0] for line in text.splitlines()
          if line.startswith("haproxy_server_status{") and 'state="UP"' in line and line.endswith(" 1")}
    assert up == {"mol-gw-node1__a", "mol-gw-node1__b", "mol-gw-node2__a", "mol-gw-node2__b"}, up


def test_streaming_arrives_as_chunks_ending_with_done(gateway_url):
    req = urllib.request.Request(gateway_url + "/v1/completions", data=json.dumps(
        {"model": "tiny-b", "prompt": "Hello", "max_tokens": 8, "stream": True, "ignore_eos": True}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        assert resp.headers.get("Transfer-Encoding") == "chunked"
        events = [line for line in resp.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert len(events) >= 9  # one event per token, then [DONE]: nothing buffered into one


@pytest.mark.parametrize("case", ["no key", "wrong key", "engine key"])
def test_a_request_without_a_gateway_key_gets_401_json(gateway_url, case):
    key = {"no key": None, "wrong key": "not-a-key-of-this-gateway", "engine key": ENGINE_KEY}[case]
    status, headers, body = call(gateway_url, "/v1/completions", {"model": "tiny-a", "prompt": "x", "max_tokens": 1}, key=key)
    assert status == 401
    assert headers["Content-Type"] == "application/json"
    assert body["error"]["code"] == "invalid_api_key"


def test_over_the_rate_limit_gets_429_with_retry_after(gateway_url):
    answers = [call(gateway_url, "/v1/models", key=SLOW_KEY) for _ in range(6)]  # the key allows 2 per second
    assert [a[0] for a in answers[:2]] == [200, 200]
    limited = [a for a in answers if a[0] == 429]
    assert limited, [a[0] for a in answers]
    status, headers, body = limited[0]
    assert headers["Retry-After"] == "1"
    assert body["error"]["type"] == "rate_limit_error"
    # HAProxy's rate is a sliding estimate over the current and the previous 1 s period (refused
    # requests count too): two periods later the key is under its limit again
    time.sleep(2.5)
    assert call(gateway_url, "/v1/models", key=SLOW_KEY)[0] == 200


def test_a_model_nobody_serves_gets_404_openai_error(gateway_url):
    status, _, body = call(gateway_url, "/v1/completions", {"model": "gpt-9", "prompt": "x", "max_tokens": 1})
    assert status == 404
    assert body["error"]["code"] == "model_not_found" and "gpt-9" in body["error"]["message"]


def test_an_oversized_body_gets_413_json_before_any_engine(gateway_url):
    prompt = "word " * 18000  # 90 KB > vllm_gateway_max_body_bytes 65536
    status, _, body = call(gateway_url, "/v1/completions", {"model": "tiny-a", "prompt": prompt, "max_tokens": 1})
    assert status == 413
    assert body["error"]["code"] == "request_too_large"


def test_max_tokens_above_the_cap_gets_400_json(gateway_url):
    status, _, body = call(gateway_url, "/v1/completions", {"model": "tiny-a", "prompt": "x", "max_tokens": 65})
    assert status == 400
    assert body["error"]["param"] == "max_tokens"
    assert call(gateway_url, "/v1/completions", {"model": "tiny-a", "prompt": "x", "max_tokens": 64})[0] == 200


def test_the_cap_holds_for_the_spelling_the_engine_reads(gateway_url):
    """The deployed Lua body reader with Debian's lua-cjson (the unit test covers every spelling)."""
    for raw in (b'{"model": "tiny-a", "prompt": "x", "max_tokens": 1e2}',
                b'{"model": "tiny-a", "prompt": "x", "max_tokens": 1, "max_tok\\u0065ns": 65}'):
        status, _, body = call(gateway_url, "/v1/completions", raw=raw)
        assert (status, body["error"]["code"]) == (400, "max_tokens_too_large"), raw
    status, _, body = call(gateway_url, "/v1/completions", raw=b'{"model": "tiny-a", "prompt": "x", "n": 9}')
    assert (status, body["error"]["code"]) == (400, "n_too_large")
    # The engine reads the last of two `model` keys, and so does the gateway's routing.
    status, _, body = call(gateway_url, "/v1/completions", raw=b'{"model": "nobody", "model": "tiny-b", "prompt": "x", "max_tokens": 1}')
    assert status == 200 and body["model"] == "tiny-b"


def test_a_loopback_engine_is_not_reachable_from_the_other_node(host, node2):
    node1_address = host.check_output("hostname -I").split()[0]
    assert host.socket("tcp://127.0.0.1:8000").is_listening
    probe = node2.run(f"python3 -c \"import socket; socket.create_connection(('{node1_address}', 8000), timeout=5)\"")
    assert probe.rc != 0 and "Connection refused" in probe.stderr


def test_an_engine_without_the_engine_key_answers_401(host, node2):
    node2_address = node2.check_output("hostname -I").split()[0]
    for key in ("", KEY):  # no key, and a gateway key: neither is the engine's
        script = ("import sys,urllib.request,urllib.error\n"
                  "h={'Authorization':'Bearer '+sys.argv[2]} if sys.argv[2] else {}\n"
                  "try: urllib.request.urlopen(urllib.request.Request(sys.argv[1],headers=h),timeout=30); print(200)\n"
                  "except urllib.error.HTTPError as e: print(e.code)\n")
        assert host.check_output("python3 -c %s %s %s", script, f"http://{node2_address}:8000/v1/models", key) == "401"


def test_key_files_are_closed_and_keys_stay_out_of_config_and_logs(host):
    for path, mode, group in [("/etc/haproxy/vllm/keys.map", 0o640, "haproxy"), ("/etc/haproxy/vllm/engine.env", 0o600, "root")]:
        f = host.file(path)
        assert (f.mode, f.user, f.group) == (mode, "root", group), path
    keys_map = host.file("/etc/haproxy/vllm/keys.map").content_string
    assert hashlib.sha256(KEY.encode()).hexdigest() in keys_map and KEY not in keys_map  # the hash, never the key
    config = host.file("/etc/haproxy/haproxy.cfg").content_string
    assert KEY not in config and ENGINE_KEY not in config
    log = (Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "ansible.log").read_text()
    assert "Write the client keys" in log
    assert KEY not in log and SLOW_KEY not in log and ENGINE_KEY not in log


def haproxy_pids(host):
    """(master, newest worker): a reload forks a new worker."""
    return (host.check_output("systemctl show -p MainPID --value haproxy"), host.check_output("pgrep -f -n '^/usr/sbin/haproxy'"))


def ctl_key(host, *args, key=None):
    """vllm-gateway-ctl key ARGS on the gateway node, a key on its stdin (never in its arguments)."""
    cmd = " ".join(["printf '%%s\\n' %s |" if key else "", CTL, "key", *(["%s"] * len(args))])
    run = host.run(cmd, *([key] if key else []), *args)
    assert run.rc == 0, run.stdout + run.stderr
    return json.loads(run.stdout)


def test_a_key_revoked_mid_load_is_refused_at_once_and_a_new_one_works_without_a_reload(host, gateway_url):
    """Issue 23, item 4: team-a's load runs on (scripts/loadgen.py) while a second key, added through the ctl,
    is revoked mid-load: its next requests get 401, team-a loses nothing, a key added next works at once,
    and the same HAProxy master and worker serve it all. The next deploy removes what the ctl added."""
    revoked_key, new_key = "molecule-gw-key-revoked-3a9f", "molecule-gw-key-new-c41d"
    pids = haproxy_pids(host)
    ctl_key(host, "add", "mol-revoked", key=revoked_key)
    results, stop = [], threading.Event()

    def second_client():
        for _ in range(2000):
            if stop.is_set():
                return
            start = time.monotonic()
            status = call(gateway_url, "/v1/models", key=revoked_key)[0]
            results.append((start, time.monotonic(), status))
            time.sleep(0.05)

    with tempfile.TemporaryDirectory() as work:
        proc, stop_file = start_load(gateway_url, 2000, work, pause=0.1)
        client = threading.Thread(target=second_client, daemon=True)
        client.start()
        try:
            while len(results) < 10:
                time.sleep(0.1)
            revoke_start = time.monotonic()
            assert ctl_key(host, "revoke", "mol-revoked")["changed"]
            revoked = time.monotonic()
            while sum(1 for r in results if r[0] > revoked) < 10:
                time.sleep(0.1)
            assert ctl_key(host, "add", "mol-new", key=new_key)["ok"]
            assert call(gateway_url, "/v1/models", key=new_key)[0] == 200
        finally:
            stop.set()
            stop_file.touch()
            client.join(timeout=60)
        result = finish_load(proc)
    ctl_key(host, "revoke", "mol-new")
    before = {r[2] for r in results if r[1] < revoke_start}
    after = {r[2] for r in results if r[0] > revoked}
    print(f"\nteam-a under load: {json.dumps(result)}; revoked key: {before} before, {after} after")
    assert before == {200} and after == {401}
    assert result["failed"] == 0 and result["complete"] == result["sent"] > 0, result
    assert haproxy_pids(host) == pids  # no reload
    listed = json.dumps(ctl_key(host, "list"))
    assert all(k not in listed for k in (KEY, revoked_key, new_key, hashlib.sha256(KEY.encode()).hexdigest()))


def test_an_open_engine_without_an_api_key_is_refused_before_any_change(node2):
    before = node2.file("/etc/systemd/system/vllm-a.service").sha256sum
    rc, out = deploy(extra_vars={"vault_vllm_api_key": ""})
    assert rc != 0
    assert ("mol-gw-node2: vllm_bind: instance a listens on 0.0.0.0 (beyond localhost) without an API key"
            " — set vault_vllm_api_key") in out
    assert node2.file("/etc/systemd/system/vllm-a.service").sha256sum == before


def test_a_malformed_gateway_key_is_refused_naming_it(host):
    rc, out = deploy(extra_vars={"vllm_gateway_keys": [{"name": "team-a", "key": "short", "rate_per_s": "fast"}]})
    assert rc != 0
    assert "mol-gw-node1: vllm_gateway_keys[0].key: the key of team-a is missing or not 16-256 characters" in out
    assert "mol-gw-node1: vllm_gateway_keys[0].rate_per_s: must be a whole number" in out
    assert "short" not in out.split("vllm_gateway_keys[0].key")[1].split("\n")[0]


def test_each_engine_computes_on_the_cores_its_node_allows(host, node2):
    """vLLM's own start-up log says where each engine's compute thread runs: on its node's own core
    (the scenario gives node1 core 0, node2 core 1), bound by the deploy (vllm_deploy/cpus.py), not
    by vLLM's `auto`, which picks NUMA node 0's cores whatever the node may use."""
    for node, units, core in ((host, ("vllm-a", "vllm-b"), "[0]"), (node2, ("vllm-a", "vllm-b"), "[1]")):
        for unit in units:
            lines = node.check_output(f"journalctl -u {unit} --no-pager -o cat | grep -E 'VLLM_CPU_OMP_THREADS_BIND=|local_rank=0, core ids=' | tail -n 2")
            assert "core ids=" in lines, f"{unit}: vLLM logged no OpenMP binding"
            print(f"\n{unit}: {' '.join(lines.split())}")
            assert lines.rsplit("core ids=", 1)[1].strip() == core, lines
            assert "auto_setup=False" in lines, lines


class RotationWatch:
    """Reads the gateway's table every half second while a deploy runs (docker exec on node1, from
    this machine) and keeps, per model, the most of its servers out of rotation at one reading."""

    def __init__(self, node="mol-gw-node1"):
        self.node, self.most_out, self.seen_out, self.readings = node, {}, set(), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            run = subprocess.run(["docker", "exec", self.node, CTL, "status"], capture_output=True, text=True, timeout=30)
            if run.returncode == 0:
                table = json.loads(run.stdout)["servers"]
                self.readings += 1
                out = {}
                for ref, server in table.items():
                    backend = ref.split("/", 1)[0]
                    out.setdefault(backend, 0)
                    if not server["status"].startswith("UP"):
                        out[backend] += 1
                        self.seen_out.add(ref)
                for backend, count in out.items():
                    self.most_out[backend] = max(self.most_out.get(backend, 0), count)
            self._stop.wait(0.5)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=60)


def pids(node, units=("vllm-a", "vllm-b")):
    return {unit: node.check_output(f"systemctl show -p MainPID --value {unit}") for unit in units}


def test_a_flipped_byte_on_a_node_is_found_and_only_that_file_copied_again(host, node2):
    """One byte of tiny-a's weights changed on node2 (disk or hand): the next deploy, with nothing else
    changed, finds it against the source's digest, says so, copies that file again from the fleet cache
    (the store serves nothing: the cache's copy is verified) and restarts nothing."""
    directory = served_dir(node2)
    target = f"{directory}/model.safetensors"
    node2.check_output("python3 -c %s %s", "import sys; f=open(sys.argv[1],'r+b'); f.seek(4096); b=f.read(1); "
                       "f.seek(4096); f.write(bytes([b[0]^255]))", target)
    want = hashlib.sha256(store_files("r1")["model.safetensors"]).hexdigest()
    assert node2.check_output(f"sha256sum {target}").split()[0] != want
    before = {"node1": pids(host), "node2": pids(node2)}
    seen = len(store_log_lines())
    rc, out = deploy()
    assert rc == 0, out[-4000:]
    dir_name = directory.rsplit("/", 1)[1]
    assert (f"mol-gw-node2: model tiny-a@{dir_name}: model.safetensors differed from the sha256 the source lists;"
            " removed, copied again from the fleet cache") in out, out[-4000:]
    assert re.search(r"mol-gw-node1: model tiny-a revision \w+ in " + re.escape(directory) + r": \d+ files, [\d.]+ [KMG]B from "
                     r"http://127\.0\.0\.1:18090/tiny-a/r1; already held, verified", out), out[-4000:]
    assert re.search(r"mol-gw-node2: model tiny-a revision \w+ in " + re.escape(directory) + r": .*? copied [\d.]+ [KMG]B "
                     r"from the fleet cache \(again: model.safetensors\), verified", out), out[-4000:]
    assert node2.check_output(f"sha256sum {target}").split()[0] == want
    assert store_bytes(store_log_lines()[seen:], "r1") == 0, "the store was read again"
    assert {"node1": pids(host), "node2": pids(node2)} == before, "a deploy that changed nothing restarted an engine"


def test_a_node_without_room_for_a_revision_is_refused_before_any_transfer(host, node2):
    """tiny-a's path on a 64 MB filesystem on both nodes (a tmpfs: a real full disk) and its 0.4 GB
    revision r3: both nodes are refused with the GB figures after only config.json and the tokenizer
    were fetched; no weight byte left the store and no unit changed."""
    for node in (host, node2):
        node.check_output("mkdir -p /srv/small && mount -t tmpfs -o size=64m tmpfs /srv/small")
    try:
        before = {"node1": pids(host), "node2": pids(node2)}
        seen = len(store_log_lines())
        rc, out = deploy(extra_vars={"gateway_tiny_a_rev": "r3", "gateway_tiny_a_path": "/srv/small/tiny-a"})
        assert rc != 0
        for node in ("mol-gw-node1", "mol-gw-node2"):
            found = re.search(node + r": model tiny-a revision \w+ needs ([\d.]+) GB in /srv/small/tiny-a/\w+ "
                              r"\(([\d.]+) GB of files \+ 5% margin\) but only ([\d.]+) GB is free there; "
                              r"free space on the node or point vllm_models.tiny-a.path at a larger disk", out)
            assert found, out[-4000:]
            assert float(found[2]) >= 0.3 and float(found[3]) <= 0.1, found[0]
        lines = store_log_lines()[seen:]
        assert store_bytes(lines, "r3", "config.json") > 0, "the planner's files were not fetched first"
        assert store_bytes(lines, "r3", "model.safetensors") == 0, "weights moved before the refusal"
        assert {"node1": pids(host), "node2": pids(node2)} == before
        assert served_dir(host).startswith("/srv/models/tiny-a/")
    finally:
        for node in (host, node2):
            node.run("umount /srv/small")


def test_check_mode_prints_the_rollout_plan_and_restarts_nothing(host, node2):
    """--check --diff of the same group-wide change: the plan the real run will follow, nothing restarted."""
    before = {"node1": pids(host), "node2": pids(node2)}
    rc, out = deploy_check(extra_vars={"gateway_max_num_seqs": 6})
    assert rc == 0, out[-4000:]
    assert "Rollout plan: 2 waves for 4 changed instances (budget: 1 replica of each model per wave)" in out, out[-4000:]
    assert "wave 1 (canary): mol-gw-node1/a, mol-gw-node2/b" in out and "wave 2: mol-gw-node1/b, mol-gw-node2/a" in out
    assert "vllm-a would be restarted with the new version and gated" in out
    assert {"node1": pids(host), "node2": pids(node2)} == before
    assert "--max-num-seqs 8" in node2.check_output("systemctl show -p ExecStart --value vllm-a")


def test_a_rollout_of_every_instance_under_load_loses_no_request(host, node2, gateway_url):
    """README's layout: max_num_seqs 8 → 6 for the whole group (all four instances), and tiny-a's
    weights to their next revision (r2: retrained, same config and tokenizer), while 4 clients stream
    and not through the gateway. The deploy plans waves for the fleet (the canary first: one replica
    of each model, which serves the load before the rest restart), never has both replicas of a model
    out of rotation, and every request sent completes. The store serves r2's changed file once for both
    nodes; each instance a moves to r2's directory at its restart; r1 stays for a rollback."""
    r1_dir = served_dir(host)
    seen = len(store_log_lines())
    worker_before = host.check_output("pgrep -f -n '^/usr/sbin/haproxy'")
    since = float(host.check_output("date +%s"))
    with tempfile.TemporaryDirectory() as work:
        # Paced (each client waits 0.3 s between requests: about 10 requests/s on these nodes) and
        # capped far above a rollout's length: the load only has to overlap every instance's
        # restart, and the stop file ends it once the rollout is done.
        proc, stop = start_load(gateway_url, 12000, work, pause=0.3)
        started = time.monotonic()
        try:
            with RotationWatch() as watch:
                rc, out = deploy(extra_vars={"gateway_max_num_seqs": 6, "gateway_tiny_a_rev": "r2"})
            rollout_seconds = time.monotonic() - started
            load_outlasted_rollout = proc.poll() is None
        finally:
            stop.touch()
        result = finish_load(proc)
    print(f"\nrollout under load ({rollout_seconds:.0f} s): {json.dumps(result)}")
    print(f"most servers of a model out of rotation at once: {watch.most_out} ({watch.readings} readings)")
    if result["failed"]:
        print("gateway log (not 200):\n" + "\n".join(gateway_log(host, since)))
    assert rc == 0, out[-4000:]
    assert "Rollout plan: 2 waves for 4 changed instances (budget: 1 replica of each model per wave)" in out, out[-4000:]
    assert "wave 1 (canary): mol-gw-node1/a, mol-gw-node2/b" in out
    assert "wave 2: mol-gw-node1/b, mol-gw-node2/a" in out
    for canary in ("model_tiny-a/mol-gw-node1__a", "model_tiny-b/mol-gw-node2__b"):
        assert f"canary {canary}: as good over 30" in out, out[-4000:]
    for server in ("mol-gw-node1__a", "mol-gw-node1__b", "mol-gw-node2__a", "mol-gw-node2__b"):
        assert f"{server} drained:" in out, f"{server} was not drained at the gateway"
    # (YAML output doubles the apostrophe of "gateway's": match up to it)
    assert out.count("in rotation: the gateway") >= 4, "not every instance was put back in rotation"
    assert watch.seen_out == {"model_tiny-a/mol-gw-node1__a", "model_tiny-a/mol-gw-node2__a",
                              "model_tiny-b/mol-gw-node1__b", "model_tiny-b/mol-gw-node2__b"}, watch.seen_out
    assert watch.most_out == {"model_tiny-a": 1, "model_tiny-b": 1}, "a wave took both replicas of a model out"
    assert load_outlasted_rollout, f"the load ended before the rollout did: {result}"
    assert result["failed"] == 0, result
    assert result["complete"] == result["sent"] >= 40 and result["stream"] > 0 and result["non_stream"] > 0
    for node in (host, node2):
        for instance in ("a", "b"):
            assert "--max-num-seqs 6" in node.check_output(f"systemctl show -p ExecStart --value vllm-{instance}"), instance
    r1, r2 = store_files("r1"), store_files("r2")
    changed = sum(len(data) for rel, data in r2.items() if r1.get(rel) != data)
    assert 0 < changed < sum(len(data) for data in r2.values())
    assert store_bytes(store_log_lines()[seen:], "r2") == changed, "r2's changed files did not come from the store exactly once"
    for node in (host, node2):
        r2_dir = served_dir(node)
        assert r2_dir != r1_dir and r2_dir.startswith("/srv/models/tiny-a/"), r2_dir
        assert_holds(node, r2_dir, "r2")
        assert_holds(node, r1_dir, "r1")  # kept for a rollback
    # the instances changed, the gateway's table did not: no reload, the same worker served throughout
    assert host.check_output("pgrep -f -n '^/usr/sbin/haproxy'") == worker_before
    assert all(s["status"] == "UP" for s in servers(host).values())


def test_a_killed_engine_leaves_rotation_and_comes_back(host, gateway_url):
    """kill -9 of node1's instance a while 4 clients stream and not through the gateway. The gateway's
    view of the requests in flight on it is read just before and just after the kill, in one command."""
    target, unit = "model_tiny-a/mol-gw-node1__a", "vllm-a"
    since = float(host.check_output("date +%s"))
    pid = host.check_output(f"systemctl show -p MainPID --value {unit}")
    with tempfile.TemporaryDirectory() as work:
        proc, _ = start_load(gateway_url, 240, work, stop=False)
        before, after = host.check_output(f"{CTL} status; kill -9 {pid}; {CTL} status").splitlines()
        killed_at = time.monotonic()
        in_flight = max(json.loads(before)["servers"][target]["inflight"], json.loads(after)["servers"][target]["inflight"])
        left = None
        while time.monotonic() - killed_at < 30:
            if not servers(host)[target]["status"].startswith("UP"):
                left = time.monotonic() - killed_at
                break
            time.sleep(0.2)
        result = finish_load(proc)
    print(f"\nkill -9 under load: {json.dumps(result)}; in flight on {target} at the kill: {in_flight}; "
          f"out of rotation after {left if left is None else round(left, 1)}s")
    if result["failed"]:
        print("gateway log (not 200):\n" + "\n".join(gateway_log(host, since)))
    assert left is not None and left <= 10, "the killed engine stayed in rotation"
    assert result["sent"] == 240
    assert result["failed"] <= in_flight, result
    deadline = time.monotonic() + 420
    while time.monotonic() < deadline and not servers(host)[target]["status"].startswith("UP"):
        time.sleep(2)
    assert servers(host)[target]["status"].startswith("UP"), "not back in rotation after systemd restarted it"
    assert host.check_output(f"systemctl show -p MainPID --value {unit}") not in ("0", pid)
    assert int(host.check_output(f"systemctl show -p NRestarts --value {unit}")) >= 1
    for _ in range(6):  # both tiny-a instances answer again through the gateway
        status, _, body = call(gateway_url, "/v1/completions", {"model": "tiny-a", "prompt": "Hello", "max_tokens": 2})
        assert status == 200 and body["usage"]["completion_tokens"] == 2


def test_a_canary_that_serves_worse_is_rolled_back_and_the_rest_never_restart(host, node2, gateway_url):
    """The whole group's instance a moves to a new revision of tiny-a's weights that answers correctly
    but far slower (r3: a 12-layer, 1024-wide build of the same name) while 4 clients stream and not
    through the gateway. The canary (node1's a) passes its gate, serves the load for 30 s, and its
    engine's time to first token or inter-token latency is judged against node2's a, not changed
    yet: worse, so the deploy rolls it back itself, node2's a is never restarted, the play fails
    naming the canary, both figures and the threshold, and no request is lost: node1's a serves the
    weights it served before (r2's directory, kept on the node), r3 beside them for a later try."""
    served_before = served_dir(host)
    node2_before = (pids(node2), node2.file("/etc/systemd/system/vllm-a.service").sha256sum)
    node1_unit = host.file("/etc/systemd/system/vllm-a.service").sha256sum
    since = float(host.check_output("date +%s"))
    with tempfile.TemporaryDirectory() as work:
        proc, stop = start_load(gateway_url, 12000, work, pause=0.3)
        try:
            rc, out = deploy(extra_vars={"gateway_max_num_seqs": 6, "gateway_tiny_a_rev": "r3"})
        finally:
            stop.touch()
        result = finish_load(proc)
    verdict = out.split("canary model_tiny-a/mol-gw-node1__a:", 1)[-1][:600]
    print(f"\nworse canary under load: {json.dumps(result)}\nverdict: {verdict}")
    if result["failed"]:
        print("gateway log (not 200):\n" + "\n".join(gateway_log(host, since)))
    assert rc != 0, out[-4000:]
    assert "wave 1 (canary): mol-gw-node1/a" in out and "wave 2: mol-gw-node2/a" in out, out[-4000:]
    assert "canary model_tiny-a/mol-gw-node1__a: worse over 30" in out, out[-4000:]
    assert "(engine metrics)" in verdict, verdict
    assert ("time to first token" in verdict or "inter-token latency" in verdict) and "threshold 2x" in verdict, verdict
    assert "mol-gw-node1: the new version of instance a failed its gate at canary" in out
    assert "Diagnosis: canary_worse" in out
    assert "Rolled back: vllm-a serves the previous version again (gate passed)." in out
    assert "The rollout stopped after wave 1" in out
    # node1's a serves its previous version again; node2's a was never touched
    assert host.file("/etc/systemd/system/vllm-a.service").sha256sum == node1_unit
    assert served_dir(host) == served_before
    assert_holds(host, served_before, "r2")
    assert (pids(node2), node2.file("/etc/systemd/system/vllm-a.service").sha256sum) == node2_before
    assert result["failed"] == 0, result
    assert result["complete"] == result["sent"] >= 40 and result["stream"] > 0 and result["non_stream"] > 0
    assert all(s["status"] == "UP" for s in servers(host).values()), servers(host)


def routed(host, since, backend, count):
    """The instance that took each of the last `count` requests of `backend` (sent one at a time since `since`,
    epoch, with no other traffic to that model), from the gateway's own log."""
    time.sleep(1.5)  # journald's lag
    # --since has whole seconds: earlier requests of that second are in, hence the last `count`
    lines = host.check_output(f"journalctl -u haproxy --no-pager -o cat --since @{int(since)}").splitlines()
    servers = [m[1] for line in lines if (m := re.search(rf" {backend}/(\S+) ", line))]
    assert len(servers) >= count, servers
    return servers[-count:]


def mostly_one(servers):
    """The instance most of them went to, when at most one went elsewhere: hash-balance-factor (on, as README
    leaves it) may send a request past an instance still counting the one before as in flight."""
    (top, n), = collections.Counter(servers).most_common(1)
    assert n >= len(servers) - 1, servers
    return top


def test_routing_for_the_prefix_cache_keeps_a_prefix_and_a_session_on_one_instance(host, gateway_url):
    """Last, because it changes the gateway's routing (issue 24): tiny-b routed by the prompt's first 64
    characters, tiny-a by session (X-Session-Id). Requests sharing a prefix reach one instance, as do a
    session's; a drained instance's prefix moves to the other and comes back when it is enabled again
    (a rollout drains and enables the same way). Read from the gateway's own log. The switch re-renders the
    gateway alone (`--tags plan,gateway`, as README shows): no engine restarts."""
    pid_a = host.check_output("systemctl show -p MainPID --value vllm-a")
    rc, out = deploy(extra_vars={"gateway_max_num_seqs": 6, "gateway_tiny_a_rev": "r2", "vllm_gateway_prefix_chars": 64,
                                 "vllm_gateway_routing": {"tiny-a": "session", "tiny-b": "prefix"}}, tags="plan,gateway")
    assert rc == 0, out[-4000:]
    assert host.check_output("systemctl show -p MainPID --value vllm-a") == pid_a, "a routing switch restarted an engine"
    shared = "Our fleet serves many users from one document. Read it carefully before you answer. "

    def ask(model, prompt, headers=None):
        status, _, body = call(gateway_url, "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 2},
                               headers=headers)
        assert status == 200, body

    since = time.time()
    for i in range(6):
        ask("tiny-b", f"{shared}Question {i}: what is it about?")
    target = mostly_one(routed(host, since, "model_tiny-b", 6))

    since = time.time()
    for i in range(12):  # different prefixes spread over both instances
        ask("tiny-b", f"Document {i} of the fleet: {shared}")
    assert len(set(routed(host, since, "model_tiny-b", 12))) == 2

    for user in ("alice", "bob", "carol", "dave"):
        since = time.time()
        for _ in range(3):
            ask("tiny-a", "Hello", headers={"X-Session-Id": user})
        mostly_one(routed(host, since, "model_tiny-a", 3))

    host.check_output(f"{CTL} drain model_tiny-b/{target}")
    try:
        since = time.time()
        for i in range(4):
            ask("tiny-b", f"{shared}Question {i}: who reads it?")
        assert target not in routed(host, since, "model_tiny-b", 4)
    finally:
        host.check_output(f"{CTL} enable model_tiny-b/{target} --timeout 120")
    since = time.time()
    for i in range(4):
        ask("tiny-b", f"{shared}Question {i}: when was it written?")
    assert mostly_one(routed(host, since, "model_tiny-b", 4)) == target
