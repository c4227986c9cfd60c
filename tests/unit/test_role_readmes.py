"""Every role has a README whose variables table is its argument spec: each option of the main entry point
has a table row (first cell `name`), and where the spec gives a scalar default (or null) the row's second
cell is that default. Every variable of defaults/main.yml is an option of the spec (the `__` ones are private),
and a scalar spec default reads as in defaults/main.yml: README, spec and defaults stay one set."""

from __future__ import annotations

import re

import pytest
import yaml

from conftest import REPO

ROLES = sorted(p for p in (REPO / "roles").iterdir() if p.is_dir())
if not ROLES:
    raise AssertionError(f"no roles under {REPO / 'roles'}")


def _yaml(path):
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def _entry_points(role):
    return _yaml(role / "meta" / "argument_specs.yml").get("argument_specs") or {}


def _main_options(role):
    return (_entry_points(role).get("main") or {}).get("options") or {}


def _render(value):
    """A default as the README's table writes it (inside backticks), whitespace collapsed."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return "''"
    return " ".join(str(value).split())


def _cells(line):
    # A literal | inside a cell is written \| (Markdown tables).
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def _rows(readme, name):
    """The table rows whose first cell is `name`, as lists of cells."""
    rows = (_cells(line) for line in readme.splitlines() if line.lstrip().startswith("|"))
    return [cells for cells in rows if cells[0] == f"`{name}`"]


def _scalar(value):
    return isinstance(value, (str, int, float, bool))


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_the_readme_names_every_option_with_its_default(role):
    readme_path = role / "README.md"
    assert readme_path.exists(), f"roles/{role.name} has no README.md"
    readme = readme_path.read_text()
    problems = []
    for name, spec in _main_options(role).items():
        if f"`{name}`" not in readme:
            problems.append(f"{name}: not in the README")
            continue
        rows = _rows(readme, name)
        if not rows:
            problems.append(f"{name}: no table row | `{name}` | default | meaning |")
        if "default" not in spec or not (spec["default"] is None or _scalar(spec["default"])):
            continue
        want = _render(spec["default"])
        for cells in rows:
            got = " ".join(cells[1].strip("`").split()) if len(cells) > 1 else ""
            if got != want:
                problems.append(f"{name}: the row's default is {got!r}, the spec's {want!r}")
    assert not problems, f"roles/{role.name}/README.md:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_default_is_an_option_of_the_spec(role):
    defaults = _yaml(role / "defaults" / "main.yml")
    options = {}
    for entry in _entry_points(role).values():
        options.update((entry or {}).get("options") or {})
    missing = sorted(n for n in defaults if not n.startswith("__") and n not in options)
    assert not missing, f"roles/{role.name}: in defaults/main.yml, not in meta/argument_specs.yml: {missing}"
    drift = [f"{n}: spec {_render(options[n]['default'])!r}, defaults {_render(v)!r}"
             for n, v in defaults.items()
             if n in options and _scalar(v) and "default" in options[n]
             and _render(options[n]["default"]) != _render(v)]
    assert not drift, f"roles/{role.name}: spec default is not defaults/main.yml's:\n  " + "\n  ".join(drift)


def test_the_checks_see_a_missing_row():
    readme = "| Variable | Default | Meaning |\n|---|---|---|\n| `a_b` | `{{ x \\| int }}` | a |\n"
    assert _rows(readme, "a_b") == [["`a_b`", "`{{ x | int }}`", "a"]]
    assert _rows(readme.replace("| `a_b` |", "| a_b |"), "a_b") == []
