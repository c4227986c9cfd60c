"""Shared test helpers: where the real captured inputs live, and how a test runs a real playbook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Real nvidia-smi outputs, vLLM logs and HF configs, copied into the repository (sources in SOURCES.md).
CALIBRATION = REPO / "tests" / "fixtures" / "calibration"
MODELS_DIR = CALIBRATION / "models"
STANDIN_DIR = REPO / "tests" / "fixtures" / "nvidia-smi-standin"

# The validation play alone (role vllm_validate): Ansible's own reading of the inputs, no host touched.
VALIDATE_PLAY = """\
- name: Validate only
  hosts: all
  gather_facts: false
  roles: [vllm_validate]
"""


FILTER_DIR = REPO / "plugins" / "filter"


def filter_modules() -> list:
    """Every filter file of plugins/filter, imported by its collection name as Ansible imports it
    (ansible_collections.vllm_deploy.fleet.plugins.filter.NAME, through collections/, which links back
    here), so its `ansible_collections...plugin_utils` import resolves. Raises when there is none."""
    import importlib

    collections = str(REPO / "collections")
    if collections not in sys.path:
        sys.path.insert(0, collections)
    names = sorted(p.stem for p in FILTER_DIR.glob("*.py"))
    if not names:
        raise AssertionError(f"no filter plugin in {FILTER_DIR}")
    return [importlib.import_module(f"ansible_collections.vllm_deploy.fleet.plugins.filter.{n}") for n in names]


def filter_plugins() -> dict:
    """{name: filter} of every filter file (each file's FilterModule), a name registered twice refused."""
    found: dict = {}
    for module in filter_modules():
        for name, fn in module.FilterModule().filters().items():
            if name in found:
                raise AssertionError(f"filter {name} is registered by two files")
            found[name] = fn
    return found


class MissingFixture(AssertionError):
    """A fixture file the tests need is not in the checkout: a failure, never a skip."""


def failure_logs(directory: Path, at_least: int, guide: str) -> list[str]:
    """The .log names of a folder of collected failure logs, sorted; MissingFixture below `at_least`."""
    names = sorted(p.name for p in directory.glob("*.log")) if directory.is_dir() else []
    if len(names) < at_least:
        raise MissingFixture(f"expected at least {at_least} logs in {directory}, found {len(names)} (see its {guide})")
    return names


def calibration_dir(name: str) -> Path:
    path = CALIBRATION / name
    if not path.is_dir():
        raise MissingFixture(f"fixture directory missing: {path} (see tests/fixtures/calibration/SOURCES.md)")
    return path


def calibration_file(*parts: str) -> Path:
    path = CALIBRATION.joinpath(*parts)
    if not path.is_file():
        raise MissingFixture(f"fixture file missing: {path} (see tests/fixtures/calibration/SOURCES.md)")
    return path


def model_config_path(name: str) -> Path:
    """config.json of a calibration model, by its <org>__<name> directory."""
    return calibration_file("models", name, "config.json")


def calibration_files(name: str, pattern: str) -> list[str]:
    """Names of the fixture files, for parametrize; raises (collection error) when none match,
    so an absent or emptied set cannot turn into zero test cases."""
    names = sorted(p.name for p in calibration_dir(name).glob(pattern))
    if not names:
        raise MissingFixture(f"no fixture matches {CALIBRATION / name / pattern}")
    return names


_running: list[pytest.Item] = []  # the test now running, for run_playbook's marker check


@pytest.fixture(autouse=True)
def _running_test(request):
    _running[:] = [request.node]
    yield
    _running.clear()


def run_playbook(play: str | Path, *args: str, tmp_path: Path, inventory: str | Path = "node1,",
                 connection: str | None = "local", extra_vars: dict | None = None, env: dict | None = None,
                 timeout: int = 300) -> tuple[int, str]:
    """Run the real ansible-playbook with this checkout's ansible.cfg, collection, roles and package.

    play: the playbook's text (written to tmp_path/play.yml) or the path of one. args go to the command
    line as given (`-e name=false` stays a string, as an operator's does); extra_vars are passed as JSON
    (`-e @file`), keeping their types. inventory: a host list ("node1,") or an inventory file.
    connection: `-c`, or None to leave it to the inventory. env: added to (or replacing) the
    environment. Returns (return code, stdout and stderr in one line, whitespace collapsed: Ansible
    wraps long messages, and a test asserts each message whole).
    """
    # The marker keeps `pytest -m "not playbook"` the fast set: a new caller cannot slip into it unmarked.
    if _running and _running[0].get_closest_marker("playbook") is None:
        raise AssertionError(f"{_running[0].nodeid} runs a playbook: mark it @pytest.mark.playbook")
    if isinstance(play, Path):
        play_path = play
    else:
        play_path = tmp_path / "play.yml"
        play_path.write_text(play)
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory)]
    if connection is not None:
        argv += ["-c", connection]
    argv.append(str(play_path))
    if extra_vars is not None:
        extra_file = tmp_path / "extra-vars.json"
        extra_file.write_text(json.dumps(extra_vars))
        argv += ["-e", f"@{extra_file}"]
    argv += list(args)
    # The caller's ANSIBLE_* settings stay out: the run is this checkout's configuration only.
    base = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    run_env = dict(
        base,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        # Only the checkout's collection link: ansible.cfg searches ~/.ansible/collections first, where
        # ansible-lint or a galaxy install leaves a copy of vllm_deploy.fleet that would answer for it.
        # Collections installed with Ansible (community.docker) are still found on its sys.path.
        ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_NOCOLOR="1",
        # The filters import vllm_deploy: this checkout's, not the editable install's (another worktree).
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    )
    run_env.update(env or {})
    run = subprocess.run(argv, cwd=REPO, env=run_env, capture_output=True, text=True, timeout=timeout)
    return run.returncode, " ".join((run.stdout + run.stderr).split())


def gpu_nodes_inventory(tmp_path: Path, group_vars: str, hosts: dict[str, str] | None = None) -> Path:
    """tmp_path/hosts.yml as an operator writes it: group gpu-nodes, each host on the local connection
    (hosts: name -> more inline host vars, ", name: value"; default node1 alone), the model tiny, and
    group_vars (YAML lines, at any indentation) in the group's vars. Returns its path for run_playbook."""
    lines = ["all:", "  children:", "    gpu-nodes:", "      hosts:"]
    lines += [f"        {name}: {{ansible_connection: local{extra}}}" for name, extra in (hosts or {"node1": ""}).items()]
    lines += ["      vars:", "        vllm_models:", "          tiny: {path: /srv/models/tiny}"]
    path = tmp_path / "hosts.yml"
    path.write_text("\n".join(lines) + "\n" + textwrap.indent(textwrap.dedent(group_vars), " " * 8))
    return path
