"""Every registered Ansible filter reports bad input as an AnsibleFilterError naming the filter.

Every file of plugins/filter is imported by its collection name, as Ansible imports the collection's."""

from __future__ import annotations

import inspect

import pytest
from ansible.errors import AnsibleFilterError

from conftest import FILTER_DIR, REPO, filter_modules, filter_plugins

FILTERS = filter_plugins()
if not FILTERS:
    raise AssertionError(f"{FILTER_DIR} registers no filters")


class NotAnInput:
    """A value no filter accepts: not a str, number, list or mapping, and no attributes to read."""

    __slots__ = ()

    def __repr__(self):
        return "<not an input>"


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_bad_input_type_names_the_filter(name):
    """Every argument of the wrong type (vllm_inventory_errors reports bad inventory values as data,
    so only the host or gpus argument can be of a type it refuses)."""
    fn = FILTERS[name]
    params = [p for p in inspect.signature(fn).parameters.values() if p.kind == p.POSITIONAL_OR_KEYWORD]
    with pytest.raises(AnsibleFilterError) as info:
        fn(*[NotAnInput() for _ in params])
    assert str(info.value).startswith(f"{name}: "), str(info.value)


def test_registered_under_their_own_names():
    """The message names the filter the playbook wrote, so the registry key must be the function's name."""
    assert {name: fn.__name__ for name, fn in FILTERS.items()} == {name: name for name in FILTERS}


def test_a_package_error_keeps_its_message():
    with pytest.raises(AnsibleFilterError, match=r"^vllm_driver_state: "):
        FILTERS["vllm_driver_state"]("nvidia-smi\t535.1-1\tii \n", None)


def test_every_filter_the_roles_and_playbooks_call_is_registered():
    """A filter a role, playbook, template or scenario calls by its collection name
    (`| vllm_deploy.fleet.NAME`) but the plugin does not register fails at run time, deep in a deploy
    ("No filter named ..."): found here instead. And every `vllm_*` function of the plugin is one."""
    import re

    called = {}
    for top in ("roles", "playbooks", "molecule"):
        for path in (REPO / top).rglob("*"):
            if path.suffix in (".yml", ".yaml", ".j2") and path.is_file():
                for name in re.findall(r"\|\s*vllm_deploy\.fleet\.(\w+)", path.read_text()):
                    called.setdefault(name, str(path.relative_to(REPO)))
    for name in ("deploy.yml", "rebuild-node.yml", "status.yml", "bench.yml", "tune.yml"):
        for fn in re.findall(r"\|\s*vllm_deploy\.fleet\.(\w+)", (REPO / name).read_text()):
            called.setdefault(fn, name)
    assert len(called) > 40, called  # the scan found the roles' calls
    assert {name: where for name, where in called.items() if name not in FILTERS} == {}
    defined = {name for module in filter_modules() for name, fn in vars(module).items()
               if name.startswith("vllm_") and inspect.isfunction(fn)}
    assert defined == set(FILTERS)


def test_the_gateway_filter_passes_max_n_on_in_the_order_validate_inventory_yml_gives_it():
    keys = [{"name": "team-a", "key": "k" * 24}]
    errors = FILTERS["vllm_gateway_errors"](keys, True, "vllm_gateway", {"vllm_gateway": ["gw"]}, 262144, 4096, 300,
                                            "gw", ["/v1/completions"], 0)
    assert [e.split(":")[1].strip() for e in errors] == ["vllm_gateway_max_n"]


def test_the_gateway_filter_passes_the_tls_inputs_on():
    keys = [{"name": "team-a", "key": "k" * 24}]
    tls = {"enabled": True, "cert": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", "key": "",
           "min_version": "TLSv1.2", "ciphers": "ECDHE-RSA-AES128-GCM-SHA256", "ciphersuites": "TLS_AES_128_GCM_SHA256",
           "names": [], "ca_dir": "/inv/.ca", "redirect_port": 8080, "port": 8080, "metrics_port": 8405}
    errors = FILTERS["vllm_gateway_errors"](keys, True, "vllm_gateway", {"vllm_gateway": ["gw"]}, 262144, 4096, 300,
                                            "gw", ["/v1/completions"], 8, tls=tls)
    assert [e.split(":")[1].strip() for e in errors] == ["vllm_gateway_http_redirect_port", "vllm_gateway_tls_key"]


def test_the_tls_names_filter_reads_each_gateway_host():
    hostvars = {"gw1": {"ansible_host": "gw1.example.internal", "vllm_gateway_bind": "0.0.0.0",
                        "ansible_facts": {"fqdn": "gw1.example.internal", "default_ipv4": {"address": "10.0.0.11"}}},
                "gw2": {"vllm_gateway_bind": "10.0.0.12"}}
    assert FILTERS["vllm_gateway_tls_names"](hostvars, ["gw1", "gw2"], ["llm.example.internal", "127.0.0.1"]) == [
        "DNS:gw1", "DNS:gw1.example.internal", "DNS:gw2", "DNS:llm.example.internal", "IP:10.0.0.11", "IP:10.0.0.12",
        "IP:127.0.0.1"]
