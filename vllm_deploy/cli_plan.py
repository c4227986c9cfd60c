"""`vllm-deploy plan`: predict vLLM's memory budget, KV cache and verdict for a model on a GPU."""

from __future__ import annotations

import argparse
import json

from vllm_deploy.cli import UsageError
from vllm_deploy.planner import ModelInfo, PlanError, plan, plan_cpu
from vllm_deploy.presets import gpu_total_gib, lookup_gpu

HELP = ("Plan vLLM's GPU memory for a model: weights, activations, KV cache tokens, concurrency, verdict "
        "(exit 0 fits, 1 does not fit, 2 bad input).")


_POSITIVE = ("gpu_memory_gib", "num_gpus", "nodes", "tensor_parallel_size", "pipeline_parallel_size", "max_model_len",
             "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "cpu_kv_space_gib")
_NON_NEGATIVE = ("cpu_offload_gb", "free_memory_gib")


def _check_numbers(args: argparse.Namespace) -> None:
    """Numbers are validated here, not by argparse types, so a bad value is one UsageError line (exit 2)."""
    for name in _POSITIVE + _NON_NEGATIVE:
        value = getattr(args, name, None)
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if value < 0 or (value == 0 and name in _POSITIVE):
            raise UsageError(f"{flag} {value}: must be {'> 0' if name in _POSITIVE else '>= 0'}")
    nodes = getattr(args, "nodes", None)
    if nodes is not None:
        if args.cpu_kv_space_gib is not None:
            raise UsageError("--nodes plans GPUs across hosts; the CPU plan (--cpu-kv-space-gib) is per host")
        total = args.tensor_parallel_size * args.pipeline_parallel_size
        if total % nodes:
            raise UsageError(f"--nodes {nodes}: TP {args.tensor_parallel_size} x PP {args.pipeline_parallel_size} = {total} GPUs "
                             f"do not split evenly over {nodes} hosts (every host gives the same number of GPUs)")
    if args.gpu_memory_utilization is not None and args.gpu_memory_utilization > 1:
        raise UsageError(f"--gpu-memory-utilization {args.gpu_memory_utilization}: a fraction of total memory, "
                         "in (0, 1]")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "Exit status: 0 when the plan fits, 1 when it does not, 2 on bad input."
    parser.add_argument("--model", required=True, help="model directory holding config.json (+ safetensors)")
    parser.add_argument("--gpu-memory-gib", type=float,
                        help="GPU total memory as torch reports it, GiB (e.g. 79.19 for an H100 80GB)")
    parser.add_argument("--gpu", help="GPU name as nvidia-smi prints it; alone, resolves the memory from gpus.yaml")
    parser.add_argument("--num-gpus", type=int, default=None, help="GPUs given to the instance")
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=None,
                        help="hosts one multi-node instance spans (TP inside a host, PP across hosts; TP x PP GPUs in all)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=None,
                        help="fraction of total GPU memory (default: vLLM's, 0.9 or 0.92 from v0.21)")
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"])
    parser.add_argument("--kv-cache-dtype", default="auto",
                        choices=["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16"])
    parser.add_argument("--max-num-seqs", type=int, default=None)
    parser.add_argument("--max-num-batched-tokens", type=int, default=None)
    parser.add_argument("--cpu-offload-gb", type=float, default=0.0)
    parser.add_argument("--free-memory-gib", type=float, default=None,
                        help="free GPU memory at startup (checked against utilization x total)")
    parser.add_argument("--vllm-version", default=None, help="vLLM version X.Y.Z (default: the pinned one)")
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--cpu-kv-space-gib", type=float, default=None,
                        help="plan vLLM's CPU backend with VLLM_CPU_KVCACHE_SPACE of this many GiB")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def _table(p: dict) -> str:
    def g(v):
        return f"{v:8.2f} GiB"
    lines = []
    if p["device"] == "cpu":
        lines.append(f"CPU backend, KV pool {g(p['available_kv_gib'])}, block size {p['block_size']}")
    else:
        lines += [
            f"budget   {p['gpu_memory_utilization']} x {p['gpu_total_gib']:.2f} GiB = {g(p['requested_gib'])}"
            f"   (vLLM {p['vllm_version']}, TP {p['tensor_parallel_size']}, PP {p['pipeline_parallel_size']})",
            f"  weights      {g(p['weights_gib'])}  ({p['weights_source']})",
            f"  activation   {g(p['activation_gib'])}  ({p['max_num_batched_tokens']} batched tokens, "
            f"{p['max_num_seqs']} seqs)",
            f"  non-torch    {g(p['non_torch_gib'])}",
            f"  cuda graphs  {g(p['cuda_graph_gib'])}  "
            f"({'subtracted' if p['cuda_graph_subtracted'] else 'outside the budget'})",
            f"  KV cache     {g(p['available_kv_gib'])}",
        ]
    lines += [
        f"KV       {p['kv_bytes_per_token']:,} B/token, {p['num_blocks']:,} blocks -> {p['kv_cache_tokens']:,} tokens",
        f"requests {p['max_concurrency']:.2f}x at max_model_len {p['max_model_len']:,}; largest that fits: "
        f"{p['max_model_len_fit']:,} (model limit {p['model_max_model_len']:,})",
        f"verdict  {'FITS' if p['fits'] else 'DOES NOT FIT'}",
    ]
    for r in p["reasons"]:
        lines.append(f"  reason:  {r}")
    for w in p["warnings"]:
        lines.append(f"  warning: {w}")
    for s in p["suggestions"]:
        change = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in s["change"].items())
        figures = (f"{s.get('kv_cache_tokens', 0):,} tokens, {s.get('max_concurrency', 0):.2f}x"
                   if "kv_cache_tokens" in s else "")
        lines.append(f"  try:     {change:34} {'fits' if s.get('fits') else 'no fit':7} {figures}  ({s['why']})")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    _check_numbers(args)
    try:
        model = ModelInfo.from_dir(args.model)
        if args.cpu_kv_space_gib is not None:
            p = plan_cpu(model, kv_cache_space_gib=args.cpu_kv_space_gib, max_model_len=args.max_model_len,
                         dtype=args.dtype, max_num_seqs=args.max_num_seqs,
                         max_num_batched_tokens=args.max_num_batched_tokens, vllm_version=args.vllm_version)
        else:
            total = args.gpu_memory_gib
            entry = lookup_gpu(args.gpu) if args.gpu else None
            if total is None:
                if not args.gpu:
                    raise UsageError("give --gpu-memory-gib (torch total GiB) or --gpu NAME from gpus.yaml")
                if entry is None:
                    raise UsageError(f"--gpu {args.gpu!r} is not in gpus.yaml; give --gpu-memory-gib instead")
                total, _ = gpu_total_gib({"name": args.gpu})
            num_gpus = args.num_gpus or args.tensor_parallel_size * args.pipeline_parallel_size
            p = plan(model, gpu_total_gib=total, num_gpus=num_gpus, tensor_parallel_size=args.tensor_parallel_size,
                     pipeline_parallel_size=args.pipeline_parallel_size,
                     gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=args.max_model_len,
                     dtype=args.dtype, kv_cache_dtype=args.kv_cache_dtype, max_num_seqs=args.max_num_seqs,
                     max_num_batched_tokens=args.max_num_batched_tokens, cpu_offload_gb=args.cpu_offload_gb,
                     free_memory_gib=args.free_memory_gib, vllm_version=args.vllm_version,
                     gpu_name=(entry or {}).get("name") or args.gpu, enforce_eager=args.enforce_eager)
    except PlanError as exc:
        raise UsageError(str(exc)) from None
    d = p.to_dict()
    if getattr(args, "nodes", None):
        total = args.tensor_parallel_size * args.pipeline_parallel_size
        d["nodes"] = {"hosts": args.nodes, "gpus_per_host": total // args.nodes, "gpus": total}
    text = _table(d)
    if d.get("nodes"):
        n = d["nodes"]
        text = (f"one instance across {n['hosts']} hosts x {n['gpus_per_host']} GPUs = {n['gpus']} GPUs "
                f"(TP {args.tensor_parallel_size} x PP {args.pipeline_parallel_size}; per-GPU figures below)\n") + text
    print(json.dumps(d, indent=2) if args.json else text)
    return 0 if p.fits else 1


