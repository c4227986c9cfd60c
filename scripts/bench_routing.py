#!/usr/bin/env python3
"""Routing for the prefix cache on the staging fleet: least_conn, session and prefix modes (make bench-routing).

First staging is reshaped for the bench by a deploy with inventory/staging/bench-routing.yml as extra vars (a
model big enough that prefill dominates time to first token on a staging core, max_model_len 2048, and a KV cache
per instance that holds part of the workload's documents, as a GPU replica holds part of a fleet's prefixes; that
file says why each value), and at the end put back by a deploy without it (`--fleet-vars ''`: the fleet as it is).

Three workloads that look like real use, many users (chat completions, streamed, with the body's `user`) on long
shared documents (system prompts): conversations (a handful of documents, several turns per user, each turn
carrying the conversation so far: the issue's shape), shared prompts (the same documents, one question per user,
as many requests: what a RAG or assistant front end sends) and many documents (shared prompts on a corpus whose
documents together make --many-times, 2, one instance's KV cache: more than a replica holds, what a fleet of three
or more holds between them, as a GPU fleet's prefixes outgrow one replica's cache). The modes alternate within one
run: for each round, each mode in turn (the order rotates between rounds) is set by re-rendering the gateway only
(`ansible-playbook deploy.yml -l gpu-nodes:vllm_gateway --tags plan,gateway -e vllm_gateway_routing=...`: the plan
is read again, engines are not restarted, HAProxy reloads seamlessly), then each workload runs with fresh text (new
documents and questions per pass, so one mode never finds what an earlier pass cached). Per workload and mode it
prints:

  * prefix-cache hit rate: the engines' vllm:prefix_cache_hits_total / _queries_total (tokens), read from each
    engine's /metrics before and after its passes;
  * time to first token p50 and p99 (client side: the first streamed chunk with text), output tokens per second
    (the usage of each answer over the pass's wall time);
  * the largest share of requests any instance took (HAProxy's own per-server response counters, which leave
    out its health checks);
  * the ratio of each to least_conn, and the issue's goals (hit rate >= 1.8x, TTFT p50 <= 0.6x, throughput
    >= 1.3x).

    python3 scripts/bench_routing.py [inventory/staging] [--fleet-vars FILE] [--rounds 2] [--documents 16] [--users 48]
                                     [--turns 3] [--many-times 2] [--workload NAME ...]

The pure parts (workload, metrics parsing, statistics, the report) are unit-tested
(tests/unit/test_bench_routing.py); the figures need `make staging` and are not asserted.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

from vllm_deploy.monitoring import PREFIX_CACHE_COUNTERS as CACHE_COUNTERS, counter_sums  # noqa: E402

MODES = ("least_conn", "session", "prefix")
# The goals, as ratios to least_conn: (figure, at least / at most, value).
GOALS = (("hit_rate", ">=", 1.8), ("ttft_p50_ms", "<=", 0.6), ("tokens_per_s", ">=", 1.3))
# Words the generated text is made of: plain lower-case words tokenize to a few tokens each in any BPE.
VOCABULARY = ("report revenue customer contract clause section policy engine latency budget quarter region "
              "service network storage schedule invoice supplier warranty incident review audit summary").split()


# --- pure parts (tests/unit/test_bench_routing.py) -----------------------------------------------------------

def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(words))


def make_workload(seed: int, documents: int, users: int, turns: int, doc_words: int, question_words: int = 8) -> list[dict]:
    """One pass: `users` conversations of `turns` questions, user i on document i % documents (several users
    share each document). Deterministic for a seed; another seed gives other documents and questions."""
    if min(documents, users, turns, doc_words) < 1:
        raise ValueError("documents, users, turns and doc_words must be at least 1")
    rng = random.Random(seed)
    docs = [f"Document {seed}-{d}. Answer from it. " + text(rng, doc_words) for d in range(documents)]
    return [{"user": f"bench-{seed}-{u}", "document": docs[u % documents],
             "questions": [f"Question {t + 1}: " + text(rng, question_words) + "?" for t in range(turns)]}
            for u in range(users)]


def doc_words_for(max_model_len: int, turns: int, max_tokens: int, tokens_per_word: float,
                  question_tokens: int = 24, template_tokens: int = 64) -> int:
    """Words of a document such that the last turn (document, every question and answer, the chat template)
    still fits max_model_len; ValueError when nothing is left for a document."""
    budget = max_model_len - turns * (question_tokens + max_tokens) - template_tokens
    words = int(budget / max(tokens_per_word, 0.1) * 0.9)
    if words < 16:
        raise ValueError(f"max_model_len {max_model_len} leaves no room for a shared document with {turns} turns of "
                         f"{max_tokens} tokens — lower --turns / --max-tokens, or serve a longer max_model_len")
    return words


def server_responses(exposition: str, backend: str) -> dict[str, float]:
    """HAProxy's exporter: responses each server of `backend` returned (haproxy_server_http_responses_total,
    every code), health checks excluded."""
    counts: dict[str, float] = {}
    for line in exposition.splitlines():
        if not line.startswith("haproxy_server_http_responses_total{"):
            continue
        labels = dict(part.split("=", 1) for part in line[line.index("{") + 1:line.rindex("}")].split(","))
        if labels.get("proxy", "").strip('"') == backend:
            server = labels["server"].strip('"')
            counts[server] = counts.get(server, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def cache_tokens(exposition: str) -> int:
    """Tokens one engine's KV cache holds (vllm:cache_config_info: num_gpu_blocks x block_size); 0 if not shown."""
    for line in exposition.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            labels = dict(part.split("=", 1) for part in line[line.index("{") + 1:line.rindex("}")].split(","))
            blocks, size = labels.get("num_gpu_blocks", '"0"').strip('"'), labels.get("block_size", '"0"').strip('"')
            return int(blocks) * int(size) if blocks.isdigit() and size.isdigit() else 0
    return 0


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def _delta(after: dict, before: dict) -> dict:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}


