"""The repository as the collection vllm_deploy.fleet: the filters' missing-package message and the
FQCN rewrite (scripts/fqcn-filters.py). The build/install/use round trip is `make collection-check`."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import yaml

from conftest import REPO

SCRIPT = REPO / "scripts" / "fqcn-filters.py"
FILTER_FILES = sorted(p.stem for p in (REPO / "plugins" / "filter").glob("*.py"))
if not FILTER_FILES:
    raise AssertionError("no filter plugin under plugins/filter")


@pytest.mark.parametrize("name", FILTER_FILES)
def test_filters_without_the_package_name_the_pip_install(name):
    # sys.modules[name] = None makes `import vllm_deploy` raise ImportError, as on a controller without it.
    # Imported by its collection name (collections/ links back here), as Ansible imports it.
    code = (f"import importlib, sys; sys.modules['vllm_deploy'] = None; sys.path.insert(0, {str(REPO / 'collections')!r}); "
            f"importlib.import_module('ansible_collections.vllm_deploy.fleet.plugins.filter.{name}')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=False)
    assert run.returncode != 0
    message = run.stderr.strip().splitlines()[-1]
    assert "AnsibleError" in message and "Python package vllm_deploy" in message
    assert "pip install ~/.ansible/collections/ansible_collections/vllm_deploy/fleet" in message


def _tree(tmp_path, tasks):
    (tmp_path / "plugins" / "filter").mkdir(parents=True)
    (tmp_path / "plugins" / "filter" / "f.py").write_text(textwrap.dedent("""
        def vllm_a(x): return x
        def vllm_ab(x): return x
        class FilterModule:
            def filters(self):
                return {"vllm_a": vllm_a, "vllm_ab": vllm_ab}
    """))
    role = tmp_path / "roles" / "r" / "tasks"
    role.mkdir(parents=True)
    (role / "main.yml").write_text(tasks)
    return role / "main.yml"


def _run(tmp_path, *args):
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(tmp_path), *args],
                          capture_output=True, text=True, check=False)


def test_fqcn_rewrite_is_exact_and_idempotent(tmp_path):
    tasks = _tree(tmp_path, textwrap.dedent("""\
        - name: One
          ansible.builtin.set_fact:
            one: "{{ x | vllm_a }}"
            two: "{{ x | vllm_ab(1) | vllm_deploy.fleet.vllm_a }}"
            three: >-
              {{ x
                 | vllm_a(2) }}
            untouched: "{{ x | vllm_abc | my_vllm_a }}"
        """))
    (tmp_path / "tests").mkdir()
    render_test = tmp_path / "tests" / "test_render.py"
    render_test.write_text('env.filters.update({"vllm_a": a, "vllm_abc": c})\n')
    assert _run(tmp_path, "--check").returncode == 1
    assert _run(tmp_path).returncode == 0
    # A test's Jinja environment renders the rewritten templates: it registers the FQCN.
    assert render_test.read_text() == 'env.filters.update({"vllm_deploy.fleet.vllm_a": a, "vllm_abc": c})\n'
    assert tasks.read_text() == textwrap.dedent("""\
        - name: One
          ansible.builtin.set_fact:
            one: "{{ x | vllm_deploy.fleet.vllm_a }}"
            two: "{{ x | vllm_deploy.fleet.vllm_ab(1) | vllm_deploy.fleet.vllm_a }}"
            three: >-
              {{ x
                 | vllm_deploy.fleet.vllm_a(2) }}
            untouched: "{{ x | vllm_abc | my_vllm_a }}"
        """)
    again = _run(tmp_path)
    assert "nothing to rewrite" in again.stdout
    assert _run(tmp_path, "--check").returncode == 0


def test_fqcn_rewrite_folds_a_line_it_made_too_long_without_changing_its_value(tmp_path):
    args = ", ".join(f"argument_{i}" for i in range(10))
    line = f'    planned: "{{{{ records | vllm_ab({args}) }}}}"'
    assert 142 < len(line) <= 160  # fits now; 18 more characters of FQCN push it over
    tasks = _tree(tmp_path, f"- name: Long\n  ansible.builtin.set_fact:\n{line}\n")
    before = yaml.safe_load(tasks.read_text())
    assert _run(tmp_path).returncode == 0
    text = tasks.read_text()
    assert "    planned: >-\n" in text
    assert max(len(row) for row in text.splitlines()) <= 160
    after = yaml.safe_load(text)[0]["ansible.builtin.set_fact"]["planned"]
    assert after == before[0]["ansible.builtin.set_fact"]["planned"].replace("| vllm_ab(", "| vllm_deploy.fleet.vllm_ab(")


def test_filter_names_are_the_functions_the_plugin_registers_by_decorator(tmp_path):
    """The project's plugin registers with @_filter (its FilterModule returns that registry): the rewrite
    must know those names, or collection-check finds none and every short use goes unseen."""
    (tmp_path / "plugins" / "filter").mkdir(parents=True)
    (tmp_path / "plugins" / "filter" / "f.py").write_text(textwrap.dedent("""
        _FILTERS = {}
        def _filter(fn):
            _FILTERS[fn.__name__] = fn
            return fn
        @_filter
        def vllm_a(x): return x
        def vllm_helper(x): return x
        class FilterModule:
            def filters(self):
                return dict(_FILTERS)
    """))
    role = tmp_path / "roles" / "r" / "tasks"
    role.mkdir(parents=True)
    (role / "main.yml").write_text('- ansible.builtin.debug:\n    msg: "{{ 1 | vllm_a | vllm_helper }}"\n')
    run = _run(tmp_path, "--check")
    assert run.returncode == 1 and "vllm_a" in run.stdout + run.stderr, run.stdout + run.stderr
    assert "vllm_helper" not in run.stdout + run.stderr
