"""`vllm-deploy bench-report RUN_DIR [--json]`: plots and summary.md for a bench.yml or tune.yml run."""

from __future__ import annotations

import json

from vllm_deploy.bench import BenchError, write_report
from vllm_deploy.cli import UsageError

HELP = "Draw the plots and write summary.md for a bench.yml or tune.yml report directory (reports/bench-*, reports/tune-*)."


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", help="the run's report directory on the controller")
    parser.add_argument("--json", action="store_true", help="print the outcome (summary path, tune choice) as one JSON line")


def run(args) -> int:
    try:
        outcome = write_report(args.run_dir)
    except BenchError as exc:
        raise UsageError(str(exc)) from exc
    if args.json:
        print(json.dumps(outcome))
    else:
        print(f"summary: {outcome['summary']}")
        if outcome["kind"] == "tune":
            print(f"choice:  {outcome['reason']}")
    return 0
