#!/usr/bin/env python3
"""How much of a thread's conclusion is in the log at all? (a benchmark: always exits 0)

Usage: python scripts/bench_diagnose_readers.py

Issue 26 asks `diagnose` for 90 % of the categories the threads concluded, on logs it was never tuned on.
Fifteen blind rounds measured the rules at 74.6 %. This asks what a careful reader gets from the same logs:
tests/fixtures/diagnose-readers/ holds the answers of three readers (helper sessions that read only the 205
logs of the fifteen rounds' blind thirds, shuffled under opaque names, with the 20 categories' one-line
definitions the collectors had: no thread, no meta file, no rule, no classifier) and of one relabeler who
read 40 of the threads again without seeing the collector's label. Its README.md says how they were made.

It prints, against the collectors' labels:
  - each reader's category share, phase share (where the label names a phase), and the majority of three;
  - how often two readers agree with each other (the log's own ambiguity);
  - the relabeler's agreement with the collector (the labels' own reliability);
  - on rounds 7-15, whose measuring commits are in git history, the rules as they were when each round was
    measured (blind) beside the readers on the same logs, and which of the rules' blind misses the readers'
    majority got right (a wording the log does show) or also missed (the log does not show the conclusion).
"""

from __future__ import annotations

import collections
import csv
import glob
import json
import os
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from bench_diagnose_blind import split  # noqa: E402
from bench_diagnose_forward import RUNNER, export, in_history, rounds  # noqa: E402
from vllm_deploy.ladder import ACTIONS  # noqa: E402

FIXTURES = os.path.join(ROOT, "tests", "fixtures")
READERS = os.path.join(FIXTURES, "diagnose-readers")


def labels(keys: set[tuple[str, str]], blind_only: bool = True) -> dict[tuple[str, str], dict]:
    """(folder, log name) -> the collector's meta, for the readers' logs; with blind_only each must be of a round's
    blind third."""
    out = {}
    for folder in sorted({f for f, _ in keys}):
        names = [n for n in os.listdir(os.path.join(FIXTURES, folder)) if n.endswith(".log")]
        blind = set(split(names)[1])
        for name in sorted(n for f, n in keys if f == folder):
            if blind_only and name not in blind:
                raise SystemExit(f"{folder}/{name}: the readers' file names a log outside the round's blind third")
            with open(os.path.join(FIXTURES, folder, name[:-4] + ".meta.yaml"), encoding="utf-8") as fh:
                out[(folder, name)] = yaml.safe_load(fh)
    return out


