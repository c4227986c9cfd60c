"""One instance across two nodes (PP 2, vLLM's own launcher): what a user checks after deploy.yml, then
a lost rank for real (kill -9 of the headless rank) and its recovery.

Tests here drive both nodes themselves (no `host` fixture), so each runs once, in file order.
"""

import json
import time

import pytest
from helpers import ansible_playbook, completion, converge_log, engine_http, flat, node

API_KEY = "multinode-api-key-3e9a"
UNIT = "vllm-tiny-pp"


@pytest.fixture(scope="module")
def head():
    return node("mol-mn-node1")


@pytest.fixture(scope="module")
def tail():
    return node("mol-mn-node2")


def prop(host, unit, name):
    return host.check_output(f"systemctl show -p {name} --value {unit}")


def argv(host):
    return host.check_output(f"tr '\\0' ' ' < /proc/{prop(host, UNIT, 'MainPID')}/cmdline").split()


def value(args, opt):
    return args[args.index(opt) + 1]


def test_each_host_runs_its_rank_of_the_one_instance(head, tail):
    for host in (head, tail):
        assert host.service(UNIT).is_running and host.service(UNIT).is_enabled
        assert host.check_output(f"ps -o user= -p {prop(host, UNIT, 'MainPID')}") == "vllm"
    master = head.check_output("ip -4 -o addr show eth0").split()[3].split("/")[0]
    rank0, rank1 = argv(head), argv(tail)
    assert "vllm.entrypoints.openai.api_server" in rank0 and "--headless" not in rank0
    assert rank1[1:3] == ["/usr/local/libexec/vllm-deploy/vllm-cli", "serve"] and "--headless" in rank1
    for args, rank in ((rank0, "0"), (rank1, "1")):
        assert value(args, "--node-rank") == rank and value(args, "--nnodes") == "2"
        assert value(args, "--master-addr") == master and value(args, "--master-port") == "29500"
        assert value(args, "--pipeline-parallel-size") == "2"
    assert "GLOO_SOCKET_IFNAME=eth0" in prop(tail, UNIT, "Environment")


def test_the_headless_rank_serves_no_api(tail):
    assert not tail.socket("tcp://0.0.0.0:8000").is_listening
    assert not tail.socket("tcp://127.0.0.1:8000").is_listening


def test_a_completion_runs_through_both_pipeline_stages(head):
    answer = completion(head, 8000, key=API_KEY, prompt="The quick brown fox", max_tokens=5, temperature=0)
    assert answer["usage"]["completion_tokens"] == 5
    # vLLM names the parallel layout it serves with in the fingerprint: pipeline parallel 2.
    assert "pp2" in answer.get("system_fingerprint", ""), answer


def test_the_api_key_is_enforced_on_rank_0(head):
    status, _ = engine_http(head, "/v1/models", 8000, key=None)
    assert status == 401


def test_the_headless_rank_started_before_rank_0(head, tail):
    """The rollout's order: the headless rank (re)starts first, rank 0 last."""
    started = {h: int(prop(h, UNIT, "ExecMainStartTimestampMonotonic")) for h in (head, tail)}
    # Both containers share the host's monotonic clock.
    assert started[tail] < started[head]


def test_preflight_compared_the_ranks_and_reached_the_master_port():
    log = flat(converge_log())
    assert "TASK [vllm_preflight : Read the stack, driver and model files of every rank: tiny-pp]" in log
    assert "ok: [mol-mn-node1 -> mol-mn-node2] => (item=mol-mn-node2)" in log
    assert "TASK [vllm_preflight : Reach the master port from every other rank: tiny-pp]" in log
    assert "instance tiny-pp: cannot reach the master port" not in log


def test_the_rank_watch_runs_beside_rank_0(head, tail):
    assert head.service(f"{UNIT}-watch").is_running
    assert not tail.file(f"/etc/systemd/system/{UNIT}-watch.service").exists


def test_a_killed_headless_rank_fails_the_gate_is_named_and_the_instance_comes_back(head, tail):
    rank0_pid = prop(head, UNIT, "MainPID")
    tail.run(f"kill -9 {prop(tail, UNIT, 'MainPID')}")
    run = ansible_playbook("--tags", "verify", timeout=900)
    out = run.output
    assert run.returncode != 0, out[-3000:]
    assert "mol-mn-node1: instance tiny-pp (vllm-tiny-pp) did not pass the gate" in out, out[-4000:]
    assert "Diagnosis: lost_rank — the instance lost rank 1 on mol-mn-node2" in out, out[-4000:]
    # systemd restarts the killed rank (RestartSec=10: the failed gate can be quicker than that); the
    # rank watch restarts rank 0 so that both meet again.
    deadline = time.time() + 60
    while time.time() < deadline and int(prop(tail, UNIT, "NRestarts")) < 1:
        time.sleep(2)
    assert int(prop(tail, UNIT, "NRestarts")) >= 1
    deadline = time.time() + 420
    while time.time() < deadline:
        # Refused while rank 0 restarts and waits for the other rank.
        up = head.run("python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=5)\"")
        if up.rc == 0 and prop(head, UNIT, "MainPID") != rank0_pid:
            break
        time.sleep(10)
    assert prop(head, UNIT, "MainPID") != rank0_pid
    assert "restarting rank 0 so that every rank meets again" in head.check_output(
        f"journalctl -u {UNIT}-watch --no-pager -o cat")
    run = ansible_playbook("--tags", "verify", timeout=900)
    assert run.returncode == 0, run.output[-4000:]
    assert "vllm-tiny-pp serves tiny-llama" in run.output
    assert completion(head, 8000, key=API_KEY, max_tokens=3)["usage"]["completion_tokens"] == 3


def test_bad_multinode_inventories_are_refused_before_any_host_changes(head, tail):
    before = {h: h.file(f"/etc/systemd/system/{UNIT}.service").sha256sum for h in (head, tail)}
    good = {"name": "tiny-pp", "model": "tiny-llama", "hosts": ["mol-mn-node1", "mol-mn-node2"], "gpus": [], "port": 8000,
            "master_port": 29500, "interface": "eth0", "flags": {"max_model_len": 256, "dtype": "bfloat16"}}
    cases = [
        ({**good, "gpus": {"mol-mn-node1": [0, 1], "mol-mn-node2": [0]}},
         "mol-mn-node1: vllm_multinode_instances[0].gpus: uneven GPUs per host (mol-mn-node1: 2, mol-mn-node2: 1)"),
        ({**good, "flags": {**good["flags"], "pipeline_parallel_size": 3}},
         "mol-mn-node1: vllm_multinode_instances[0].flags: TP 1 x PP 3 = 3 but the instance has 2 CPU hosts"),
        ({**good, "hosts": ["mol-mn-node1", "mol-mn-node3"]},
         "mol-mn-node1: vllm_multinode_instances[0].hosts: mol-mn-node3 is not a host of this play"),
    ]
    for entry, message in cases:
        run = ansible_playbook("-e", json.dumps({"vllm_multinode_instances": [entry]}))
        assert run.returncode != 0
        assert message in run.output, run.output[-3000:]
        assert "PLAY [Gather GPU facts" not in run.output  # refused in play 1
    run = ansible_playbook("-l", "mol-mn-node1")
    assert run.returncode != 0
    assert "mol-mn-node1: vllm_multinode_instances[0].hosts: mol-mn-node2 is not a host of this play" in run.output
    assert {h: h.file(f"/etc/systemd/system/{UNIT}.service").sha256sum for h in (head, tail)} == before
