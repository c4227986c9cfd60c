"""The DCGM exporter switch (vllm_monitoring_dcgm_exporter), proven as far as a machine without
NVIDIA's repository allows: the validation play's refusals, the Prometheus config with the switch on
(promtool check config, as server.yml validates it), and the install tasks in --check on localhost.
Installing and starting DCGM needs NVIDIA's repository and a GPU: not done here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from vllm_deploy import monitoring

PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
# The pin the install tasks must use (vllm_deploy/data/versions.yaml: dcgm), written out here, not read.
DCGM_PACKAGES = ("datacenter-gpu-manager-4-core=1:4.6.0-1 datacenter-gpu-manager-4-cuda13=1:4.6.0-1 "
                 "datacenter-gpu-manager-4-proprietary=1:4.6.0-1 datacenter-gpu-manager-4-proprietary-cuda13=1:4.6.0-1 "
                 "datacenter-gpu-manager-exporter=4.8.3*")


def ansible(tmp_path: Path, inventory: dict, playbook: str | Path, *args: str) -> subprocess.CompletedProcess:
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump(inventory))
    # PYTHONPATH: the filter plugins import this checkout's vllm_deploy, not another installed one.
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), PYTHONPATH=str(REPO))
    return subprocess.run([str(PLAYBOOK), "-i", str(inv), str(playbook), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def local(hosts: dict) -> dict:
    for hv in hosts.values():
        hv.setdefault("ansible_connection", "local")
        hv.setdefault("ansible_python_interpreter", sys.executable)
    return hosts


def fleet(node1: dict, **groups) -> dict:
    nodes = {"node1": {"vllm_models": {}, "vllm_instances": [], **node1}}
    return {"all": {"children": {"gpu-nodes": {"hosts": local(nodes)},
                                 "vllm_monitoring": {"hosts": local({"mon1": {}})}, **groups}}}


# --- the validation play (deploy.yml's first), before any change ---------------------------------

@pytest.mark.playbook
def test_the_switch_on_a_node_whose_driver_comes_from_debian_is_refused_before_any_change(tmp_path):
    run = ansible(tmp_path, fleet({"vllm_monitoring_dcgm_exporter": True, "nvidia_driver_source": "debian"}),
                  "deploy.yml", "--check")
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-3000:]
    assert ("node1: vllm_monitoring_dcgm_exporter: DCGM and its exporter come from NVIDIA's CUDA apt repository, but this "
            "node's NVIDIA packages come from Debian (nvidia_driver_source debian) — set vllm_monitoring_dcgm_exporter: false") in out
    assert "PLAY [Provision the NVIDIA driver" not in out  # stopped in the validation play


@pytest.mark.playbook
def test_the_switch_must_be_a_boolean(tmp_path):
    run = ansible(tmp_path, fleet({"vllm_monitoring_dcgm_exporter": "sometimes"}), "deploy.yml", "--check")
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "node1: vllm_monitoring_dcgm_exporter: 'sometimes' is not a boolean — set it to true or false" in out
    assert "PLAY [Provision the NVIDIA driver" not in out


# --- the scrape config ---------------------------------------------------------------------------

RENDER = """
- name: Record every host's facts as the monitoring play does
  hosts: all
  gather_facts: false
  tasks:
    - name: Record
      ansible.builtin.include_role:
        name: vllm_monitoring
        tasks_from: facts

- name: Render the scrape config and the rules file as server.yml does
  hosts: vllm_monitoring
  gather_facts: false
  tasks:
    - name: Load the role's variables
      ansible.builtin.include_role:
        name: vllm_monitoring
        tasks_from: facts
        public: true
    - name: Render
      ansible.builtin.template:
        src: "{{ repo }}/roles/vllm_monitoring/templates/{{ item.src }}"
        dest: "{{ item.dest }}"
        mode: "0644"
      loop:
        - {src: prometheus.yml.j2, dest: "{{ out }}/prometheus.yml"}
        - {src: vllm-deploy.rules.yml.j2, dest: "{{ out }}/vllm-deploy.rules.yml"}