def summarize(records: list[dict], seconds: float, cache: tuple[dict, dict], served: tuple[dict, dict]) -> dict:
    """One mode's figures. records: [{"ttft": s or None, "tokens": n, "ok": bool}]; cache: the engines'
    counter_sums before and after (summed over engines); served: server_responses before and after."""
    ok = [r for r in records if r["ok"]]
    ttfts = [r["ttft"] * 1000 for r in ok if r["ttft"] is not None]
    dc = _delta(cache[1], cache[0])
    queries, hits = dc.get("vllm:prefix_cache_queries_total", 0.0), dc.get("vllm:prefix_cache_hits_total", 0.0)
    ds = _delta(served[1], served[0])
    total = sum(ds.values())
    return {
        "requests": len(records), "errors": len(records) - len(ok),
        "hit_rate": hits / queries if queries else 0.0,
        "ttft_p50_ms": percentile(ttfts, 50) if ttfts else float("nan"),
        "ttft_p99_ms": percentile(ttfts, 99) if ttfts else float("nan"),
        "tokens_per_s": sum(r["tokens"] for r in ok) / seconds if seconds > 0 else 0.0,
        "max_share": max(ds.values()) / total if total else 0.0,
        "shares": {s: round(n / total, 3) for s, n in sorted(ds.items())} if total else {},
    }


def merge(parts: list[dict]) -> dict:
    """A mode's passes (summarize's inputs, kept raw) into one set of inputs."""
    records = [r for p in parts for r in p["records"]]
    seconds = sum(p["seconds"] for p in parts)
    cache = ({}, {k: sum(_delta(p["cache"][1], p["cache"][0]).get(k, 0.0) for p in parts) for k in CACHE_COUNTERS})
    servers = {s for p in parts for s in p["served"][1]}
    served = ({}, {s: sum(_delta(p["served"][1], p["served"][0]).get(s, 0.0) for p in parts) for s in servers})
    return summarize(records, seconds, cache, served)


def report(stats: dict[str, dict]) -> str:
    """The table: a row per figure, a column per mode, and each mode's ratio to least_conn; then the goals."""
    rows = [("prefix-cache hit rate", "hit_rate", "{:.1%}"), ("TTFT p50 (ms)", "ttft_p50_ms", "{:.0f}"),
            ("TTFT p99 (ms)", "ttft_p99_ms", "{:.0f}"), ("output tokens/s", "tokens_per_s", "{:.1f}"),
            ("largest instance share", "max_share", "{:.1%}"), ("requests (errors)", None, None)]
    modes = [m for m in MODES if m in stats]
    base = stats.get("least_conn")
    head = f"  {'':24s}" + "".join(f"{m:>14s}" for m in modes) + "".join(f"{m + '/lc':>14s}" for m in modes if m != "least_conn")
    lines = [head]
    for label, key, fmt in rows:
        if key is None:
            cells = "".join(f"{stats[m]['requests']:>9d} ({stats[m]['errors']})".rjust(14) for m in modes)
            lines.append(f"  {label:24s}{cells}")
            continue
        cells = "".join(fmt.format(stats[m][key]).rjust(14) for m in modes)
        ratios = "".join(ratio(stats[m][key], base[key]).rjust(14) for m in modes if m != "least_conn") if base else ""
        lines.append(f"  {label:24s}{cells}{ratios}")
    if base:
        for mode in (m for m in modes if m != "least_conn"):
            verdicts = []
            for key, op, goal in GOALS:
                value = stats[mode][key] / base[key] if base[key] else float("nan")
                met = value >= goal if op == ">=" else value <= goal
                verdicts.append(f"{key} {ratio(stats[mode][key], base[key])} ({'meets' if met else 'misses'} {op} {goal}x)")
            lines.append(f"  {mode}: " + ", ".join(verdicts))
    return "\n".join(lines)


def ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "-"


# --- the staging fleet --------------------------------------------------------------------------------------

def load_fleet(inv: Path) -> dict:
    from bench_gateway import load_staging
    from vllm_deploy import gateway

    staging = load_staging(inv, "bench-routing")
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())["all"]["children"]
    return {**staging, "backend": gateway.backend_name(staging["model"]), "nodes": list(hosts["gpu-nodes"]["hosts"]),
            "gateway_host": next(iter(hosts["vllm_gateway"]["hosts"]))}


def request(target, method, path, body=None, timeout=600):
    host, port, key, tls = target
    conn = (http.client.HTTPSConnection(host, port, timeout=timeout, context=tls) if tls
            else http.client.HTTPConnection(host, port, timeout=timeout))
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    return conn, conn.getresponse()


def fetch(target, method, path, body=None) -> str:
    conn, resp = request(target, method, path, body, timeout=60)
    try:
        data = resp.read().decode()
        if resp.status != 200:
            raise RuntimeError(f"{target[0]}:{target[1]}{path} answered {resp.status}: {data[:200]}")
        return data
    finally:
        conn.close()


def check_up(fleet: dict) -> None:
    """One clear line and exit 2 when the staging fleet does not answer."""
    for name, target in [("the gateway", fleet["gateway"][0])] + [("an engine", t) for t in fleet["direct"]]:
        try:
            fetch(target, "GET", "/v1/models")
        except (OSError, RuntimeError, http.client.HTTPException) as exc:
            raise SystemExit(f"bench-routing: no staging fleet: {name} at {target[0]}:{target[1]} does not answer "
                             f"({exc}) — run `make staging` first (bench-routing needs its two nodes and the gateway)")


def engine_ports(inv: Path, fleet_vars: str) -> list[int]:
    """The ports of the instances each node serves (README's layout: the same instances on every node), from the
    bench's fleet vars when they set vllm_instances, else from the inventory's group_vars."""
    for source in ([Path(fleet_vars)] if fleet_vars else []) + [inv / "group_vars" / "gpu-nodes" / "vllm.yml"]:
        data = yaml.safe_load(source.read_text()) or {}
        if data.get("vllm_instances"):
            return [int(instance["port"]) for instance in data["vllm_instances"]]
    raise SystemExit(f"bench-routing: no vllm_instances in {fleet_vars or inv}")


