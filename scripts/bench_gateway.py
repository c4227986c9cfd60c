#!/usr/bin/env python3
"""The gateway's overhead against going straight to an engine, on the staging fleet (make bench-gateway).

In one run, alternating the two paths request by request so both see the same load on the machine:
  * one-token completions: median and p99 latency, direct vs through the gateway, and their ratio
    (goal: at most 1.10x at the median);
  * streaming: tokens per second of a long generation (ignore_eos), direct vs gateway, and the ratio.
Direct = each staging node's engine in turn on its published port with the engine key; gateway = the
gateway's published port with a gateway key (it adds the engine key and picks an instance on either node).
Prints figures only: there is no timed assertion.

    python3 scripts/bench_gateway.py [inventory/staging] [--requests 200] [--streams 10] [--tokens 128]
"""

from __future__ import annotations

import argparse
import http.client
import json
import ssl
import statistics
import sys
import time
from pathlib import Path

import yaml


def load_staging(inv: Path) -> dict:
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())["all"]["children"]
    nodes = hosts["gpu-nodes"]["hosts"]
    gateway_host = next(iter(hosts["vllm_gateway"]["hosts"]))
    group = yaml.safe_load((inv / "group_vars/gpu-nodes/vllm.yml").read_text())
    engine_key = yaml.safe_load((inv / "group_vars/gpu-nodes/vault.yml").read_text())["vault_vllm_api_key"]
    gw_vault = yaml.safe_load((inv / "group_vars/vllm_gateway/vault.yml").read_text())
    gw_vars = yaml.safe_load((inv / "group_vars/vllm_gateway/gateway.yml").read_text()) or {}
    # With vllm_gateway_tls the gateway speaks https, its certificate signed by the role's CA (default
    # directory; its certificate names 127.0.0.1, the address the published port is reached at).
    tls = ssl.create_default_context(cafile=str(inv / ".vllm-gateway-ca" / "ca.crt")) if gw_vars.get("vllm_gateway_tls") else None
    return {
        "model": next(iter(group["vllm_models"].values()))["served_name"],
        # the gateway balances over every node's engine: going direct takes them in turn, so both paths
        # meet the same engines
        "direct": [("127.0.0.1", hv["staging_published_port"], engine_key, None) for hv in nodes.values()],
        "gateway": [("127.0.0.1", nodes[gateway_host]["staging_gateway_published_port"], gw_vault["vault_gateway_key_staging"], tls)],
    }


def completion(targets, i, model, max_tokens, stream):
    """(seconds, tokens) of request number i (targets taken in turn); raises on anything but a complete answer."""
    host, port, key, tls = targets[i % len(targets)]
    body = json.dumps({"model": model, "prompt": "Benchmark the gateway", "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True, "stream": stream})
    start = time.perf_counter()
    conn = (http.client.HTTPSConnection(host, port, timeout=300, context=tls) if tls
            else http.client.HTTPConnection(host, port, timeout=300))
    try:
        conn.request("POST", "/v1/completions", body=body,
                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"{host}:{port} answered {resp.status}: {resp.read()[:200]!r}")
        if not stream:
            tokens = json.loads(resp.read())["usage"]["completion_tokens"]
        else:
            tokens, done = 0, False
            for line in resp:
                if line.startswith(b"data: [DONE]"):
                    done = True
                elif line.startswith(b"data: "):
                    tokens += 1
            if not done:
                raise RuntimeError(f"{host}:{port}: the stream ended without [DONE]")
    finally:
        conn.close()
    return time.perf_counter() - start, tokens


def p99(values):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inventory", nargs="?", default="inventory/staging")
    ap.add_argument("--requests", type=int, default=200, help="one-token completions per path")
    ap.add_argument("--streams", type=int, default=10, help="streamed generations per path")
    ap.add_argument("--tokens", type=int, default=128, help="tokens per streamed generation")
    args = ap.parse_args(argv)
    cfg = load_staging(Path(args.inventory))
    paths = ("direct", "gateway")
    for path in paths:  # warm both paths (connections, the engine's first-request compiles)
        for i in range(6):
            completion(cfg[path], i, cfg["model"], 1, False)
    latency = {p: [] for p in paths}
    for i in range(args.requests):
        for path in (paths if i % 2 == 0 else paths[::-1]):
            latency[path].append(completion(cfg[path], i, cfg["model"], 1, False)[0])
    rate = {p: [] for p in paths}
    for i in range(args.streams):
        for path in (paths if i % 2 == 0 else paths[::-1]):
            seconds, tokens = completion(cfg[path], i, cfg["model"], args.tokens, True)
            rate[path].append(tokens / seconds)

    med = {p: statistics.median(latency[p]) * 1000 for p in paths}
    tail = {p: p99(latency[p]) * 1000 for p in paths}
    tps = {p: statistics.median(rate[p]) for p in paths}
    print(f"\nGateway overhead on staging (model {cfg['model']}; {args.requests} one-token completions and "
          f"{args.streams} streams of {args.tokens} tokens per path, alternating):")
    print(f"  {'':28s} {'direct':>10s} {'gateway':>10s} {'ratio':>8s}")
    print(f"  {'one-token latency, median':28s} {med['direct']:8.1f}ms {med['gateway']:8.1f}ms {med['gateway'] / med['direct']:7.3f}x")
    print(f"  {'one-token latency, p99':28s} {tail['direct']:8.1f}ms {tail['gateway']:8.1f}ms {tail['gateway'] / tail['direct']:7.3f}x")
    print(f"  {'streaming tokens/s, median':28s} {tps['direct']:10.1f} {tps['gateway']:10.1f} {tps['gateway'] / tps['direct']:7.3f}x")
    verdict = "meets" if med["gateway"] / med["direct"] <= 1.10 else "misses"
    print(f"  median latency ratio {med['gateway'] / med['direct']:.3f}x {verdict} the goal of <= 1.10x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
