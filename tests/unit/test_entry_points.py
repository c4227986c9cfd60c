"""Every `tasks_from` entry point that a role or playbook calls has its own entry in the callee's
meta/argument_specs.yml naming what its callers pass, so that Ansible checks the inputs before the first
task: a missing or malformed `instance` record is refused on entry, not half-way through a drain."""

from __future__ import annotations

import pytest
import yaml

from conftest import REPO, run_playbook

INCLUDES = {"include_role", "import_role", "ansible.builtin.include_role", "ansible.builtin.import_role"}


def _tasks(node):
    """Every task-like mapping in a loaded YAML file (plays, blocks, rescue and always included)."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always"):
            yield from _tasks(node.get(key))


def calls():
    """(caller file, callee role, entry point, variables the caller passes) for every tasks_from call."""
    found = []
    for path in sorted([*(REPO / "roles").rglob("*.yml"), *(REPO / "playbooks").rglob("*.yml")]):
        for task in _tasks(yaml.safe_load(path.read_text())):
            for key in INCLUDES & task.keys():
                args = task[key]
                if isinstance(args, dict) and "tasks_from" in args:
                    passed = set(task.get("vars") or {})
                    loop_var = (task.get("loop_control") or {}).get("loop_var")
                    if loop_var and ("loop" in task or any(k.startswith("with_") for k in task)):
                        passed.add(loop_var)
                    found.append((str(path.relative_to(REPO)), args["name"], args["tasks_from"], passed))
    return found


CALLS = calls()
if len(CALLS) < 10:  # a parser that finds nothing would pass every check below
    raise AssertionError(f"found only {len(CALLS)} tasks_from calls under roles/ and playbooks/")


def _specs(role):
    path = REPO / "roles" / role / "meta" / "argument_specs.yml"
    return (yaml.safe_load(path.read_text()) or {}).get("argument_specs") or {} if path.exists() else {}


@pytest.mark.parametrize("caller, role, entry, passed", CALLS, ids=lambda v: v if isinstance(v, str) else "")
def test_every_called_entry_point_has_a_spec_with_what_its_caller_passes(caller, role, entry, passed):
    # Ansible looks the spec up under the tasks_from value as written: `source_debian.yml` would need
    # an entry named so, which is why the callers name the file without its extension.
    specs = _specs(role)
    assert entry in specs, f"{caller}: roles/{role}/meta/argument_specs.yml has no entry point {entry!r}"
    options = (specs[entry] or {}).get("options") or {}
    missing = sorted(passed - set(options))
    assert not missing, f"{caller}: passes {missing} to {role} tasks_from {entry}, not in its spec"
    untyped = sorted(name for name in passed if "type" not in (options[name] or {}))
    assert not untyped, f"roles/{role}/meta/argument_specs.yml: {entry}: no type for {untyped}"


def test_the_validation_files_mean_one_thing():
    # validate_inventory.yml: no facts (the validation play); validate_facts.yml: after the facts.
    names = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "roles").glob("*/tasks/validate*.yml"))
    odd = [n for n in names if not n.endswith(("/validate_inventory.yml", "/validate_facts.yml"))]
    assert not odd, f"validation task files named otherwise: {odd}"


GATE = """
- name: Call an entry point with the caller's instance
  hosts: all
  gather_facts: false
  tasks:
    - name: The call
      ansible.builtin.include_role:
        name: {role}
        tasks_from: {entry}
"""


@pytest.mark.playbook
@pytest.mark.parametrize("role, entry", [
    ("vllm_gateway", "drain"), ("vllm_gateway", "enable"), ("vllm_verify", "gate"), ("vllm_monitoring", "plan_actual"),
])
def test_an_instance_that_is_not_a_record_is_refused_on_entry(tmp_path, role, entry):
    rc, out = run_playbook(GATE.format(role=role, entry=entry), tmp_path=tmp_path,
                           extra_vars={"instance": "node1-a", "vllm_monitoring_since": "0"})
    assert rc != 0
    assert f"Validating arguments against arg spec '{entry}'" in out
    assert "argument 'instance' is of type str" in out and "unable to convert to dict" in out, out[-2000:]


@pytest.mark.playbook
def test_a_gate_without_an_instance_is_refused_on_entry(tmp_path):
    rc, out = run_playbook(GATE.format(role="vllm_verify", entry="gate"), tmp_path=tmp_path)
    assert rc != 0
    assert "missing required arguments: instance" in out, out[-2000:]


@pytest.mark.playbook
def test_a_record_passes_the_drain_spec(tmp_path):
    # Without a gateway the drain only says so: the spec lets a real record through.
    record = {"name": "a", "unit": "vllm-a", "port": 8000, "bind": "127.0.0.1", "model": {"name": "tiny", "served_name": "tiny"}}
    rc, out = run_playbook(GATE.format(role="vllm_gateway", entry="drain"), tmp_path=tmp_path,
                           extra_vars={"instance": record})
    assert rc == 0, out[-2000:]
    assert "No gateway configured (group vllm_gateway has no hosts): a is restarted without a drain." in out
