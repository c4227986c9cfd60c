#!/usr/bin/env python3
"""Does tuning `diagnose` on opened rounds help on rounds it has not seen? (a benchmark: always exits 0)

Usage: python scripts/bench_diagnose_forward.py

Each blind round's PROTOCOL.md names the commit whose rules measured it, before its logs were opened
("rules at <commit>", or "diagnose.py as at <commit>"). This script takes vllm_deploy/ as it was at each of
those commits (from git history: run it in a clone, not an export) and runs it on every round collected at
or after it: logs those rules were never tuned on, both thirds, since the whole round was unopened then. It
prints the category share per (rules, round) and, per round, the share with the oldest rules against the
share with the newest rules that had still not seen it: how much the tuning in between carried forward to
logs nobody had read. A round whose commit is not in this clone's history is left out, and said so.

With --word-model it also tries what rules cannot write down: where a round's measuring rules said `unknown`,
a naive Bayes model of the words of the error lines, trained only on the logs collected before that round
(the public set, the calibration logs and the earlier rounds), names a category instead. It prints how
many of those unknowns the model then gets right and how many right unknowns it turns wrong.
"""

from __future__ import annotations

import collections
import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from bench_diagnose_blind import measurements, rounds as blind_rounds  # noqa: E402

COMMIT_RE = re.compile(r"diagnose\.py as at ([0-9a-f]{7,40})|rules at ([0-9a-f]{7,40})")

# Runs in a fresh interpreter whose sys.path starts with the old tree; refuses to score another copy. Prints
# {log name: [category, phase]} for the folder.
RUNNER = """
import glob, json, os, sys
tree, folder = sys.argv[1], sys.argv[2]
sys.path.insert(0, tree)
import vllm_deploy.diagnose as d
assert os.path.realpath(d.__file__).startswith(os.path.realpath(tree)), d.__file__
out = {}
for path in sorted(glob.glob(os.path.join(folder, '*.log'))):
    with open(path, 'rb') as fh:
        data = fh.read()
    try:
        r = d.diagnose(data)
        out[os.path.basename(path)] = [r.category, getattr(r, 'phase', 'unknown')]
    except Exception as exc:
        out[os.path.basename(path)] = ['error: ' + type(exc).__name__, 'unknown']
print(json.dumps(out))
"""


def rounds() -> list[tuple[int, str, str]]:
    """(N, folder, commit) for every blind round whose PROTOCOL.md names its measuring commit."""
    found = []
    for n, folder in blind_rounds():
        m = COMMIT_RE.search(measurements(folder))
        if m:
            found.append((n, folder, m.group(1) or m.group(2)))
    return found


def in_history(commit: str) -> bool:
    return subprocess.run(["git", "-C", ROOT, "cat-file", "-e", commit + "^{commit}"],
                          capture_output=True).returncode == 0


