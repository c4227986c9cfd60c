"""`vllm-deploy gpus [FILE|-] [--list FILE] [--json]`: nvidia-smi output (CSV or table) → the gpu_facts structure."""

from __future__ import annotations

import json

from vllm_deploy.inputs import read_input
from vllm_deploy.nvidia_smi import gpu_facts

HELP = "Parse nvidia-smi output (--query-gpu CSV or the plain table) into the facts gpu_facts sets."


def add_arguments(parser) -> None:
    parser.add_argument("file", nargs="?", default="-",
                        help="saved nvidia-smi output, or - for stdin (default); only its last MiB is read")
    parser.add_argument("--list", metavar="FILE", dest="list_file",
                        help="saved `nvidia-smi -L` of the same node: lists its MIG devices (their memory is read "
                             "from the plain table, so FILE or --table must be that table)")
    parser.add_argument("--table", metavar="FILE", help="saved plain `nvidia-smi` table, when FILE is the CSV query")
    parser.add_argument("--json", action="store_true", help="print the facts as JSON")


def run(args) -> int:
    text = read_input(args.file).decode("utf-8", errors="replace")
    listing = read_input(args.list_file).decode("utf-8", errors="replace") if args.list_file else None
    table = read_input(args.table).decode("utf-8", errors="replace") if args.table else text
    # A saved failure has no exit status; rc 1 lets the failure texts be recognised, rc 0 otherwise.
    facts = gpu_facts(text, "", 0, True, listing, table)
    if facts["error"] and facts["error"]["category"] == "unparseable_output":
        failure = gpu_facts(text, "", 1, present=True)
        if failure["error"]["category"] != "unknown":
            facts = failure
    if args.json:
        print(json.dumps(facts, indent=2))
    else:
        print(f"profile: {facts['profile']}  gpus: {facts['gpu_count']}  driver: {facts['driver_version']}")
        for g in facts["gpus"]:
            mig = "  MIG mode" if g["index"] in facts["mig_gpus"] else ""
            print(f"  GPU {g['index']}: {g['name']}  {g['memory_used_mib']}/{g['memory_total_mib']} MiB used"
                  f"  uuid={g['uuid']}{mig}")
        for d in facts["mig_devices"]:
            print(f"    MIG {d['profile']} (GPU {d['gpu_index']} GI {d['gpu_instance']} CI {d['compute_instance']}): "
                  f"{d['memory_used_mib']}/{d['memory_total_mib']} MiB used  uuid={d['uuid']}")
        if facts["error"]:
            print(f"error: {facts['error']['category']}: {facts['error']['message']}")
            print(f"fix:   {facts['error']['fix']}")
    return 1 if facts["error"] else 0
