"""`vllm-deploy` command line: one subcommand per module of this package, each exposing add_arguments(parser)
and run(args)."""

from __future__ import annotations

import argparse
import importlib
import sys

from vllm_deploy.inputs import InputError

# subcommand -> module; each module defines HELP (one line), add_arguments(parser) and run(args) -> int.
COMMANDS = {
    "plan": "vllm_deploy.cli.plan",
    "diagnose": "vllm_deploy.cli.diagnose",
    "gpus": "vllm_deploy.cli.gpus",
    "bench-report": "vllm_deploy.cli.bench",
    "weights": "vllm_deploy.cli.weights",
}


class UsageError(Exception):
    """Bad input: printed as one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-deploy",
        description="Plan, check and diagnose vLLM deployments (the logic behind the Ansible roles).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except (UsageError, InputError) as exc:
        print(f"vllm-deploy {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
