"""One source per fact: the nvidia-smi and dpkg-query spellings live in vllm_deploy only, and the
torch label rule is the vllm_torch_matches filter; roles and playbooks go through the filters. The
multi-node instances a host is a rank of are vllm_common's vllm_multinode_mine (the filter where no
role is loaded), a rank's unit is vllm_rank_unit, and the gateway and monitoring group names have
one default, in vllm_common."""

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
    # selectattr('hosts', 'contains', inventory_hostname), with or without the hosts-defined guard.
    (r"selectattr\(\s*['\"]hosts['\"]", "vllm_multinode_mine (vllm_common's variable, or the filter)"),
    # 'ray-' if <a Ray worker> else 'vllm-', or a ray- prefix glued onto instance names.
    (r"['\"]ray-['\"]\s+if|else\s+['\"]vllm-['\"]|['\"]\^['\"],\s*['\"]ray-['\"]", "vllm_rank_unit"),
    (r"vllm_monitoring_group\s*\|\s*default", "vllm_monitoring_group (vllm_common's default)"),
])
def test_no_role_or_playbook_spells_it(spelling, owner):
    rx = re.compile(spelling)
    found = [f"{p.relative_to(REPO)}:{n}" for p in ANSIBLE_FILES
             for n, line in enumerate(p.read_text().splitlines(), 1) if rx.search(line)]
    assert not found, f"use {owner} instead: {', '.join(found)}"


@pytest.mark.parametrize("use", ["vllm_nvidia_smi_argv", "vllm_dpkg_query_argv", "vllm_torch_matches"])
def test_the_filters_are_used(use):
    assert any(use in p.read_text() for p in ANSIBLE_FILES), f"no role or playbook uses {use}"


@pytest.mark.parametrize("use", ["vllm_multinode_mine", "vllm_rank_unit"])
def test_the_multinode_filters_are_used(use):
    assert any(f"vllm_deploy.fleet.{use}" in p.read_text() for p in ANSIBLE_FILES), f"no role or playbook uses {use}"


def test_the_python_side_asks_multinode_for_a_rank_unit():
    """monitoring (the status table) and the records read multinode.rank_unit; nothing else spells ray-NAME."""
    spelled = [p.name for p in (REPO / "vllm_deploy").rglob("*.py") if re.search(r"f[\"']ray-\{", p.read_text())]
    assert spelled == ["multinode.py"], spelled


# Only where vllm_common's default cannot be seen: a play's `hosts:` line (templated before any role
# loads) and a play that loads no role. Roles read vllm_gateway_group itself.
GATEWAY_FALLBACKS = {
    "playbooks/deploy.yml": 2,   # the network-facts play (no role) and the gateway play's hosts: line
    "playbooks/status.yml": 2,   # the gateway play's hosts: line and the status play (no role)
}


def test_the_gateway_group_fallback_only_where_no_role_is_loaded():
    rx = re.compile(r"vllm_gateway_group\s*\|\s*default")
    found = {}
    for p in ANSIBLE_FILES:
        n = len(rx.findall(p.read_text()))
        if n:
            found[str(p.relative_to(REPO))] = n
    assert found == GATEWAY_FALLBACKS, f"use vllm_gateway_group (vllm_common's default) in roles: {found}"