def read_inside(node: str, url: str, key: str = "") -> str:
    """GET `url` from inside the container `node` (loopback ports the host cannot reach), the bearer key, if any,
    passed on stdin so that it never shows in a process list."""
    code = ("import sys, urllib.request; key = sys.stdin.read().strip(); print(urllib.request.urlopen(urllib.request."
            "Request(sys.argv[1], headers={'Authorization': 'Bearer ' + key} if key else {}), timeout=30).read().decode())")
    run = subprocess.run(["docker", "exec", "-i", node, "python3", "-c", code, url],
                         input=key, capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        raise RuntimeError(f"reading {url} on {node} failed: {run.stderr[-300:]}")
    return run.stdout


def engine_metrics(fleet: dict) -> list[str]:
    """Every instance's /metrics, read inside its node on loopback (only node1's first port is published)."""
    return [read_inside(node, f"http://127.0.0.1:{port}/metrics", fleet["direct"][0][2])
            for node in fleet["nodes"] for port in fleet["ports"]]


def engine_counters(fleet: dict) -> dict:
    total = dict.fromkeys(CACHE_COUNTERS, 0.0)
    for exposition in engine_metrics(fleet):
        for name, value in counter_sums(exposition).items():
            total[name] += value
    return total


def gateway_responses(fleet: dict) -> dict:
    """HAProxy's exporter, read inside the gateway node (its metrics port is not published)."""
    return server_responses(read_inside(fleet["gateway_host"], "http://127.0.0.1:8405/metrics"), fleet["backend"])


def deploy(inv: Path, fleet_vars: str, mode: str | None = None, model: str = "", tags: str = "") -> float:
    """deploy.yml on the staging fleet with `fleet_vars` (a file of extra vars, or '') and, with `mode`, the routing
    of `model` set to it; `tags` limits what runs (the mode switch: plan,gateway). Seconds taken."""
    extra = ["-e", f"@{Path(fleet_vars).resolve()}"] if fleet_vars else []
    with tempfile.TemporaryDirectory() as tmp:
        if mode is not None:
            path = Path(tmp) / "routing.json"
            path.write_text(json.dumps({"vllm_gateway_routing": {model: mode}}))
            extra += ["-e", f"@{path}"]
        start = time.monotonic()
        playbook = Path(sys.executable).parent / "ansible-playbook"
        run = subprocess.run([str(playbook) if playbook.exists() else "ansible-playbook", "-i", str(inv / "hosts.yml"), str(ROOT / "deploy.yml"),
                              "-l", "gpu-nodes:vllm_gateway", *(["--tags", tags] if tags else []), *extra],
                             capture_output=True, text=True, cwd=ROOT, env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")})
    if run.returncode != 0:
        what = f"the gateway redeploy for mode {mode}" if mode else f"the deploy{' with ' + fleet_vars if fleet_vars else ''}"
        raise SystemExit(f"bench-routing: {what} failed (rc {run.returncode}):\n{run.stdout[-3000:]}")
    return time.monotonic() - start


def converse(fleet: dict, model: str, user: dict, max_tokens: int) -> list[dict]:
    """One user's turns, in order, each streamed through the gateway: [{ttft, tokens, ok}]."""
    messages = [{"role": "system", "content": user["document"]}]
    out = []
    for question in user["questions"]:
        messages.append({"role": "user", "content": question})
        body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}, "user": user["user"]}
        start, ttft, tokens, answer = time.perf_counter(), None, 0, []
        try:
            conn, resp = request(fleet["gateway"][0], "POST", "/v1/chat/completions", body)
            try:
                if resp.status != 200:
                    raise RuntimeError(resp.read()[:200])
                for line in resp:
                    if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                        continue
                    chunk = json.loads(line[6:])
                    delta = "".join((c.get("delta") or {}).get("content") or "" for c in chunk.get("choices") or [])
                    if delta and ttft is None:
                        ttft = time.perf_counter() - start
                    answer.append(delta)
                    tokens = (chunk.get("usage") or {}).get("completion_tokens") or tokens
            finally:
                conn.close()
            out.append({"ttft": ttft, "tokens": tokens, "ok": True})
        except (OSError, RuntimeError, ValueError, http.client.HTTPException):
            out.append({"ttft": None, "tokens": 0, "ok": False})
        messages.append({"role": "assistant", "content": "".join(answer)})
    return out


