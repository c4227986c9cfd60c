#!/usr/bin/env python3
"""Benchmark the memory planner against real vLLM startup logs (a benchmark, not a test: always exits 0).

Usage: python scripts/bench_planner.py [LOGS_YAML] [--models DIR]
Default LOGS_YAML: tests/fixtures/calibration/vllm-startup-logs.yaml in the repository; model configs come
from models/<org>__<name>/config.json beside it.

For every point it prints predicted vs logged available KV GiB, KV tokens and concurrency with the
error in %, then the shares within +-2% and +-5%, failures predicted / total, and the same for the
naive budget of the seed posts (weights + 2 GiB overhead; KV = 2*layers*kv_heads*head_dim*bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from vllm_deploy.planner import GiB, ModelInfo, PlanError, plan  # noqa: E402


def _err(pred, logged):
    if pred is None or logged in (None, 0):
        return None
    return (pred - logged) / abs(logged) * 100


def naive(model: ModelInfo, point: dict) -> dict:
    """The seed posts' budget: util*total - weights - 2 GiB; KV bytes without GQA split subtleties."""
    tp = point.get("tensor_parallel_size") or 1
    util = point.get("gpu_memory_utilization") or 0.9
    total = point["gpu_total_memory_gib"]
    kv_gib = util * total - model.weights_bytes / GiB / tp - 2.0
    kv_bytes = 1 if str(point.get("kv_cache_dtype", "auto")).startswith("fp8") else 2
    per_token = 2 * model.num_layers * max(1, model.num_kv_heads // tp) * model.head_dim * kv_bytes
    tokens = int(kv_gib * GiB // per_token) if kv_gib > 0 else 0
    mml = point.get("max_model_len") or model.max_model_len_limit
    return {"available_kv_gib": kv_gib, "kv_cache_tokens": tokens,
            "max_concurrency": tokens / mml if mml else 0, "fits": kv_gib > 0 and tokens >= mml}


def run_point(point: dict, models_dir: str):
    cfg_dir = os.path.join(models_dir, point["model"].replace("/", "__"))
    with open(os.path.join(cfg_dir, "config.json"), encoding="utf-8") as fh:
        config = json.load(fh)
    model = ModelInfo.from_config(config)
    tp = point.get("tensor_parallel_size") or 1
    pp = point.get("pipeline_parallel_size") or 1
    version = str(point.get("vllm_version") or "").split()[0] or None
    gpu = str(point.get("gpu") or "")
    try:
        p = plan(model, gpu_total_gib=point["gpu_total_memory_gib"], num_gpus=tp * pp, tensor_parallel_size=tp,
                 pipeline_parallel_size=pp, gpu_memory_utilization=point.get("gpu_memory_utilization"),
                 max_model_len=point.get("max_model_len"), dtype=point.get("dtype") or "auto",
                 kv_cache_dtype=point.get("kv_cache_dtype") or "auto", max_num_seqs=point.get("max_num_seqs"),
                 max_num_batched_tokens=point.get("max_num_batched_tokens"),
                 cpu_offload_gb=point.get("cpu_offload_gb") or 0, vllm_version=version, gpu_name=gpu,
                 enforce_eager=bool(point.get("enforce_eager")))
        pred = p.to_dict()
    except PlanError as exc:
        pred = {"fits": False, "reasons": [str(exc)], "available_kv_gib": None, "kv_cache_tokens": None,
                "max_concurrency": None}
    return model, pred, naive(model, point)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="?", default=os.path.join(ROOT, "tests", "fixtures", "calibration",
                                                            "vllm-startup-logs.yaml"))
    ap.add_argument("--models", default=None, help="directory of <org>__<name>/config.json (default: beside logs)")
    args = ap.parse_args(argv)
    models_dir = args.models or os.path.join(os.path.dirname(os.path.abspath(args.logs)), "models")
    with open(args.logs, encoding="utf-8") as fh:
        points = yaml.safe_load(fh)["points"]

    stats = {"planner": {"kv": [], "tok": []}, "naive": {"kv": [], "tok": []}}
    failures = {"planner": 0, "naive": 0}
    n_fail = 0
    false_alarms = {"planner": 0, "naive": 0}
    print(f"{'point':58} {'avail KV GiB pred/log (err%)':>32} {'tokens pred/log (err%)':>34} {'conc pred/log':>16}"
          f" {'naive KV err%':>13}")
    for point in points:
        model, pred, nv = run_point(point, models_dir)
        logged = point.get("parsed") or {}
        ok = point.get("outcome") == "ok"
        if not ok:
            n_fail += 1
            failures["planner"] += 0 if pred["fits"] else 1
            failures["naive"] += 0 if nv["fits"] else 1
        else:
            false_alarms["planner"] += 0 if pred["fits"] else 1
            false_alarms["naive"] += 0 if nv["fits"] else 1
        lk, lt, lc = logged.get("available_kv_gib"), logged.get("kv_tokens"), logged.get("max_concurrency")
        ek, et = _err(pred.get("available_kv_gib"), lk), _err(pred.get("kv_cache_tokens"), lt)
        nek, net = _err(nv["available_kv_gib"], lk), _err(nv["kv_cache_tokens"], lt)
        if ok and ek is not None:
            stats["planner"]["kv"].append(ek)
            stats["naive"]["kv"].append(nek)
        if ok and et is not None:
            stats["planner"]["tok"].append(et)
            stats["naive"]["tok"].append(net)

        def f(v, d=2):
            return "-" if v is None else (f"{v:,.{d}f}" if isinstance(v, float) else f"{v:,}")
        print(f"{point['id'][:58]:58} {f(pred.get('available_kv_gib')):>9}/{f(lk):>7} ({f(ek, 1):>6}) "
              f"{f(pred.get('kv_cache_tokens')):>11}/{f(lt):>10} ({f(et, 1):>6}) "
              f"{f(pred.get('max_concurrency')):>7}/{f(lc):>7} {f(nek, 1):>13}")
        if not ok or not pred["fits"]:
            print(f"{'':4}outcome={point.get('outcome')}  predicted fits={pred['fits']}: "
                  f"{(pred.get('reasons') or ['-'])[0][:150]}")

    print()
    for name in ("planner", "naive"):
        s = stats[name]
        for key, label in (("kv", "available KV GiB"), ("tok", "KV tokens")):
            errs = s[key]
            n = len(errs)
            if not n:
                continue
            w2 = sum(abs(e) <= 2 for e in errs)
            w5 = sum(abs(e) <= 5 for e in errs)
            mean_abs = sum(abs(e) for e in errs) / n
            print(f"{name:8} {label:17}: within +-2%: {w2}/{n} ({w2 / n:.0%})  within +-5%: {w5}/{n} "
                  f"({w5 / n:.0%})  mean |err| {mean_abs:.1f}%")
        print(f"{name:8} failures predicted: {failures[name]}/{n_fail}; ok points predicted not to fit: "
              f"{false_alarms[name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
