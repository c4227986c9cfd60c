"""The filters an operator may call are documented for `ansible-doc -t filter vllm_deploy.fleet.NAME`
(a plugins/filter/NAME.yml beside the code, as ansible-core documents its own filters), and each
document stays true to the function it documents: its name, its parameters, an example that calls it."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import FILTER_DIR, REPO, filter_plugins

FILTERS = filter_plugins()
DOCS = sorted(FILTER_DIR.glob("*.yml"))
if len(DOCS) < 5:
    raise AssertionError(f"expected the operator's filters documented in {FILTER_DIR}/*.yml, found {len(DOCS)}")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.stem)
def test_each_document_matches_its_filter(path):
    doc = yaml.safe_load(path.read_text())
    assert set(doc) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, set(doc)
    name = doc["DOCUMENTATION"]["name"]
    assert name == path.stem, f"{path.name}: name {name!r}"
    assert name in FILTERS, f"{path.name}: no filter {name} is registered"
    params = list(inspect.signature(FILTERS[name]).parameters)
    options = doc["DOCUMENTATION"]["options"]
    # _input is the value before the `|`, the first parameter; the others are the function's own names.
    assert "_input" in options and options["_input"].get("required"), f"{path.name}: no required _input"
    unknown = sorted(set(options) - {"_input"} - set(params[1:]))
    assert not unknown, f"{path.name}: options {unknown} are not parameters of {name}{tuple(params)}"
    positional = [p.strip() for p in doc["DOCUMENTATION"].get("positional", "_input").split(",")]
    assert positional == ["_input", *params[1:len(positional)]], f"{path.name}: positional {positional}, function {params}"
    assert f"vllm_deploy.fleet.{name}" in doc["EXAMPLES"], f"{path.name}: the example does not call the filter by FQCN"
    assert "_value" in doc["RETURN"]


def test_ansible_doc_renders_them():
    names = [f"vllm_deploy.fleet.{p.stem}" for p in DOCS]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
               ANSIBLE_NOCOLOR="1", PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    run = subprocess.run([str(Path(sys.executable).parent / "ansible-doc"), "-t", "filter", *names], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    for name in names:
        assert f"> FILTER {name} (" in run.stdout, f"{name} not rendered:\n{run.stdout[-1500:]}"
    assert "ERROR" not in run.stderr, run.stderr[-2000:]