def export(commit: str, into: str) -> str:
    tree = os.path.join(into, commit)
    os.makedirs(tree)
    archive = subprocess.run(["git", "-C", ROOT, "archive", commit, "vllm_deploy"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
    return tree


def truth(folder: str) -> dict[str, str]:
    out = {}
    for meta in glob.glob(os.path.join(folder, "*.meta.yaml")):
        with open(meta, encoding="utf-8") as fh:
            out[os.path.basename(meta)[: -len(".meta.yaml")] + ".log"] = yaml.safe_load(fh)["category"]
    return out


WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
ERROR_LINE = re.compile(r"error|exception|fail|refus|cannot|can't|unable|not support|invalid|assert|denied|killed|"
                        r"died|out of memory|timeout|timed out|exceed|too |no such|not found|mismatch", re.I)


def words(text: str) -> set[str]:
    """The words of the last eight error lines (the last five lines when none reads as an error)."""
    lines = text.splitlines()
    chosen = [line for line in lines if ERROR_LINE.search(line)][-8:] or lines[-5:]
    return {w.lower() for line in chosen for w in WORD.findall(line) if len(w) <= 40}


def labelled(folder: str) -> list[tuple[str, set[str], str]]:
    out = []
    for log in sorted(glob.glob(os.path.join(folder, "*.log"))):
        meta = log[:-4] + ".meta.yaml"
        if os.path.exists(meta):
            with open(meta, encoding="utf-8") as fh, open(log, "rb") as lf:
                out.append((os.path.basename(log), words(lf.read().decode("utf-8", "replace")),
                            yaml.safe_load(fh)["category"]))
    return out


def word_model(train: list[tuple[str, set[str], str]]):
    """Bernoulli naive Bayes over present words, add-one smoothing: returns words -> (category, probability)."""
    docs = collections.Counter(cat for _, _, cat in train)
    seen: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for _, ws, cat in train:
        seen[cat].update(ws)
    vocab = set().union(*(ws for _, ws, _ in train))

    def predict(ws: set[str]) -> tuple[str, float]:
        score = {cat: math.log(n / len(train)) + sum(math.log((seen[cat][w] + 1) / (n + 2)) for w in ws & vocab)
                 for cat, n in docs.items()}
        top = max(score.values())
        total = sum(math.exp(v - top) for v in score.values())
        best = max(score, key=score.get)
        return best, 1 / total

    return predict


def try_word_model(usable: list[tuple[int, str, str]], measured: dict[int, dict[str, str]]) -> None:
    def collected(folder: str) -> int:
        """The round a folder's logs came with: 0 for the public set and the calibration logs."""
        m = re.search(r"blind(\d*)$", folder)
        return int(m.group(1) or 1) if m else 0

    folders = [os.path.join(FIXTURES, "vllm-failures-public"), os.path.join(FIXTURES, "calibration", "vllm-failures")]
    folders += glob.glob(os.path.join(FIXTURES, "vllm-failures-blind*"))
    print()
    print("--word-model: where a round's measuring rules said unknown, the word model trained on earlier rounds")
    for threshold in (0.0, 0.5, 0.8):
        unknowns = right = gained = broken = 0
        for j, folder, _ in usable:
            if j not in measured:
                continue
            train = [d for f in folders if collected(f) < j for d in labelled(f)]
            predict = word_model(train)
            for name, ws, expected in labelled(folder):
                if measured[j][name] != "unknown":
                    continue
                unknowns += 1
                right += expected == "unknown"
                cat, p = predict(ws)
                named = cat if p >= threshold else "unknown"
                gained += named == expected != "unknown"
                broken += expected == "unknown" != named
        print(f"  probability >= {threshold}: of {unknowns} unknowns ({right} right), {gained} now right, {broken} right unknowns"
              f" turned wrong: {gained - broken:+d} logs")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    found = rounds()
    usable = []
    for n, folder, commit in found:
        if in_history(commit):
            usable.append((n, folder, commit))
        else:
            print(f"round {n}: its rules' commit {commit} is not in this clone's history; left out")
    if not usable:
        print("no round's measuring commit is in this clone's history")
        return 0
    share: dict[tuple[int, int], tuple[int, int]] = {}
    measured: dict[int, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, _, commit in usable:
            tree = export(commit, tmp)
            for j, folder, _ in usable:
                if j < k:
                    continue
                run = subprocess.run([sys.executable, "-c", RUNNER, tree, folder], capture_output=True,
                                     text=True, cwd=tmp)
                if run.returncode:
                    print(f"rules of round {k} ({commit}) on round {j}: failed: {run.stderr.strip().splitlines()[-1:]}")
                    continue
                got, expected = {name: v[0] for name, v in json.loads(run.stdout).items()}, truth(folder)
                if j == k:
                    measured[j] = got
                share[(k, j)] = (sum(got[name] == expected[name] for name in got), len(got))
    ns = [n for n, _, _ in usable]
    print("category share of every log of round j (columns) by the rules that measured round k (rows),")
    print("rules never tuned on round j; both thirds")
    print("rules \\ round " + "".join(f"{j:>8}" for j in ns))
    for k in ns:
        cells = "".join(f"{100 * share[(k, j)][0] / share[(k, j)][1]:7.1f}%" if (k, j) in share else " " * 8
                        for j in ns)
        print(f"round {k:<8}" + cells)
    print()
    for j in ns:
        column = [(k, share[(k, j)]) for k in ns if (k, j) in share]
        if len(column) < 2:
            continue
        (k0, (a, total)), (k1, (b, _)) = column[0], column[-1]
        print(f"round {j} ({total} logs): rules of round {k0} {a}/{total}, rules of round {k1} {b}/{total}:"
              f" {b - a:+d} logs from the tuning between them")
    if "--word-model" in args:
        try_word_model(usable, measured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