def answers(path: str) -> dict[str, dict[tuple[str, str], dict]]:
    """reader -> (folder, log name) -> that reader's row."""
    out: dict[str, dict] = collections.defaultdict(dict)
    with open(path, encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            out[row["reader"]][(row["folder"], row["log"])] = row
    return out


def pct(a: int, b: int) -> str:
    return f"{a}/{b} = {100 * a / b:.1f}%" if b else "none"


def acted(got: dict, truth: dict, keys: list) -> int:
    """How many answers lead the deploy to the remedy (ladder, refuse, rollback) of the label's category."""
    return sum(ACTIONS.get(got.get(k) or "", "") == ACTIONS[truth[k]["category"]] for k in keys)


def majority(votes: list[str]) -> str | None:
    """The answer at least two of three readers gave; None when all three differ."""
    top, count = collections.Counter(votes).most_common(1)[0]
    return top if count >= 2 else None


def votes(readers: dict, names: list[str], keys, field: str) -> dict:
    """(folder, log) -> the readers' majority answer for `field` (category or phase), None where all differ."""
    return {k: majority([readers[r].get(k, {}).get(field, "") for r in names]) for k in keys}


def scored(category: dict, phase: dict, truth: dict, keys: list, phased: list) -> str:
    """'category a/b; phase c/d; remedy e/b' of one reader's (or the rules') answers against the labels."""
    return (f"category {pct(sum(category.get(k) == truth[k]['category'] for k in keys), len(keys))};"
            f" phase {pct(sum(phase.get(k) == truth[k]['phase'] for k in phased), len(phased))};"
            f" remedy {pct(acted(category, truth, keys), len(keys))}")


def rules_blind(keys: list[tuple[str, str]]) -> dict[tuple[str, str], tuple[str, str]]:
    """(folder, log) -> (category, phase) the rules that measured its round gave, for rounds whose commit git has."""
    out = {}
    wanted = {folder for folder, _ in keys}
    with tempfile.TemporaryDirectory() as tmp:
        for _, path, commit in rounds():
            folder = os.path.basename(path)
            if folder not in wanted or not in_history(commit):
                continue
            run = subprocess.run([sys.executable, "-c", RUNNER, export(commit, tmp), path], capture_output=True,
                                 text=True, cwd=tmp)
            if run.returncode:
                print(f"{folder}: its rules ({commit}) failed to run; left out")
                continue
            for name, got in json.loads(run.stdout).items():
                if (folder, name) in keys:
                    out[(folder, name)] = tuple(got)
    return out


def whole_round(path: str) -> None:
    """A round read whole (both thirds) by three readers of the logs alone (no thread, rules or labels), beside the
    rules that measured it: a file round<N>.tsv (when each was read: the folder's README.md)."""
    readers = answers(path)
    names = sorted(readers)
    folder = next(iter(readers[names[0]]))[0]
    logs = sorted(n for n in os.listdir(os.path.join(FIXTURES, folder)) if n.endswith(".log"))
    truth = labels({(folder, name) for name in logs}, blind_only=False)
    keys = sorted(truth)
    rules = rules_blind(keys)
    blind = set(split(logs)[1])
    rows = [("rules", {k: v[0] for k, v in rules.items()}, {k: v[1] for k, v in rules.items()}),
            ("majority", votes(readers, names, keys, "category"), votes(readers, names, keys, "phase"))]
    rows += [(r, {k: row["category"] for k, row in readers[r].items()},
              {k: row["phase"] for k, row in readers[r].items()}) for r in names]
    print()
    print(f"{folder}, read whole by {len(names)} readers of the logs alone, beside the rules that measured it:")
    for part, sub in (("blind third", [k for k in keys if k[1] in blind]),
                      ("development", [k for k in keys if k[1] not in blind]), ("all", keys)):
        phased = [k for k in sub if truth[k].get("phase", "unknown") != "unknown"]
        print(f"  {part} ({len(sub)}):")
        for who, cat, ph in rows:
            print(f"    {who:<9} {scored(cat, ph, truth, sub, phased)}")


def main(argv: list[str] | None = None) -> int:
    readers = answers(os.path.join(READERS, "readers.tsv"))
    names = sorted(readers)
    truth = labels({k for r in names for k in readers[r]})
    keys = sorted(truth)
    missing = {r: len(set(keys) - set(readers[r])) for r in names}
    print(f"{len(keys)} blind-third logs of {len({f for f, _ in keys})} rounds; readers {', '.join(names)}"
          + ("" if not any(missing.values()) else f"; unanswered: {missing}"))
    phased = [k for k in keys if truth[k].get("phase", "unknown") != "unknown"]
    print()
    print("category (and phase where the thread names one) against the collectors' labels:")
    for r in names:
        category = {k: row["category"] for k, row in readers[r].items()}
        phase = {k: row["phase"] for k, row in readers[r].items()}
        print(f"  {r:<10} {scored(category, phase, truth, keys, phased)}")
    vote, vote_ph = votes(readers, names, keys, "category"), votes(readers, names, keys, "phase")
    print(f"  {'majority':<10} {scored(vote, vote_ph, truth, keys, phased)}"
          f" (no majority on {sum(v is None for v in vote.values())})")
    for source in ("error_text", "thread"):
        sub = [k for k in keys if str(truth[k].get("conclusion_source", "")).endswith(source)]
        print(f"    labels from the {source:<10} ({len(sub)} logs): majority {pct(sum(vote[k] == truth[k]['category'] for k in sub), len(sub))}")
    print()
    print("readers agreeing with each other on the category (the log's own ambiguity):")
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            both = [k for k in keys if k in readers[a] and k in readers[b]]
            same = sum(readers[a][k]["category"] == readers[b][k]["category"] for k in both)
            print(f"  {a} ~ {b}: {pct(same, len(both))}")
    path = os.path.join(READERS, "relabel.tsv")
    relabel = answers(path).get("relabeler", {}) if os.path.exists(path) else {}
    if relabel:
        print()
        found = {k: row for k, row in relabel.items() if row.get("basis") != "not_found"}
        same = sum(row["category"] == truth[k]["category"] for k, row in found.items())
        bases = collections.Counter(row.get("basis") for row in relabel.values())
        print(f"relabeler, from the thread again, against the collector: {pct(same, len(found))}"
              f" (threads read {bases['thread']}, no conclusion {bases['error_text']}, not found {bases['not_found']})")
    measured = rules_blind(keys)
    blind = {k: v[0] for k, v in measured.items()}
    if blind:
        sub = sorted(blind)
        sub_ph = [k for k in sub if truth[k].get("phase", "unknown") != "unknown"]
        print()
        print(f"rounds 7-15 ({len(sub)} logs), each with the rules that measured it, blind:")
        print(f"  rules      {scored(blind, {k: v[1] for k, v in measured.items()}, truth, sub, sub_ph)}")
        print(f"  majority   {scored(vote, vote_ph, truth, sub, sub_ph)}")
        misses = [k for k in sub if blind[k] != truth[k]["category"]]
        seen = sum(vote[k] == truth[k]["category"] for k in misses)
        said_unknown = sum(blind[k] == "unknown" for k in misses)
        print(f"  of the rules' {len(misses)} misses ({said_unknown} of them 'unknown'): the readers' majority got"
              f" {seen} right, {len(misses) - seen} wrong too")
        kinds = collections.Counter((truth[k]["category"], blind[k]) for k in misses if vote[k] == truth[k]["category"])
        if kinds:
            print("  the misses the readers got right, as (label, rules' answer): "
                  + ", ".join(f"{a} <- {b} x{n}" if n > 1 else f"{a} <- {b}" for (a, b), n in kinds.most_common()))
    for path in sorted(glob.glob(os.path.join(READERS, "round*.tsv"))):
        whole_round(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
