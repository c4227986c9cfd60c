"""`diagnose` and `gpus` read only the tail of a huge input, from a file (a seek) or stdin (a bounded buffer):
the answer for a log whose error is at its end is still right, and a 50 MiB single line is never held whole.
Timings live in scripts/bench_inputs.py (`make bench-inputs`); these tests assert the behaviour."""

from __future__ import annotations

import io
import json
import tracemalloc

import pytest
import yaml

from conftest import calibration_file

from vllm_deploy import inputs
from vllm_deploy.cli import main

MiB = 1 << 20
FIFTY_MIB = 50 * MiB
FAILURE = "13-cuda-oom-after-kv-sampler-warmup-v0110"
TABLE = "01-a100-sxm4-80gb-x4-table"


def _fixture(kind: str, name: str, suffix: str) -> tuple[bytes, dict]:
    text = calibration_file(kind, name + suffix).read_bytes()
    meta = yaml.safe_load(calibration_file(kind, name + ".meta.yaml").read_text())
    return text, meta


class _Endless(io.RawIOBase):
    """A stream of `size` filler bytes, then `end`: 50 MiB of input without 50 MiB in memory."""

    def __init__(self, size: int, end: bytes, filler: bytes = b"x"):
        self.left, self.end, self.filler = size, end, filler

    def readable(self):
        return True

    def readinto(self, buf):
        if self.left > 0:
            n = min(len(buf), self.left)
            buf[:n] = self.filler * n
            self.left -= n
            return n
        n = min(len(buf), len(self.end))
        buf[:n], self.end = self.end[:n], self.end[n:]
        return n


def _sparse_log(path, size: int, end: bytes) -> None:
    """A file of `size` bytes (a hole of NULs, as a log with a corrupt middle reads) ending in `end`."""
    with open(path, "wb") as fh:
        fh.truncate(size)
        fh.seek(size)
        fh.write(end)


def test_huge_file_is_read_from_its_tail_and_still_diagnosed(tmp_path, capsys):
    failure, meta = _fixture("vllm-failures", FAILURE, ".log")
    log = tmp_path / "vllm.log"
    _sparse_log(log, FIFTY_MIB, b"\n" + failure)
    tail = inputs.tail_of_file(str(log))
    # The partial line the cut leaves (the end of the hole) is dropped: the tail starts at the failure.
    assert tail.data == failure and tail.total_bytes == FIFTY_MIB + 1 + len(failure)

    rc = main(["diagnose", str(log), "--json"])
    captured = capsys.readouterr()
    assert json.loads(captured.out)["category"] == meta["category"] and rc == 0
    assert "read the last 1.0 MiB of a 50.0 MiB input" in captured.err


def test_fifty_mib_single_line_on_stdin_is_kept_bounded(monkeypatch):
    failure, meta = _fixture("vllm-failures", FAILURE, ".log")
    end = failure.replace(b"\n", b" ")          # the whole input is one line
    tracemalloc.start()
    try:
        tail = inputs.tail_of_stream(_Endless(FIFTY_MIB, end))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * inputs.MAX_INPUT_BYTES, f"peak {peak / MiB:.1f} MiB for a 50 MiB line"
    assert len(tail.data) == inputs.MAX_INPUT_BYTES and tail.data.endswith(end)
    assert tail.total_bytes == FIFTY_MIB + len(end)


def test_stdin_log_with_error_at_the_end_is_diagnosed(monkeypatch, capsys):
    failure, meta = _fixture("vllm-failures", FAILURE, ".log")
    stream = _Endless(20 * MiB, failure, filler=b"\n")   # 20 MiB of empty lines, then the failure
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(stream)))
    rc = main(["diagnose", "-", "--json"])
    captured = capsys.readouterr()
    assert json.loads(captured.out)["category"] == meta["category"] and rc == 0
    assert "of a 20.0 MiB input" in captured.err


def test_cut_starts_at_a_line_boundary():
    lines = b"".join(b"line %07d\n" % i for i in range(300_000))    # 3.6 MiB
    tail = inputs.tail_of_stream(io.BytesIO(lines))
    assert tail.truncated and tail.data.startswith(b"line ") and tail.data.endswith(b"line 0299999\n")
    # A progress bar ends its "lines" with a carriage return: that is a boundary as well.
    bar = b"Loading shards:  50%|#####     | 1/2\r" * 60_000 + b"ERROR boom\n"
    tail = inputs.tail_of_stream(io.BytesIO(bar))
    assert tail.data.startswith(b"Loading shards:") and tail.data.endswith(b"ERROR boom\n")


def test_small_input_is_read_whole_without_a_note(tmp_path, capsys):
    failure, meta = _fixture("vllm-failures", FAILURE, ".log")
    log = tmp_path / "small.log"
    log.write_bytes(failure)
    tail = inputs.tail_of_file(str(log))
    assert tail.data == failure and not tail.truncated and inputs.truncation_note(tail) is None
    main(["diagnose", str(log)])
    assert capsys.readouterr().err == ""


def test_gpus_reads_the_tail_of_a_huge_capture(tmp_path, capsys):
    table, meta = _fixture("nvidia-smi", TABLE, ".txt")
    capture = tmp_path / "nvidia-smi.txt"
    _sparse_log(capture, FIFTY_MIB, b"\n" + table)
    rc = main(["gpus", str(capture), "--json"])
    facts = json.loads(capsys.readouterr().out)
    assert rc == 0 and facts["gpu_count"] == meta["gpu_count"]
    assert [g["memory_total_mib"] for g in facts["gpus"]] == [g["memory_total_mib"] for g in meta["gpus"]]


@pytest.mark.parametrize("command", ["diagnose", "gpus"])
def test_unreadable_path_is_one_line_exit_2(command, tmp_path, capsys):
    assert main([command, str(tmp_path / "missing.log")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "missing.log" in err
    assert main([command, str(tmp_path)]) == 2          # a directory
