#!/usr/bin/env python3
"""Time `vllm-deploy diagnose` and `vllm-deploy gpus` on huge inputs (a benchmark, not a test: exits 0
unless a command crashed or gave a wrong answer).

Usage: python scripts/bench_inputs.py [--mib 50] [--budget 2.0] [--keep DIR]

Generates, in a scratch directory: a MIB-MiB log of ordinary vLLM INFO lines ending with a real failure
log (tests/fixtures/calibration/vllm-failures/FIXTURE, its category from the .meta.yaml), the same
failure after one MIB-MiB line, the same failure flattened onto the end of that line (no line break in
the whole input), and a MIB-MiB nvidia-smi capture whose real table
(tests/fixtures/calibration/nvidia-smi) follows a single runaway line. Each is run through the real CLI
(a fresh `python -m vllm_deploy` process, from a file and from stdin), and the wall time, the peak
resident memory of the process and the answer are printed against the budget.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAILURES = os.path.join(ROOT, "tests", "fixtures", "calibration", "vllm-failures")
NVIDIA_SMI = os.path.join(ROOT, "tests", "fixtures", "calibration", "nvidia-smi")
FIXTURE = "13-cuda-oom-after-kv-sampler-warmup-v0110"
TABLE = "01-a100-sxm4-80gb-x4-table"
# An ordinary line of a serving vLLM (the periodic stats line of v0.1x), repeated as filler.
INFO_LINE = (b"INFO 08-02 02:39:50 [loggers.py:118] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
             b"Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%\n")


def _fill(path: str, size: int, unit: bytes, tail: bytes) -> None:
    block = unit * max(1, (1 << 20) // len(unit))
    with open(path, "wb") as fh:
        written = 0
        while written < size:
            fh.write(block)
            written += len(block)
        fh.write(tail)


def _run(argv: list[str], stdin_path: str | None) -> tuple[float, int, int, str]:
    """Wall seconds, exit code, peak resident memory (MiB, from wait4's rusage of that child), stdout."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            open(stdin_path or os.devnull, "rb") as stdin:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "vllm_deploy", *argv], stdin=stdin, stdout=out, stderr=err,
                                cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode not in (0, 1):
            sys.stderr.write(err.read().decode(errors="replace"))
        return wall, proc.returncode, usage.ru_maxrss // 1024, out.read().decode(errors="replace")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=50, help="size of each generated input, MiB (default 50)")
    ap.add_argument("--budget", type=float, default=2.0, help="seconds each run should stay under (default 2)")
    ap.add_argument("--keep", help="write the inputs here and keep them (default: a scratch directory)")
    args = ap.parse_args()

    failure = open(os.path.join(FAILURES, FIXTURE + ".log"), "rb").read()
    expected = yaml.safe_load(open(os.path.join(FAILURES, FIXTURE + ".meta.yaml")))["category"]
    table = open(os.path.join(NVIDIA_SMI, TABLE + ".txt"), "rb").read()
    expected_gpus = yaml.safe_load(open(os.path.join(NVIDIA_SMI, TABLE + ".meta.yaml")))["gpu_count"]
    size = args.mib << 20

    workdir = args.keep or tempfile.mkdtemp(prefix="bench-inputs-")
    os.makedirs(workdir, exist_ok=True)
    inputs = {
        "log, many lines": os.path.join(workdir, "many-lines.log"),
        "log, one line": os.path.join(workdir, "one-line.log"),
        "log, no line break": os.path.join(workdir, "no-break.log"),
        "nvidia-smi, one line": os.path.join(workdir, "nvidia-smi.txt"),
    }
    _fill(inputs["log, many lines"], size, INFO_LINE, failure)
    _fill(inputs["log, one line"], size, b"x" * 4096, b"\n" + failure)
    # The whole input one line (a log shipped as one string field): the classifier gets a 1 MiB line.
    _fill(inputs["log, no line break"], size, b"x" * 4096, b" " + failure.replace(b"\n", b" "))
    _fill(inputs["nvidia-smi, one line"], size, b"y" * 4096, b"\n" + table)

    print(f"inputs: {args.mib} MiB each in {workdir}; budget {args.budget:.1f} s per run "
          f"(python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")
    print(f"{'command':10} {'input':22} {'via':6} {'wall s':>7} {'peak MiB':>9}  answer")
    wrong = 0
    for label, path in inputs.items():
        command = "gpus" if label.startswith("nvidia-smi") else "diagnose"
        for via in ("file", "stdin"):
            argv = [command, path if via == "file" else "-", "--json"]
            wall, rc, peak, out = _run(argv, path if via == "stdin" else None)
            try:
                answer = json.loads(out)
            except ValueError:
                answer = {}
            if command == "diagnose":
                got = answer.get("category")
                ok = got == expected
                shown = f"{got} (meta: {expected})"
            else:
                got = answer.get("gpu_count")
                ok = got == expected_gpus
                shown = f"{got} GPUs (meta: {expected_gpus})"
            wrong += not ok
            flag = "" if wall < args.budget else "  OVER BUDGET"
            print(f"{command:10} {label:22} {via:6} {wall:7.2f} {peak:9d}  {shown}{'' if ok else '  WRONG'}{flag}")
    if not args.keep:
        for path in inputs.values():
            os.unlink(path)
        os.rmdir(workdir)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
