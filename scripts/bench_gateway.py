#!/usr/bin/env python3
"""The gateway's overhead against going straight to an engine, on the staging fleet (make bench-gateway).

In one run, alternating the two paths request by request so both see the same load on the machine:
  * one-token completions: median and p99 latency, direct vs through the gateway, and their ratio, once
    over kept-alive connections (one per path, as the OpenAI SDK and most HTTP clients hold them: the goal,
    at most 1.10x at the median, is judged here) and once with a new connection per request (with
    vllm_gateway_tls on, each of those pays a full TLS handshake: the price of a client that never reuses);
  * streaming: tokens per second of a long generation (ignore_eos), direct vs gateway, and the ratio.
Direct = each staging node's engine in turn on its published port with the engine key, plain HTTP; gateway =
the gateway's published port with the staging key (https with the role's CA when staging turns TLS on, as it
does), which adds the engine key and picks an instance on either node. The gateway requests are paced under
the staging key's rate_per_s. Prints figures only: there is no timed assertion.

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


def load_staging(inv: Path, prog: str = "bench-gateway") -> dict:
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())["all"]["children"]
    nodes = hosts["gpu-nodes"]["hosts"]
    gateway_host = next(iter(hosts["vllm_gateway"]["hosts"]))
    group = yaml.safe_load((inv / "group_vars/gpu-nodes/vllm.yml").read_text())
    engine_key = yaml.safe_load((inv / "group_vars/gpu-nodes/vault.yml").read_text())["vault_vllm_api_key"]
    gw_vault = yaml.safe_load((inv / "group_vars/vllm_gateway/vault.yml").read_text())
    gw_vars = yaml.safe_load((inv / "group_vars/vllm_gateway/gateway.yml").read_text()) or {}
    # With vllm_gateway_tls the gateway speaks https, its certificate signed by the role's CA (default
    # directory; its certificate names 127.0.0.1, the address the published port is reached at).
    cacert = str(inv / ".vllm-gateway-ca" / "ca.crt") if gw_vars.get("vllm_gateway_tls") else ""
    if cacert and not Path(cacert).is_file():
        raise SystemExit(f"{prog}: no staging fleet: the gateway's CA {cacert} is not there (staging serves https) "
                         "— run `make staging` first, which makes it")
    tls = ssl.create_default_context(cafile=cacert) if cacert else None
    key = next(k for k in gw_vars.get("vllm_gateway_keys", []) if k.get("name") == "staging")
    return {
        "cacert": cacert,
        # the staging key's requests per second (0: none): the bench stays under it
        "rate_per_s": float(key.get("rate_per_s") or 0),
        "model": next(iter(group["vllm_models"].values()))["served_name"],
        # the gateway balances over every node's engine: going direct takes them in turn, so both paths
        # meet the same engines
        "direct": [("127.0.0.1", hv["staging_published_port"], engine_key, None) for hv in nodes.values()],
        "gateway": [("127.0.0.1", nodes[gateway_host]["staging_gateway_published_port"], gw_vault["vault_gateway_key_staging"], tls)],
    }


class Client:
    """Requests to one path's targets (taken in turn), over connections kept alive (one per target) or a new
    connection per request."""

    def __init__(self, targets, keepalive: bool):
        self.targets, self.keepalive, self.conns = targets, keepalive, {}

    def _connection(self, target):
        host, port, _key, tls = target
        conn = self.conns.get(target) if self.keepalive else None
        if conn is None:
            conn = (http.client.HTTPSConnection(host, port, timeout=300, context=tls) if tls
                    else http.client.HTTPConnection(host, port, timeout=300))
            if self.keepalive:
                self.conns[target] = conn
        return conn

    def completion(self, i, model, max_tokens, stream):
        """(seconds, tokens) of request number i; raises on anything but a complete answer."""
        target = self.targets[i % len(self.targets)]
        host, port, key, _tls = target
        body = json.dumps({"model": model, "prompt": "Benchmark the gateway", "max_tokens": max_tokens,
                           "temperature": 0, "ignore_eos": True, "stream": stream})
        start = time.perf_counter()
        conn = self._connection(target)
        try:
            conn.request("POST", "/v1/completions", body=body,
                         headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            self.conns.pop(target, None)
            raise
        finally:
            if not self.keepalive:
                conn.close()
        if resp.status != 200:
            raise RuntimeError(f"{host}:{port} answered {resp.status}: {data[:200]!r}")
        if not stream:
            tokens = json.loads(data)["usage"]["completion_tokens"]
        else:
            lines = data.split(b"\n")
            if b"data: [DONE]" not in lines:
                raise RuntimeError(f"{host}:{port}: the stream ended without [DONE]")
            tokens = sum(1 for line in lines if line.startswith(b"data: ") and line != b"data: [DONE]")
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
    styles = {"kept-alive connections": True, "a new connection per request": False}
    clients = {(style, p): Client(cfg[p], keepalive) for style, keepalive in styles.items() for p in paths}
    for client in clients.values():  # warm both paths (connections, the engine's first-request compiles)
        for i in range(6):
            client.completion(i, cfg["model"], 1, False)
    # one gateway request per pair: pairs start no closer than 1.25/rate_per_s apart, under the key's limit
    spacing = 1.25 / cfg["rate_per_s"] if cfg["rate_per_s"] else 0.0
    latency = {key: [] for key in clients}
    for i in range(args.requests):
        for style in styles:
            started = time.monotonic()
            for path in (paths if i % 2 == 0 else paths[::-1]):
                latency[(style, path)].append(clients[(style, path)].completion(i, cfg["model"], 1, False)[0])
            time.sleep(max(0.0, spacing - (time.monotonic() - started)))
    rate = {p: [] for p in paths}
    for i in range(args.streams):
        for path in (paths if i % 2 == 0 else paths[::-1]):
            seconds, tokens = clients[("kept-alive connections", path)].completion(i, cfg["model"], args.tokens, True)
            rate[path].append(tokens / seconds)

    scheme = "https" if cfg["cacert"] else "plain HTTP"
    print(f"\nGateway overhead on staging (model {cfg['model']}; gateway over {scheme}, engines direct over plain HTTP; "
          f"{args.requests} one-token completions per path and connection style, {args.streams} streams of {args.tokens} "
          f"tokens per path, alternating):")
    print(f"  {'':58s} {'direct':>10s} {'gateway':>10s} {'ratio':>8s}")
    ratios = {}
    for style in styles:
        med = {p: statistics.median(latency[(style, p)]) * 1000 for p in paths}
        tail = {p: p99(latency[(style, p)]) * 1000 for p in paths}
        ratios[style] = med["gateway"] / med["direct"]
        for label, fig in (("median", med), ("p99", tail)):
            name = f"one-token latency, {label}, {style}"
            print(f"  {name:58s} {fig['direct']:8.1f}ms {fig['gateway']:8.1f}ms {fig['gateway'] / fig['direct']:7.3f}x")
    tps = {p: statistics.median(rate[p]) for p in paths}
    print(f"  {'streaming tokens/s, median (kept-alive)':58s} {tps['direct']:10.1f} {tps['gateway']:10.1f} "
          f"{tps['gateway'] / tps['direct']:7.3f}x")
    kept = ratios["kept-alive connections"]
    print(f"  median latency ratio over kept-alive connections {kept:.3f}x {'meets' if kept <= 1.10 else 'misses'} "
          f"the goal of <= 1.10x; a new connection per request: {ratios['a new connection per request']:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
