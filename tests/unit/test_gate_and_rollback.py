"""The one gate command line both serve and verify use, what a failed rollout restores, and the pins
every role reads (vllm_versions) with an inventory override merged in."""

from __future__ import annotations

import pytest

from vllm_deploy import compat, instances, ladder

DEFAULTS = {"hf_home": "/var/lib/vllm/hf", "cache_root": "/var/lib/vllm/cache", "engine": "cpu"}
MODEL = {"path": "/srv/models/tiny", "served_name": "tiny-llama"}


def record(mode="systemd", bind="127.0.0.1"):
    inst = {"name": "tiny", "model": "tiny", "port": 8000, "bind": bind, "flags": {"max_model_len": 256}}
    return instances.build_instance(inst, MODEL, "tiny", gpu_facts={}, plan=None, defaults={**DEFAULTS, "mode": mode})


@pytest.mark.parametrize("mode, target", [("systemd", "vllm-tiny"), ("compose", "compose:vllm-tiny/vllm-tiny")])
def test_the_gate_watches_the_supervisor_of_the_mode(mode, target):
    rec = record(mode)
    assert rec["supervisor"] == mode and rec["gate_target"] == target
    argv = instances.gate_argv(rec, "/usr/local/libexec/vllm-deploy", "/etc/vllm", "600", "Hello")
    assert argv == ["/usr/local/libexec/vllm-deploy/vllm-gate", "--unit", target, "--url", "http://127.0.0.1:8000",
                    "--model", "tiny-llama", "--timeout", "600", "--env-file", "/etc/vllm/tiny.env", "--prompt", "Hello"]


@pytest.mark.parametrize("bind, url", [("0.0.0.0", "http://127.0.0.1:8000"), ("::", "http://127.0.0.1:8000"),
                                       ("10.0.0.5", "http://10.0.0.5:8000"), ("fd00::5", "http://[fd00::5]:8000")])
def test_the_node_reaches_a_wildcard_bind_on_loopback(bind, url):
    assert instances.gate_url(record(bind=bind)) == url


def test_the_logs_command_reads_only_this_start():
    assert instances.gate_logs_argv(record(), "/h", since="1733040000.123\n") == [
        "/h/vllm-gate", "--unit", "vllm-tiny", "--logs", "--since", "1733040000.123"]
    assert instances.gate_logs_argv(record("compose"), "/h", lines=400)[-2:] == ["--lines", "400"]


def test_rollback_restores_only_what_this_run_replaced_for_that_instance():
    rendered = {"results": [
        {"item": {"name": "a"}, "changed": True, "backup_file": "/etc/systemd/system/vllm-a.service.123.bak"},
        {"item": {"name": "b"}, "changed": True},                       # created new: nothing to restore
    ]}
    env = {"results": [{"item": {"name": "a"}, "changed": False}, {"item": {"name": "b"}, "changed": True}]}
    owner = {"results": [{"item": {"name": "a"}, "skipped": True}]}  # systemd mode: no owning unit
    entries = [{"kind": "engine", "result": rendered, "dest": "/etc/systemd/system/vllm-a.service", "mode": "0644", "name": "vllm-a.service"},
               {"kind": "owner", "result": owner, "dest": "x", "mode": "0644", "name": "x"},
               {"kind": "env", "result": env, "dest": "/etc/vllm/a.env", "mode": "0600", "name": "a.env"}]
    assert ladder.backups_of(entries, "a") == [{"kind": "engine", "src": "/etc/systemd/system/vllm-a.service.123.bak",
                                                "dest": "/etc/systemd/system/vllm-a.service", "mode": "0644", "name": "vllm-a.service"}]
    assert ladder.backups_of(entries, "b") == []


@pytest.mark.parametrize("category, memory", [("kv_cache_too_small", True), ("cuda_oom_after_kv", True),
                                              ("max_len_over_model_limit", False), ("unknown", False)])
def test_only_memory_failures_climb_the_ladder(category, memory):
    assert ladder.is_memory_failure({"category": category}) is memory
    assert ladder.is_memory_failure(None) is False


def test_an_override_changes_one_pin_and_keeps_the_rest():
    pins = compat.load_versions()
    merged = compat.pinned_versions({"nvidia_driver": {"debian_version": "535.309.01-0+deb12u1"}})
    assert merged["nvidia_driver"]["debian_version"] == "535.309.01-0+deb12u1"
    assert {k: v for k, v in merged["nvidia_driver"].items() if k != "debian_version"} == \
           {k: v for k, v in pins["nvidia_driver"].items() if k != "debian_version"}
    assert merged["vllm"] == pins["vllm"]
    with pytest.raises(TypeError):
        compat.pinned_versions(["not", "a", "mapping"])


@pytest.mark.parametrize("override", [
    # The CUDA toolkit's source follows the driver's unless pinned: a real input (driver-upgrade scenario).
    {"cuda_toolkit": {"source": "nvidia_repo", "version": "13.0"}},
    {"nvidia_driver": {"source": "debian", "debian_version": "535.309.01-0+deb12u1"}},
])
def test_overrides_of_every_pin_the_roles_read_are_accepted(override):
    assert instances.validate_fleet({"vllm_bind": "127.0.0.1", "vllm_engine": "cpu", "vllm_versions_override": override},
                                    host="node1") == []


def test_an_override_of_a_key_no_role_reads_names_the_closest_pin():
    errors = instances.validate_fleet({"vllm_bind": "127.0.0.1", "vllm_engine": "cpu",
                                       "vllm_versions_override": {"cuda_toolkit": {"sorce": "debian"}}}, host="node1")
    assert errors == ["node1: vllm_versions_override.cuda_toolkit.sorce: is not a pin of vllm_deploy/data/versions.yaml"
                      " — did you mean source?"]
