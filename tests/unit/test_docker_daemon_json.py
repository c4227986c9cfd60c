"""docker_daemon_json: the user's daemon.json keeps its keys when the NVIDIA runtime is merged in.

The pure part (load/merge/plan) is tested directly; the module itself runs as Ansible runs it
(a subprocess with its arguments file) for check mode, --diff, modes and the refusal of bad JSON.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

MODULE_PATH = Path(__file__).resolve().parents[2] / "plugins" / "modules" / "docker_daemon_json.py"
spec = importlib.util.spec_from_file_location("docker_daemon_json", MODULE_PATH)
ddj = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ddj)

NVIDIA = {"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}
# A user's daemon.json as people write them (log rotation, a registry mirror, their own runtime).
USER = {
    "log-driver": "json-file",
    "log-opts": {"max-size": "10m", "max-file": "3"},
    "registry-mirrors": ["https://mirror.example.internal"],
    "runtimes": {"crun": {"path": "/usr/bin/crun"}},
}


@pytest.mark.parametrize("current,settings,expected,paths", [
    ({}, NVIDIA, NVIDIA, ["runtimes"]),
    (USER, NVIDIA, {**USER, "runtimes": {"crun": {"path": "/usr/bin/crun"}, **NVIDIA["runtimes"]}},
     ["runtimes.nvidia"]),
    ({**USER, **NVIDIA}, NVIDIA, {**USER, **NVIDIA}, []),
    (USER, {"default-runtime": "nvidia"}, {**USER, "default-runtime": "nvidia"}, ["default-runtime"]),
    ({**USER, "default-runtime": "nvidia"}, {"default-runtime": None}, USER, ["default-runtime"]),
    ({"log-opts": {"max-size": "10m"}}, {"log-opts": "replace-a-mapping"}, {"log-opts": "replace-a-mapping"},
     ["log-opts"]),
    ({"runtimes": {"nvidia": {"path": "old", "args": []}}}, NVIDIA, NVIDIA, ["runtimes.nvidia.path"]),
])
def test_merge_config(current, settings, expected, paths):
    merged, changed = ddj.merge_config(current, settings)
    assert merged == expected
    assert changed == paths


def test_merge_keeps_the_users_key_order_and_appends_new_keys():
    merged, _ = ddj.merge_config(USER, {"default-runtime": "nvidia", **NVIDIA})
    assert list(merged) == ["log-driver", "log-opts", "registry-mirrors", "runtimes", "default-runtime"]
    assert list(merged["runtimes"]) == ["crun", "nvidia"]


def test_merge_does_not_touch_its_input():
    current = json.loads(json.dumps(USER))
    ddj.merge_config(current, NVIDIA)
    assert current == USER


@pytest.mark.parametrize("text", [None, "", "  \n"])
def test_absent_or_empty_file_is_an_empty_config(text):
    changed, before, after, merged, _ = ddj.plan(text, NVIDIA)
    assert changed and merged == NVIDIA and before == (text or "")
    assert json.loads(after) == NVIDIA


def test_reformatting_alone_is_not_a_change():
    compact = json.dumps({**USER, **NVIDIA}, separators=(",", ":"))
    changed, before, after, _, _ = ddj.plan(compact, NVIDIA)
    assert not changed and after == before == compact


@pytest.mark.parametrize("text,needle", [("{not json", "not valid JSON"), ("[1, 2]", "JSON list, not an object")])
def test_unreadable_file_is_refused(text, needle):
    with pytest.raises(ddj.DaemonJsonError, match=needle):
        ddj.plan(text, NVIDIA, "/etc/docker/daemon.json")


def run_module(tmp_path, check_mode=False, diff=True, **args):
    argsfile = tmp_path / "args.json"
    argsfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
        **args, "_ansible_check_mode": check_mode, "_ansible_diff": diff,
        "_ansible_tmpdir": str(tmp_path), "_ansible_remote_tmp": str(tmp_path), "_ansible_keep_remote_files": False}}))
    proc = subprocess.run([sys.executable, str(MODULE_PATH), str(argsfile)], capture_output=True, text=True,
                          timeout=60)
    return json.loads(proc.stdout)


@pytest.fixture()
def daemon_json(tmp_path):
    path = tmp_path / "docker" / "daemon.json"
    path.parent.mkdir()
    path.write_text(json.dumps(USER, indent=2))
    os.chmod(path, 0o600)
    return path


def test_module_check_mode_reports_the_diff_and_writes_nothing(tmp_path, daemon_json):
    before = daemon_json.read_text()
    result = run_module(tmp_path, check_mode=True, path=str(daemon_json), settings=NVIDIA)
    assert result["changed"] is True
    assert daemon_json.read_text() == before
    assert '"nvidia"' in result["diff"]["after"] and '"nvidia"' not in result["diff"]["before"]
    assert '"registry-mirrors"' in result["diff"]["after"]


def test_module_merges_then_is_idempotent(tmp_path, daemon_json):
    first = run_module(tmp_path, path=str(daemon_json), settings=NVIDIA, mode="0644")
    assert first["changed"] is True, first
    on_disk = json.loads(daemon_json.read_text())
    assert on_disk == {**USER, "runtimes": {**USER["runtimes"], **NVIDIA["runtimes"]}}
    assert oct(daemon_json.stat().st_mode & 0o777) == "0o644"
    second = run_module(tmp_path, path=str(daemon_json), settings=NVIDIA, mode="0644")
    assert second["changed"] is False


def test_module_creates_a_missing_file(tmp_path):
    path = tmp_path / "etc" / "docker" / "daemon.json"
    result = run_module(tmp_path, path=str(path), settings=NVIDIA, mode="0644")
    assert result["changed"] is True and json.loads(path.read_text()) == NVIDIA


def test_module_refuses_to_overwrite_bad_json(tmp_path, daemon_json):
    daemon_json.write_text("{broken")
    result = run_module(tmp_path, path=str(daemon_json), settings=NVIDIA)
    assert result.get("failed") is True and "never overwritten" in result["msg"]
    assert daemon_json.read_text() == "{broken"
