#!/usr/bin/env python3
"""A bounded load generator for an OpenAI-compatible endpoint (standard library only).

    python3 scripts/loadgen.py --url http://HOST:8080 --key KEY --models tiny-a,tiny-b \
        --requests 200 --concurrency 4 [--pause 0.1] [--stop-file PATH] [--json]
    python3 scripts/loadgen.py --url https://HOST:8080 --cacert inventory/prod/.vllm-gateway-ca/ca.crt ...

Sends at most --requests completions from --concurrency clients, streaming and non-streaming
alternately, and counts the *complete* responses: a stream that ends with `data: [DONE]`, a
non-streaming answer with a finish_reason — and in both cases exactly --max-tokens tokens by the
engine's own usage count (ignore_eos makes every whole answer that long). Nothing is retried: a
request that fails is counted as failed. Every request has its own timeout,
so a run is bounded in count and in time; --pause spaces each client's requests, so a long run
leaves the machine's cores to the engines it is testing. --stop-file ends it early once that file exists
(clients take no new request; those in flight finish and are counted). Prints the counts (one JSON
line with --json) and exits 0 only when every request sent was complete.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import ssl
import sys
import threading
import time
import urllib.parse
from collections import Counter


def one_request(url: urllib.parse.SplitResult, key: str, model: str, stream: bool, max_tokens: int, timeout: float,
                context: ssl.SSLContext | None = None) -> str:
    """'complete' or the reason it was not (status, cut-off stream, short answer, error). No retry:
    a request that fails once is counted as failed. An https URL goes through TLS verified with `context`."""
    body = json.dumps({"model": model, "prompt": "The gateway test says", "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True, "stream": stream,
                       **({"stream_options": {"include_usage": True}} if stream else {})})
    if url.scheme == "https":
        conn = http.client.HTTPSConnection(url.hostname, url.port or 443, timeout=timeout,
                                           context=context or ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", body=body,
                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            return f"http_{resp.status}"
        if not stream:
            answer = json.loads(resp.read())
            if not (answer.get("choices") or [{}])[0].get("finish_reason"):
                return "no_finish_reason"
            return "complete" if (answer.get("usage") or {}).get("completion_tokens") == max_tokens else "short_answer"
        done, finished, tokens = False, False, None
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if line == b"data: [DONE]":
                done = True
            elif line.startswith(b"data: "):
                event = json.loads(line[6:])
                finished = finished or any(c.get("finish_reason") for c in event.get("choices") or [])
                if event.get("usage"):
                    tokens = event["usage"].get("completion_tokens")
        if not done:
            return "stream_cut"
        # ignore_eos: a whole answer is exactly max_tokens long, as the engine's own usage chunk says
        return "complete" if finished and tokens == max_tokens else "short_answer"
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return f"error_{type(exc).__name__}"
    finally:
        conn.close()


def run(args: argparse.Namespace) -> dict:
    url = urllib.parse.urlsplit(args.url)
    # One context for every client: the gateway's CA (--cacert), or the system's trust store.
    context = ssl.create_default_context(cafile=args.cacert or None) if url.scheme == "https" else None
    models = [m for m in args.models.split(",") if m]
    lock = threading.Lock()
    next_index = [0]
    outcomes: Counter = Counter()
    kinds: Counter = Counter()
    in_flight = [0]

    def take() -> int | None:
        with lock:
            if next_index[0] >= args.requests or (args.stop_file and os.path.exists(args.stop_file)):
                return None
            next_index[0] += 1
            in_flight[0] += 1
            return next_index[0] - 1

    def client() -> None:
        while (i := take()) is not None:
            stream = i % 2 == 0
            outcome = one_request(url, args.key, models[(i // 2) % len(models)], stream, args.max_tokens, args.timeout,
                                  context)
            with lock:
                outcomes[outcome] += 1
                kinds["stream" if stream else "non_stream"] += 1
                in_flight[0] -= 1
            if args.progress_file:
                with lock, open(args.progress_file, "w", encoding="utf-8") as fh:
                    fh.write(json.dumps({"sent": next_index[0], "in_flight": in_flight[0], **outcomes}) + "\n")
            if args.pause:
                time.sleep(args.pause)

    start = time.monotonic()
    threads = [threading.Thread(target=client, daemon=True) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sent = next_index[0]
    return {"sent": sent, "complete": outcomes["complete"], "failed": sent - outcomes["complete"],
            "stream": kinds["stream"], "non_stream": kinds["non_stream"], "concurrency": args.concurrency,
            "outcomes": dict(outcomes), "seconds": round(time.monotonic() - start, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True, help="the endpoint, e.g. http://10.0.0.1:8080 or https://10.0.0.1:8080")
    ap.add_argument("--cacert", default="", help="with an https URL: the CA that signed the gateway's certificate "
                    "(the role's generated ca.crt); default the system's trust store")
    ap.add_argument("--key", required=True)
    ap.add_argument("--models", required=True, help="comma-separated served names, used in turn")
    ap.add_argument("--requests", type=int, default=200, help="the most requests sent")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=120, help="seconds per request")
    ap.add_argument("--pause", type=float, default=0.0, help="seconds each client waits between two requests")
    ap.add_argument("--stop-file", default="", help="stop taking new requests once this file exists")
    ap.add_argument("--progress-file", default="", help="rewrite running counts here after each request")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.concurrency < 1 or args.requests < 1:
        ap.error("--requests and --concurrency must be at least 1")
    if urllib.parse.urlsplit(args.url).scheme not in ("http", "https"):
        ap.error("--url must start with http:// or https://")
    if args.cacert and urllib.parse.urlsplit(args.url).scheme != "https":
        ap.error("--cacert needs an https:// URL")
    if args.cacert and not os.path.isfile(args.cacert):
        ap.error(f"--cacert {args.cacert}: no such file")
    result = run(args)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"loadgen: {result['sent']} requests sent ({result['stream']} streaming, {result['non_stream']} not) by "
              f"{result['concurrency']} clients in {result['seconds']}s: {result['complete']} complete, {result['failed']} failed "
              f"{result['outcomes']}")
    return 0 if result["failed"] == 0 and result["sent"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
