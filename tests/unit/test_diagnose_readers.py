"""The readers' answers behind `make bench-diagnose-readers` (tests/fixtures/diagnose-readers/README.md): every
row names a log of a blind round's blind third and one of diagnose's categories and phases, each reader answered
every log once, and the bench counts a majority only where two of three readers agree."""

from __future__ import annotations

import collections
import csv
import importlib.util

import pytest

from conftest import REPO
from vllm_deploy.diagnose import CATEGORIES, PHASES

READERS = REPO / "tests" / "fixtures" / "diagnose-readers"
FIXTURES = REPO / "tests" / "fixtures"


def rows(name: str) -> list[dict]:
    with open(READERS / name, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def bench():
    spec = importlib.util.spec_from_file_location("bench_readers", REPO / "scripts" / "bench_diagnose_readers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def blind_third(folder: str) -> set[str]:
    names = sorted(p.name for p in (FIXTURES / folder).glob("*.log"))
    return {n for i, n in enumerate(names) if i % 3 == 2}


@pytest.mark.parametrize("name", ["readers.tsv", "relabel.tsv"])
def test_every_answer_is_a_blind_log_with_one_of_diagnoses_names(name):
    bad = [(r["reader"], r["folder"], r["log"], r["category"], r["phase"]) for r in rows(name)
           if r["log"] not in blind_third(r["folder"]) or r["category"] not in CATEGORIES or r["phase"] not in PHASES]
    assert bad == []


@pytest.mark.parametrize("n", [16, 20])
def test_a_round_read_whole_was_read_by_each_reader_once(n):
    logs = {p.name for p in (FIXTURES / f"vllm-failures-blind{n}").glob("*.log")}
    answered = collections.defaultdict(list)
    for r in rows(f"round{n}.tsv"):
        assert r["folder"] == f"vllm-failures-blind{n}" and r["category"] in CATEGORIES and r["phase"] in PHASES, r
        answered[r["reader"]].append(r["log"])
    assert sorted(answered) == ["reader1", "reader2", "reader3"]
    for reader, names in answered.items():
        assert len(names) == len(set(names)) and set(names) == logs, reader


def test_each_reader_answered_every_log_of_rounds_1_to_15_once():
    wanted = {(f"vllm-failures-blind{n if n > 1 else ''}", log) for n in range(1, 16)
              for log in blind_third(f"vllm-failures-blind{n if n > 1 else ''}")}
    answered = collections.defaultdict(list)
    for r in rows("readers.tsv"):
        answered[r["reader"]].append((r["folder"], r["log"]))
    assert sorted(answered) == ["reader1", "reader2", "reader3"]
    for reader, keys in answered.items():
        assert len(keys) == len(set(keys)) == len(wanted), reader
        assert set(keys) == wanted, reader


def test_a_majority_needs_two_of_three():
    majority = bench().majority
    assert majority(["nccl_error", "lost_rank", "nccl_error"]) == "nccl_error"
    assert majority(["nccl_error", "lost_rank", "unknown"]) is None
