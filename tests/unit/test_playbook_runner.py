"""run_playbook (tests/unit/conftest.py), the one way the unit tests run a real playbook, uses this
checkout's collection even when a broken copy of vllm_deploy.fleet sits in ~/.ansible/collections
(where ansible-lint installs one): the user's case that failed with "No filter named vllm_deploy.fleet...".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, VALIDATE_PLAY, run_playbook

pytestmark = pytest.mark.playbook  # every test here runs ansible-playbook

MESSAGE = "node1: vllm_plan_enforce: 'fasle' is not a boolean — set it to true or false"


def _stray_home(tmp_path: Path) -> Path:
    """A HOME whose ~/.ansible/collections holds a vllm_deploy.fleet whose filter plugin cannot load."""
    home = tmp_path / "home"
    filters = home / ".ansible" / "collections" / "ansible_collections" / "vllm_deploy" / "fleet" / "plugins" / "filter"
    filters.mkdir(parents=True)
    (filters / "vllm_instances.py").write_text('raise RuntimeError("stray copy of vllm_deploy.fleet loaded")\n')
    return home


def test_a_broken_copy_in_home_does_not_shadow_the_checkouts_filters(tmp_path):
    home = _stray_home(tmp_path)
    rc, out = run_playbook(VALIDATE_PLAY, "-e", "vllm_plan_enforce=fasle", tmp_path=tmp_path, env={"HOME": str(home)})
    assert rc != 0
    assert MESSAGE in out, out[-2000:]
    assert "No filter named" not in out


def test_the_broken_copy_is_what_ansible_cfg_alone_would_load(tmp_path):
    """The same run with only ANSIBLE_CONFIG (what these tests once set) meets the stray copy: the
    fixture really shadows the checkout, so the test above proves the runner, not a dead fixture."""
    home = _stray_home(tmp_path)
    (tmp_path / "play.yml").write_text(VALIDATE_PLAY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(HOME=str(home), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    run = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "node1,", "-c", "local",
                          str(tmp_path / "play.yml"), "-e", "vllm_plan_enforce=fasle"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    out = " ".join((run.stdout + run.stderr).split())
    assert run.returncode != 0
    assert "No filter named 'vllm_deploy.fleet." in out, out[-2000:]
    assert MESSAGE not in out
