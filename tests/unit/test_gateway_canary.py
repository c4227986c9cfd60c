"""The canary verdict of vllm-gateway-ctl (roles/vllm_gateway/files): HAProxy's `show stat` counters
before and after the canary window, each canary against the other servers of its backend.

The CSV header is HAProxy 2.6's `show stat` header (the fields the ctl reads are named as HAProxy
names them: scur, stot, hrsp_*, eresp, srv_abrt, rtime, ttime); the molecule gateway scenario runs
the same command against the real HAProxy."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json

import pytest

from conftest import REPO

HEADER = ("pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,"
          "weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,type,rate,"
          "rate_lim,rate_max,check_status,check_code,check_duration,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,"
          "hrsp_other,hanafail,req_rate,req_rate_max,req_tot,cli_abrt,srv_abrt,comp_in,comp_out,comp_byp,comp_rsp,"
          "lastsess,last_chk,last_agt,qtime,ctime,rtime,ttime").split(",")


def load_ctl():
    path = REPO / "roles" / "vllm_gateway" / "files" / "vllm-gateway-ctl"
    loader = importlib.machinery.SourceFileLoader("vllm_gateway_ctl", str(path))
    spec = importlib.util.spec_from_loader("vllm_gateway_ctl", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


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
