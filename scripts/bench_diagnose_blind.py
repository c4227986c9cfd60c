#!/usr/bin/env python3
"""Benchmark `vllm-deploy diagnose` on the blind hold-out (a benchmark, not a test: always exits 0).

Usage: python scripts/bench_diagnose_blind.py [FOLDER]

FOLDER defaults to tests/fixtures/vllm-failures-blind (round 1); round 2 is tests/fixtures/vllm-failures-blind2
(`make bench-diagnose-blind2`). Reads FOLDER/*.log with the category and phase their .meta.yaml took from each
thread, and applies the rule PROTOCOL.md in that folder fixed before any log was collected: sorted by file
name, the log at index i is BLIND when i % 3 == 2; the rest is the development set. For the development set
it prints the category and phase share and every miss by file. For the blind third it prints only the
totals and a confusion table (expected category x diagnosed category, counts): never a file name or a
per-file result, so whoever tunes the classifier learns nothing about single blind logs. Phase is scored
where the meta phase is not `unknown`. "action" is the share whose diagnosed category leads the deploy to the
same remedy (vllm_deploy.ladder.ACTIONS: degrade ladder, refuse, rollback) as the thread's category.
"""

from __future__ import annotations

import collections
import glob
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from vllm_deploy.diagnose import diagnose  # noqa: E402
from vllm_deploy.ladder import ACTIONS  # noqa: E402

BLIND = os.path.join(ROOT, "tests", "fixtures", "vllm-failures-blind")


def rounds() -> list[tuple[int, str]]:
    """(N, folder) of every blind round (tests/fixtures/vllm-failures-blind, -blind2, ...) with a PROTOCOL.md, in order."""
    out = []
    for folder in glob.glob(os.path.join(ROOT, "tests", "fixtures", "vllm-failures-blind*")):
        n = re.search(r"blind(\d*)$", folder)
        if n and os.path.exists(os.path.join(folder, "PROTOCOL.md")):
            out.append((int(n.group(1) or 1), folder))
    return sorted(out)


def measurements(folder: str) -> str:
    """A round's PROTOCOL.md from its "## Measurements" heading on (the whole file when it has none yet)."""
    with open(os.path.join(folder, "PROTOCOL.md"), encoding="utf-8") as fh:
        return fh.read().split("## Measurements", 1)[-1]


def split(names: list[str]) -> tuple[list[str], list[str]]:
    """(development, blind) by the PROTOCOL.md rule: sorted by name, index % 3 == 2 is blind."""
    ordered = sorted(names)
    return ([n for i, n in enumerate(ordered) if i % 3 != 2], [n for i, n in enumerate(ordered) if i % 3 == 2])


def run(folder: str, name: str) -> dict:
    with open(os.path.join(folder, name[:-4] + ".meta.yaml"), encoding="utf-8") as fh:
        meta = yaml.safe_load(fh)
    with open(os.path.join(folder, name), "rb") as fh:
        data = fh.read()
    try:
        result = diagnose(data)
        got, phase = result.category, getattr(result, "phase", None)
    except Exception as exc:  # a benchmark reports a crash as a miss instead of stopping
        got, phase = f"error: {type(exc).__name__}", None
    return {"name": name, "expected": meta["category"], "expected_phase": meta.get("phase", "unknown"),
            "got": got, "phase": phase}


def share(rows: list[dict]) -> str:
    right = sum(r["got"] == r["expected"] for r in rows)
    phased = [r for r in rows if r["expected_phase"] != "unknown"]
    ok = sum(r["phase"] == r["expected_phase"] for r in phased)
    acted = sum(ACTIONS.get(r["got"]) == ACTIONS[r["expected"]] for r in rows)
    cat = f"category {right}/{len(rows)} = {right / len(rows) * 100:.1f}%" if rows else "category: no logs"
    ph = f"phase {ok}/{len(phased)} = {ok / len(phased) * 100:.1f}%" if phased else "phase: none scored"
    act = f"action {acted}/{len(rows)} = {acted / len(rows) * 100:.1f}%" if rows else "action: no logs"
    return f"{cat}; {ph}; {act}"


def confusion(rows: list[dict]) -> list[str]:
    counts = collections.Counter((r["expected"], r["got"]) for r in rows)
    expected = sorted({r["expected"] for r in rows})
    got = sorted({r["got"] for r in rows})
    width = max(len(e) for e in expected + ["expected \\ diagnosed"])
    lines = ["  " + "expected \\ diagnosed".ljust(width) + "  " + "  ".join(got)]
    for e in expected:
        cells = "  ".join(str(counts[(e, g)] or ".").rjust(len(g)) for g in got)
        lines.append("  " + e.ljust(width) + "  " + cells)
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folder = os.path.join(ROOT, args[0]) if args else BLIND
    names = [n for n in os.listdir(folder) if n.endswith(".log")]
    dev_names, blind_names = split(names)
    dev = [run(folder, n) for n in dev_names]
    blind = [run(folder, n) for n in blind_names]
    print(f"development ({len(dev)}): {share(dev)}")
    for r in dev:
        cat_miss = r["got"] != r["expected"]
        phase_miss = r["expected_phase"] != "unknown" and r["phase"] != r["expected_phase"]
        if cat_miss or phase_miss:
            print(f"  MISS {r['name']}: expected {r['expected']}/{r['expected_phase']}, got {r['got']}/{r['phase']}")
    print()
    print(f"blind third ({len(blind)}): {share(blind)}")
    print("blind third, confusion (counts; rows: expected category, columns: diagnosed category):")
    for line in confusion(blind):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