"""


@pytest.mark.playbook
def test_the_dcgm_exporters_are_prometheus_targets_with_host_and_gpus(tmp_path):
    if not shutil.which("promtool"):  # a prerequisite (scripts/prereqs.sh): a failure, not a skip
        raise AssertionError("promtool not found: run make setup (it installs Debian's prometheus package)")
    inst = [{"name": "a", "model": "m", "port": 8000, "bind": "0.0.0.0", "gpus": [1]}]
    hosts = local({
        # GPUs found, switch on: a target
        "node1": {"vllm_monitoring_dcgm_exporter": True, "vllm_monitoring_scrape_address": "10.0.0.1",
                  "gpu_facts": {"gpu_count": 2, "gpus": [{"index": 0}, {"index": 1}]}, "vllm_instances": inst},
        # GPUs, switch off (the default): none
        "node2": {"vllm_monitoring_scrape_address": "10.0.0.2",
                  "gpu_facts": {"gpu_count": 1, "gpus": [{"index": 0}]}, "vllm_instances": []},
        # switch on, no GPU found: none
        "node3": {"vllm_monitoring_dcgm_exporter": True, "vllm_monitoring_scrape_address": "10.0.0.3",
                  "gpu_facts": {"gpu_count": 0, "gpus": []}, "vllm_instances": []},
    })
    inventory = {"all": {"vars": {"vllm_models": {"m": {"served_name": "tiny"}}},
                         "children": {"gpu-nodes": {"hosts": hosts},
                                      "vllm_monitoring": {"hosts": local({"mon1": {"vllm_monitoring_scrape_address": "10.0.0.9"}})}}}}
    play = tmp_path / "render.yml"
    play.write_text(RENDER)
    run = ansible(tmp_path, inventory, play, "-e", f"out={tmp_path}", "-e", f"repo={REPO}")
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    # promtool check config also checks the rules file the config names (/etc/prometheus/rules/… on
    # the Prometheus host, where server.yml renders it first): here, the copy rendered beside it.
    config = (tmp_path / "prometheus.yml").read_text()
    assert "/etc/prometheus/rules/vllm-deploy.rules.yml" in config
    (tmp_path / "checked.yml").write_text(config.replace("/etc/prometheus/rules/vllm-deploy.rules.yml",
                                                         str(tmp_path / "vllm-deploy.rules.yml")))
    check = subprocess.run(["promtool", "check", "config", str(tmp_path / "checked.yml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 1 rule files found" in check.stdout + check.stderr
    jobs = {j["job_name"]: j for j in yaml.safe_load(config)["scrape_configs"]}
    assert jobs["dcgm"]["static_configs"] == [{"targets": ["10.0.0.1:9400"], "labels": {"host": "node1", "gpus": "0,1"}}]
    # the textfile collector's node-exporter stays a target of every node
    assert [c["targets"] for c in jobs["node"]["static_configs"]] == [["10.0.0.1:9100"], ["10.0.0.2:9100"], ["10.0.0.3:9100"]]


def test_without_the_switch_there_is_no_dcgm_job():
    hosts = [{"host": "node1", "address": "10.0.0.1", "instances": [], "dcgm": False, "gpus": ["0"]}]
    assert monitoring.dcgm_targets(hosts, 9400) == []


def test_a_run_limited_with_l_takes_the_switch_and_pinned_gpus_from_the_inventory():
    hv = {"node1": {"vllm_monitoring_dcgm_exporter": True, "vllm_monitoring_scrape_address": "10.0.0.1",
                    "vllm_instances": [{"name": "a", "model": "m", "port": 8000, "bind": "0.0.0.0", "gpus": [3, 1]},
                                       {"name": "b", "model": "m", "port": 8001, "bind": "0.0.0.0", "gpus": [10]}]},
          "node2": {"vllm_monitoring_dcgm_exporter": "true", "vllm_instances": []}}   # not a boolean: the validation play refuses it
    targets = monitoring.dcgm_targets(monitoring.fleet_hosts(["node1", "node2"], hv, "mon1"), 9400)
    assert targets == [{"targets": ["10.0.0.1:9400"], "labels": {"host": "node1", "gpus": "1,3,10"}}]


def test_a_bad_port_is_refused_with_its_variable():
    for port in (0, 70000, "9400", True):
        try:
            monitoring.dcgm_targets([], port)
        except ValueError as exc:
            assert str(exc).startswith("vllm_monitoring_dcgm_exporter_port must be a TCP port")
        else:
            raise AssertionError(f"port {port!r} accepted")


# --- the install tasks in check mode -------------------------------------------------------------

CHECK = """
- name: The DCGM tasks of a GPU node, in check mode
  hosts: node1
  gather_facts: true
  gather_subset: [min]
  tasks:
    - name: Install NVIDIA's DCGM exporter
      ansible.builtin.include_role:
        name: vllm_monitoring
        tasks_from: dcgm
"""


@pytest.mark.playbook
def test_the_install_tasks_render_in_check_mode_on_localhost(tmp_path):
    """Nothing is written (check mode). NVIDIA's repository is unreachable here, so apt cannot look the
    packages up: the run adds the repository (would), names the pinned packages and renders the unit's drop-in."""
    if Path("/etc/apt/sources.list.d/vllm-deploy-nvidia-cuda.sources").exists():
        raise AssertionError("this machine has NVIDIA's repository: the test expects it absent (check mode adds it)")
    play = tmp_path / "dcgm.yml"
    play.write_text(CHECK)
    # The key as a file on the node (the role's offline form; this machine cannot fetch NVIDIA's): any
    # keyring present, check mode only reads its path into the sources file.
    node1 = {"vllm_monitoring_dcgm_exporter": True, "nvidia_driver_repo_key": "/usr/share/keyrings/debian-archive-keyring.gpg"}
    run = ansible(tmp_path, fleet(node1), play, "--check", "--diff")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert "Add NVIDIA's CUDA repository (debian12)" in out
    assert "+URIs: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/" in out
    flat = " ".join(out.split()).replace("''", "'")  # the debug message as YAML folds and quotes it
    assert f"Check mode: NVIDIA's CUDA repository would be added, then {DCGM_PACKAGES} installed" in flat
    assert "ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv -a :9400 -r localhost:5555" in out
    assert not Path("/etc/systemd/system/nvidia-dcgm-exporter.service.d/vllm-deploy.conf").exists()