def run_pass(fleet: dict, workload: list[dict], concurrency: int, max_tokens: int) -> dict:
    cache_before, served_before = engine_counters(fleet), gateway_responses(fleet)
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        records = [r for rs in pool.map(lambda u: converse(fleet, fleet["model"], u, max_tokens), workload) for r in rs]
    seconds = time.monotonic() - start
    return {"records": records, "seconds": seconds, "cache": (cache_before, engine_counters(fleet)),
            "served": (served_before, gateway_responses(fleet))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inventory", nargs="?", default="inventory/staging")
    ap.add_argument("--fleet-vars", default=None,
                    help="extra vars that reshape the fleet for the bench, undone at the end (default: the inventory's "
                         "bench-routing.yml; '' for the fleet as it is)")
    ap.add_argument("--rounds", type=int, default=2, help="passes per mode, the modes alternating")
    ap.add_argument("--documents", type=int, default=16, help="shared documents (system prompts) per pass")
    ap.add_argument("--users", type=int, default=48, help="conversations per pass (user i reads document i %% documents)")
    ap.add_argument("--turns", type=int, default=3, help="questions per conversation")
    ap.add_argument("--max-tokens", type=int, default=16, help="tokens per answer")
    ap.add_argument("--concurrency", type=int, default=4, help="conversations at once")
    ap.add_argument("--many-times", type=float, default=2.0,
                    help="the many-documents workload's documents together make this many times one instance's KV cache")
    ap.add_argument("--workload", action="append", choices=WORKLOADS,
                    help="run only this workload (repeatable; default: all three)")
    ap.add_argument("--deploy-tags", default="plan,gateway", help="what the mode switch runs of deploy.yml")
    args = ap.parse_args(argv)
    args.workload = args.workload or list(WORKLOADS)
    inv = Path(args.inventory)
    fleet_vars = str(inv / "bench-routing.yml") if args.fleet_vars is None and (inv / "bench-routing.yml").exists() else (args.fleet_vars or "")
    fleet = {**load_fleet(inv), "ports": engine_ports(inv, fleet_vars)}
    check_up(fleet)
    try:
        if fleet_vars:
            print(f"bench-routing: reshaping staging with {fleet_vars} (a rolling deploy) ...", flush=True)
            print(f"  deployed in {deploy(inv, fleet_vars):.0f} s", flush=True)
        for name, modes in measure(inv, fleet, fleet_vars, args).items():
            print(f"\nRouting for the prefix cache on staging, {name} (modes alternated; ratios to least_conn):")
            print(report({m: merge(p) for m, p in modes.items() if p}), flush=True)
    finally:
        if fleet_vars:
            print("bench-routing: putting staging back as its inventory has it (a rolling deploy) ...", flush=True)
            print(f"  deployed in {deploy(inv, ''):.0f} s", flush=True)
        else:
            deploy(inv, "", tags=args.deploy_tags)  # the inventory's own routing again
    return 0


def many_documents(cache_tokens: int, doc_tokens: float, times: float) -> int:
    """Documents that together make `times` one instance's KV cache (the many-documents workload): more than one
    replica holds, what a fleet of three or more holds between them."""
    if cache_tokens < 1 or doc_tokens <= 0 or times <= 0:
        raise ValueError("cache_tokens, doc_tokens and times must be positive")
    return max(1, math.ceil(times * cache_tokens / doc_tokens))


WORKLOADS = ("conversations", "shared prompts", "many documents")


def workloads(args, many: int = 0) -> dict[str, tuple[int, int, int]]:
    """The workloads of a pass, (documents, users, turns) each, the same number of requests: conversations
    (the issue's shape: several turns per user on a shared document), shared prompts (one question per user
    on a shared system prompt or document: what a RAG or assistant front end sends) and many documents (the
    same on `many` documents: a corpus larger than one replica's cache), those of args.workload."""
    shapes = {"conversations": (args.documents, args.users, args.turns),
              "shared prompts": (args.documents, args.users * args.turns, 1),
              "many documents": (many, args.users * args.turns, 1)}
    return {name: shape for name, shape in shapes.items() if name in args.workload}


def measure(inv: Path, fleet: dict, fleet_vars: str, args) -> dict[str, dict[str, list[dict]]]:
    """The modes alternated, `args.rounds` passes of each workload per mode: {workload: {mode: [pass]}}."""
    engine = fleet["direct"][0]
    max_model_len = json.loads(fetch(engine, "GET", "/v1/models"))["data"][0]["max_model_len"]
    sample = text(random.Random(0), 100)
    per_word = json.loads(fetch(engine, "POST", "/tokenize", {"model": fleet["model"], "prompt": sample}))["count"] / 100
    doc_words = doc_words_for(max_model_len, args.turns, args.max_tokens, per_word)
    cached = [cache_tokens(exposition) for exposition in engine_metrics(fleet)]
    many = many_documents(min(cached), doc_words * per_word, args.many_times) if "many documents" in args.workload else 0
    shapes = workloads(args, many)
    print(f"bench-routing: {fleet['model']} (max_model_len {max_model_len}) on {len(cached)} instances, KV cache "
          f"{' / '.join(str(c) for c in cached)} tokens each; documents of {doc_words} words (about "
          f"{doc_words * per_word:.0f} tokens each); workloads: "
          + "; ".join(f"{name}: {docs} documents ({docs * doc_words * per_word:.0f} tokens), {users} users x {turns} turns"
                      for name, (docs, users, turns) in shapes.items())
          + f"; {args.rounds} rounds", flush=True)
    parts: dict[str, dict[str, list[dict]]] = {name: {m: [] for m in MODES} for name in shapes}
    seed = 1000
    for rnd in range(args.rounds):
        for mode in MODES[rnd % 3:] + MODES[:rnd % 3]:
            seconds = deploy(inv, fleet_vars, mode, fleet["model"], args.deploy_tags)
            for name, (documents, users, turns) in shapes.items():
                seed += 1
                part = run_pass(fleet, make_workload(seed, documents, users, turns, doc_words), args.concurrency, args.max_tokens)
                parts[name][mode].append(part)
                one = merge([part])
                print(f"  round {rnd + 1} {mode:10s} {name:14s}: hit rate {one['hit_rate']:.1%}, TTFT p50 {one['ttft_p50_ms']:.0f} ms, "
                      f"{one['tokens_per_s']:.1f} tokens/s, shares {one['shares']} (gateway re-rendered in {seconds:.0f} s)", flush=True)
    return parts


if __name__ == "__main__":
    sys.exit(main())
