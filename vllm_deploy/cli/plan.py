"""`vllm-deploy plan`: predict vLLM's memory budget, KV cache and verdict for a model on a GPU."""

from __future__ import annotations

import argparse
import json
import re

from vllm_deploy.cli import UsageError
from vllm_deploy.planner import INPUT_BOUNDS, ModelInfo, PlanError, number_problem, plan, plan_cpu
from vllm_deploy.presets import gpu_total_gib, lookup_gpu

HELP = ("Plan vLLM's GPU memory for a model: weights, activations, KV cache tokens, concurrency, verdict "
        "(exit 0 fits, 1 does not fit, 2 bad input).")


# option dest -> the planner parameter whose bounds it takes (planner.INPUT_BOUNDS).
_NUMERIC_OPTIONS = {
    "gpu_memory_gib": "gpu_total_gib", "num_gpus": "num_gpus", "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size", "gpu_memory_utilization": "gpu_memory_utilization",
    "max_model_len": "max_model_len", "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens", "cpu_offload_gb": "cpu_offload_gb",
    "free_memory_gib": "free_memory_gib", "cpu_kv_space_gib": "kv_cache_space_gib",
}
_INTEGER_RE = re.compile(r"\+?[0-9]+")
# X.Y[.Z] with an optional PEP 440 pre/dev/post tag and local part (0.19.0, 0.10.2rc1, 0.32.0+cpu).
_VERSION_RE = re.compile(r"v?[0-9]+\.[0-9]+(\.[0-9]+)?((a|b|rc|\.?dev|\.?post)[0-9]*)*(\+[0-9A-Za-z.]+)?")


def _parse_number(text: str, integer: bool) -> int | float | None:
    """The option's text as a number, or None when it is not one. float() alone would take "nan",
    "inf" and "1e3" for a count; counts are plain decimal integers."""
    text = text.strip()
    if integer:
        return int(text) if _INTEGER_RE.fullmatch(text) else None
    try:
        return float(text)
    except ValueError:
        return None


def _check_numbers(args: argparse.Namespace) -> None:
    """Numbers arrive as text and are checked here against the planner's own bounds, so every bad value
    (not a number, NaN, infinite, fractional count, negative, absurd) is one UsageError line (exit 2)."""
    for dest, param in _NUMERIC_OPTIONS.items():
        text = getattr(args, dest, None)
        if text is None or isinstance(text, (int, float)):
            continue
        flag = "--" + dest.replace("_", "-")
        bounds = INPUT_BOUNDS[param]
        value = _parse_number(text, bool(bounds.get("integer")))
        if value is None:
            kind = "a whole number" if bounds.get("integer") else "a number"
            raise UsageError(f"{flag} {text!r}: must be {kind}")
        problem = number_problem(value, minimum=bounds.get("minimum", 0), allow_minimum=bounds.get("allow_zero", False),
                                 integer=bool(bounds.get("integer")), maximum=bounds.get("maximum"))
        if problem:
            hint = " (a fraction of total GPU memory, in (0, 1])" if dest == "gpu_memory_utilization" else ""
            raise UsageError(f"{flag} {text}: {problem}{hint}")
        setattr(args, dest, value)
    nodes = getattr(args, "nodes", None)
    if nodes is not None:
        value = _parse_number(str(nodes), True)
        if value is None or value < 1:
            raise UsageError(f"--nodes {nodes!r}: must be a whole number >= 1")
        args.nodes = value
        if args.cpu_kv_space_gib is not None:
            raise UsageError("--nodes plans GPUs across hosts; the CPU plan (--cpu-kv-space-gib) is per host")
        total = args.tensor_parallel_size * args.pipeline_parallel_size
        if total % value:
            raise UsageError(f"--nodes {value}: TP {args.tensor_parallel_size} x PP {args.pipeline_parallel_size} = {total} GPUs "
                             f"do not split evenly over {value} hosts (every host gives the same number of GPUs)")
    if args.vllm_version is not None and not _VERSION_RE.fullmatch(args.vllm_version.strip()):
        raise UsageError(f"--vllm-version {args.vllm_version!r}: not a vLLM version; give X.Y.Z, e.g. 0.19.0")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "Exit status: 0 when the plan fits, 1 when it does not, 2 on bad input."
    parser.add_argument("--model", required=True, help="model directory holding config.json (+ safetensors)")
    parser.add_argument("--gpu-memory-gib",
                        help="GPU total memory as torch reports it, GiB (e.g. 79.19 for an H100 80GB)")
    parser.add_argument("--gpu", help="GPU name as nvidia-smi prints it; alone, resolves the memory from gpus.yaml")
    parser.add_argument("--num-gpus", default=None, help="GPUs given to the instance")
    parser.add_argument("--tensor-parallel-size", "-tp", default="1")
    parser.add_argument("--pipeline-parallel-size", "-pp", default="1")
    parser.add_argument("--nodes", default=None,
                        help="hosts one multi-node instance spans (TP inside a host, PP across hosts; TP x PP GPUs in all)")
    parser.add_argument("--gpu-memory-utilization", default=None,
                        help="fraction of total GPU memory (default: vLLM's, 0.9 or 0.92 from v0.21)")
    parser.add_argument("--max-model-len", default=None)
    parser.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"])
    parser.add_argument("--kv-cache-dtype", default="auto",
                        choices=["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16"])
    parser.add_argument("--max-num-seqs", default=None)
    parser.add_argument("--max-num-batched-tokens", default=None)
    parser.add_argument("--cpu-offload-gb", default="0")
    parser.add_argument("--free-memory-gib", default=None,
                        help="free GPU memory at startup (checked against utilization x total)")
    parser.add_argument("--vllm-version", default=None, help="vLLM version X.Y.Z (default: the pinned one)")
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--cpu-kv-space-gib", default=None,
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
            if args.free_memory_gib is not None and args.free_memory_gib > total:
                raise UsageError(f"--free-memory-gib {args.free_memory_gib:g}: more than the GPU's total memory "
                                 f"({total:g} GiB)")
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
    text = None if args.json else _table(d)
    if getattr(args, "nodes", None):
        total = args.tensor_parallel_size * args.pipeline_parallel_size
        d["nodes"] = {"hosts": args.nodes, "gpus_per_host": total // args.nodes, "gpus": total}
        text = text and (f"one instance across {args.nodes} hosts x {total // args.nodes} GPUs = {total} GPUs "
                         f"(TP {args.tensor_parallel_size} x PP {args.pipeline_parallel_size}; per-GPU figures below)\n" + text)
    print(json.dumps(d, indent=2) if args.json else text)
    return 0 if p.fits else 1


