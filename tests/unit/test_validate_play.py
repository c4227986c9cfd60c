"""The real validation play (role vllm_validate, Ansible itself, no host touched) on switches and
variables as an operator passes them: `-e name=false` arrives as a string and must mean false."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = """\
- name: Validate only
  hosts: all
  gather_facts: false
  roles: [vllm_validate]
"""


def validate(tmp_path, *extra):
    (tmp_path / "validate.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    bin_dir = Path(sys.executable).parent
    run = subprocess.run([str(bin_dir / "ansible-playbook"), "-i", "node1,", "-c", "local", str(tmp_path / "validate.yml"), *extra],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    return run.returncode, " ".join((run.stdout + run.stderr).split())


@pytest.mark.parametrize("value", ["false", "False", "no", "0", "true", "yes"])
def test_string_forms_of_a_switch_pass(tmp_path, value):
    rc, out = validate(tmp_path, "-e", f"vllm_plan_enforce={value}", "-e", f"vllm_serve_auto_degrade={value}")
    assert rc == 0, out[-2000:]


@pytest.mark.parametrize("extra, message", [
    ("vllm_plan_enforce=fasle", "node1: vllm_plan_enforce: 'fasle' is not a boolean — set it to true or false"),
    ("nvidia_driver_install=maybe", "node1: nvidia_driver_install: 'maybe' is not a boolean — set it to true or false"),
    ("vllm_serve_bind=0.0.0.0", "node1: vllm_serve_bind: this variable was renamed — set vllm_bind instead"),
    ("vllm_serve_mode=compose", "node1: vllm_serve_mode: this variable was renamed — set vllm_mode instead"),
    ("vllm_mode=podman", 'node1: vllm_mode is "podman" — use systemd'),
])
def test_bad_switches_and_old_names_are_refused_in_one_line(tmp_path, extra, message):
    rc, out = validate(tmp_path, "-e", extra)
    assert rc != 0
    assert message in out, out[-2000:]
    assert "Traceback" not in out
