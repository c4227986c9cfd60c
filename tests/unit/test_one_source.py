"""One source per fact: the nvidia-smi and dpkg-query spellings live in vllm_deploy only, and the
torch label rule is the vllm_torch_matches filter; roles and playbooks go through the filters."""

from __future__ import annotations

import re

import pytest

from conftest import REPO

ANSIBLE_FILES = sorted(p for d in ("roles", "playbooks") for p in (REPO / d).rglob("*.yml"))
ANSIBLE_FILES += sorted(REPO.glob("*.yml"))
if not ANSIBLE_FILES:
    raise AssertionError(f"no roles/ or playbooks/ YAML under {REPO}")


@pytest.mark.parametrize("spelling, owner", [
    (r"--query-gpu", "vllm_nvidia_smi_argv ('gpus')"),
    (r"--query-compute-apps", "vllm_nvidia_smi_argv ('compute-apps')"),
    (r"--format=csv", "vllm_nvidia_smi_argv"),
    (r"Status-Abbrev|\$\{Version\}|dpkg-query\s+-W", "vllm_dpkg_query_argv"),
    (r"regex_replace\(['\"]\\+\\\+", "vllm_torch_matches"),
])
def test_no_role_or_playbook_spells_it(spelling, owner):
    rx = re.compile(spelling)
    found = [f"{p.relative_to(REPO)}:{n}" for p in ANSIBLE_FILES
             for n, line in enumerate(p.read_text().splitlines(), 1) if rx.search(line)]
    assert not found, f"use {owner} instead: {', '.join(found)}"


@pytest.mark.parametrize("use", ["vllm_nvidia_smi_argv", "vllm_dpkg_query_argv", "vllm_torch_matches"])
def test_the_filters_are_used(use):
    assert any(use in p.read_text() for p in ANSIBLE_FILES), f"no role or playbook uses {use}"
