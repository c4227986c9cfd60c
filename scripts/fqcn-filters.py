#!/usr/bin/env python3
"""Rewrite this project's filters to their collection names: `| vllm_x(` → `| vllm_deploy.fleet.vllm_x(`.

Why: a role running from the installed collection vllm_deploy.fleet does not find its own collection's
filters by short name (ansible-core 2.19; neither the `collections:` keyword nor a role's meta helps:
Jinja plugins need their FQCN). Roles and modules resolve by short name inside the collection, so only
filters change. From a checkout the FQCN resolves too: collections/ansible_collections/vllm_deploy/fleet
links back to the checkout (found beside deploy.yml, and through ansible.cfg's collections_path).

    scripts/fqcn-filters.py            rewrite roles/, playbooks/, molecule/ (idempotent), and the tests'
                                       Jinja environments that render the roles' templates (`"vllm_x": f`)
    scripts/fqcn-filters.py --check    change nothing; exit 1 and list each short use left

The filter names are read from plugins/filter/*.py (the @_filter registry), so a new filter is covered.
"""

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "vllm_deploy.fleet."
SCAN = ("roles", "playbooks", "molecule")
SUFFIXES = {".yml", ".yaml", ".j2"}
MAX_LINE = 160  # .yamllint line-length
# `key: "{{ expr }}"` on one line: folded as `key: >-` + the expression alone, the value is unchanged.
ONE_LINE_EXPR = re.compile(r'^(\s*)((?:- )?[\w.-]+): "(\{\{[^"\\]*\}\})"$')


def filter_names(root=ROOT):
    """The names the project's filter plugins register: each function decorated with `@_filter` (the
    registry FilterModule.filters returns), and any `"name": function` entry of a FilterModule dict."""
    names = set()
    for plugin in sorted((root / "plugins" / "filter").glob("*.py")):
        text = plugin.read_text()
        names.update(re.findall(r"^@_filter\s*\ndef ([a-z_][a-z0-9_]*)\(", text, re.M))
        body = text.split("class FilterModule", 1)
        if len(body) == 2:
            names.update(re.findall(r"""["']([a-z_][a-z0-9_]*)["']\s*:""", body[1]))
    return names


def short_use(names):
    """A short filter use: `|`, optional whitespace (newlines too: folded Jinja), then a bare name.
    An FQCN use never matches: after the `|` it starts with `vllm_deploy.`, which is no filter name."""
    alternatives = "|".join(sorted(map(re.escape, names), key=len, reverse=True))
    return re.compile(rf"(\|\s*)({alternatives})\b(?!\.)")


def wrap(expr, width):
    """Greedy wrap at single spaces (non-space on both sides): a folded scalar joins its lines with one
    space, so the wrapped value is the original one exactly."""
    cuts = [i for i in range(1, len(expr) - 1) if expr[i] == " " and expr[i - 1] != " " and expr[i + 1] != " "]
    lines, start, last = [], 0, None
    for cut in cuts + [len(expr)]:
        if cut - start > width and last is not None:
            lines.append(expr[start:last])
            start = last + 1
        last = cut
    lines.append(expr[start:])
    return lines


def fold_long_lines(text):
    """Lines the longer names pushed past MAX_LINE: fold the simple `key: "{{ expr }}"` ones (a `>-`
    scalar, wrapped); return the new text and the numbers of long lines left to wrap by hand."""
    out, left = [], []
    for number, line in enumerate(text.split("\n"), 1):
        match = ONE_LINE_EXPR.match(line) if len(line) > MAX_LINE else None
        if match:
            indent, key, expr = match.groups()
            inner = indent + " " * (len(key) - len(key.lstrip("- "))) + "  "
            out.append(f"{indent}{key}: >-")
            out += [inner + part for part in wrap(expr, MAX_LINE - len(inner))]
            continue
        if len(line) > MAX_LINE and PREFIX in line:
            left.append(number)
        out.append(line)
    return "\n".join(out), left


def test_registration(names):
    """A filter registered by its short name in a Python test's Jinja environment (`"vllm_x": function`)."""
    alternatives = "|".join(sorted(map(re.escape, names), key=len, reverse=True))
    return re.compile(rf"""(["'])({alternatives})\1(\s*:)""")


def files(root=ROOT):
    for top in SCAN:
        for path in sorted((root / top).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and not path.is_symlink():
                yield path
    for path in sorted((root / "tests").rglob("*.py")):
        if path.is_file() and not path.is_symlink():
            yield path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a short use is left")
    parser.add_argument("--root", type=Path, default=ROOT, help="tree to rewrite (default: this checkout)")
    args = parser.parse_args(argv)

    names = filter_names(args.root)
    if not names:
        print(f"fqcn-filters: no FilterModule names found under {args.root}/plugins/filter", file=sys.stderr)
        return 2
    found = 0
    for path in files(args.root):
        pattern = test_registration(names) if path.suffix == ".py" else short_use(names)
        text = path.read_text()
        hits = list(pattern.finditer(text))
        if not hits:
            continue
        found += len(hits)
        rel = path.relative_to(args.root)
        if args.check:
            for hit in hits:
                line = text.count("\n", 0, hit.start()) + 1
                print(f"{rel}:{line}: filter {hit.group(2)} by its short name — use {PREFIX}{hit.group(2)} "
                      "(run scripts/fqcn-filters.py)")
        else:
            if path.suffix == ".py":
                new, left = pattern.sub(lambda m: m.group(1) + PREFIX + m.group(2) + m.group(1) + m.group(3), text), []
            else:
                new, left = fold_long_lines(pattern.sub(lambda m: m.group(1) + PREFIX + m.group(2), text))
            path.write_text(new)
            print(f"{rel}: {len(hits)} filter(s) → {PREFIX}*")
            for number in left:
                print(f"{rel}:{number}: longer than {MAX_LINE} characters now — wrap it by hand (yamllint)")
    if args.check:
        return 1 if found else 0
    print(f"fqcn-filters: {found} short filter use(s) rewritten" if found else "fqcn-filters: nothing to rewrite")
    return 0


if __name__ == "__main__":
    sys.exit(main())
