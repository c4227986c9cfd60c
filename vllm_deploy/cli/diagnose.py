"""`vllm-deploy diagnose [LOGFILE|-] [--json]`: name the root cause of a vLLM failure from its log."""

from __future__ import annotations

import json

from vllm_deploy.diagnose import diagnose
from vllm_deploy.inputs import read_input

HELP = "Diagnose a failed vLLM server from its log (journal, container log or excerpt; stdin by default)."


def add_arguments(parser) -> None:
    parser.add_argument("logfile", nargs="?", default="-",
                        help="log file to read, or - for stdin (default); only its last MiB is read")
    parser.add_argument("--json", action="store_true", help="print the diagnosis as JSON")


def run(args) -> int:
    result = diagnose(read_input(args.logfile))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(f"category:   {result.category}")
        print(f"summary:    {result.summary}")
        if result.figures:
            print("figures:")
            for key, value in result.figures.items():
                print(f"  {key}: {value}")
        print(f"phase:      {result.phase} (confidence: {result.phase_confidence}; the log reached: "
              f"{result.phase_reached})")
        if result.phase_evidence:
            print(f"  from:     {result.phase_evidence.splitlines()[0]}")
        print(f"fix:        {result.fix}")
        print(f"deploy:     {result.action}: {result.action_text}")
        if result.evidence:
            print(f"evidence:   {result.evidence.splitlines()[0]}")
        print(f"confidence: {result.confidence}")
    return 1 if result.category == "unknown" else 0
