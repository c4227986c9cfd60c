"""The real gpu_facts role (Ansible itself, connection local) against the nvidia-smi stand-in replaying real
captures of GPUs in MIG mode (tests/fixtures/nvidia-smi-standin, datasets 42- and 45-, their -L captures
replayed verbatim): it lists the MIG devices with each slice's memory, lets an instance pin one, and
refuses a pin on the whole GPU or on a MIG device the node does not have. Reads only: nvidia-smi is the
stand-in, the role runs read-only commands."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from conftest import STANDIN_DIR, calibration_dir, run_playbook

pytestmark = pytest.mark.playbook  # every test here runs ansible-playbook

PLAYBOOK = """\
- name: GPU facts only
  hosts: all
  gather_facts: false
  roles: [gpu_facts]
  post_tasks:
    - name: Write the facts for the test
      ansible.builtin.copy:
        content: "{{ gpu_facts | to_json }}"
        dest: "{{ facts_out }}"
        mode: "0644"
"""


def run_role(tmp_path, dataset, instances_):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(STANDIN_DIR / "nvidia-smi", bin_dir / "nvidia-smi-standin")
    # nvidia-smi notes each call's arguments (calls()), then is the stand-in.
    (bin_dir / "nvidia-smi").write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$*" >> {tmp_path / "calls"}\nexec {bin_dir / "nvidia-smi-standin"} "$@"\n')
    for name in ("nvidia-smi", "nvidia-smi-standin"):
        (bin_dir / name).chmod(0o755)
    (tmp_path / "fixture").write_text(dataset + "\n")
    extra = {"vllm_models": {"qwen": {"path": "/srv/models/qwen"}}, "vllm_instances": instances_,
             "facts_out": str(tmp_path / "facts.json"), "ansible_python_interpreter": sys.executable}
    # nvidia-smi on the PATH is the stand-in, replaying the dataset.
    rc, out = run_playbook(PLAYBOOK, tmp_path=tmp_path, extra_vars=extra, env={
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "NVIDIA_SMI_STANDIN_FIXTURE": str(tmp_path / "fixture"),
        "NVIDIA_SMI_STANDIN_DATA": str(STANDIN_DIR / "data")})
    facts = json.loads((tmp_path / "facts.json").read_text()) if (tmp_path / "facts.json").exists() else None
    return rc, out, facts


def calls(tmp_path):
    """The arguments of each nvidia-smi run, in order ("" for the plain table)."""
    path = tmp_path / "calls"
    return path.read_text().splitlines() if path.exists() else []


def _list_meta(name):
    return yaml.safe_load((calibration_dir("nvidia-smi") / f"{name}.meta.yaml").read_text())


@pytest.mark.parametrize("dataset,listing", [
    ("42-h100-x1-mig4-table", "42-h100-x1-mig4-list"),
    ("45-h200-x1-mig1-610-table", "45-h200-x1-mig1-610-list"),
])
def test_role_lists_mig_devices_and_accepts_a_mig_pin(tmp_path, dataset, listing):
    want = _list_meta(listing)["gpus"][0]["mig_devices"]
    rc, out, facts = run_role(tmp_path, dataset, [{"name": "a", "model": "qwen", "gpus": [want[0]["uuid"]], "port": 8000}])
    assert rc == 0, out[-3000:]
    assert facts["gpu_count"] == 1 and facts["mig_gpus"] == [0] and facts["error"] is None
    assert [(d["uuid"], d["memory_total_mib"]) for d in facts["mig_devices"]] == [
        (d["uuid"], d["memory_total_mib"]) for d in want]
    assert "MIG devices: NVIDIA" in out


def test_role_refuses_the_whole_gpu_and_an_unknown_mig_device(tmp_path):
    rc, out, _ = run_role(tmp_path, "42-h100-x1-mig4-table", [
        {"name": "a", "model": "qwen", "gpus": [0], "port": 8000},
        {"name": "b", "model": "qwen", "gpus": ["MIG-11111111-2222-3333-4444-555555555555"], "port": 8001}])
    assert rc != 0
    assert "node1: vllm_instances[0].gpus: GPU 0 is in MIG mode" in out, out[-3000:]
    assert "node1: vllm_instances[1].gpus: MIG device MIG-11111111-2222-3333-4444-555555555555 does not exist" in out


def test_a_node_without_mig_runs_nvidia_smi_once(tmp_path):
    # The L40S capture: no MIG on the board, and a driver (595.80) the pinned CUDA build accepts.
    rc, out, facts = run_role(tmp_path, "19-l40s-x1-table", [{"name": "a", "model": "qwen", "gpus": [0], "port": 8000}])
    assert rc == 0, out[-3000:]
    assert facts["gpu_count"] == 1 and facts["mig_gpus"] == [] and facts["mig_devices"] == []
    assert [c.split()[0].split("=")[0] for c in calls(tmp_path)] == ["--query-gpu"], calls(tmp_path)


def test_a_mig_node_adds_the_list_and_the_table(tmp_path):
    rc, out, facts = run_role(tmp_path, "42-h100-x1-mig4-table", [{"name": "a", "model": "qwen", "gpus": [], "port": 8000}])
    assert rc == 0, out[-3000:]
    assert len(facts["mig_devices"]) == 4
    assert [c.split()[0].split("=")[0] if c else "" for c in calls(tmp_path)] == ["--query-gpu", "-L", ""], calls(tmp_path)
