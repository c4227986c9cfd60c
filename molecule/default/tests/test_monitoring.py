"""What an operator checks on the fleet's Prometheus (role vllm_monitoring on node1, issue 13).

Every target up; vLLM's own metrics with our labels; node2's GPU collector equal to the real RTX 4090
capture its nvidia-smi stand-in replays; the plan record of each instance holding the KV-cache
figure that start's log printed; a stopped instance's down alert firing and clearing; the driver
and foreign-process alerts firing where node2's capture says they must and nowhere else.
Tests run in file order: the stop/start test comes last so the plan test reads the deploy's start.
"""

import json
import re
import time

import yaml
from helpers import PROJECT, ansible_playbook, converge_log, node

NODE1, NODE2 = "mol-default-node1", "mol-default-node2"
# What the scenario's inventory declares: host → (instance, port, gpus label).
INSTANCES = {NODE1: ("tiny", 8000, "none"), NODE2: ("pinned", 8100, "1")}
STANDIN = PROJECT / "tests" / "fixtures" / "nvidia-smi-standin" / "data" / "06-rtx4090-x4-table.json"
DOWN_FOR_S = 10  # vllm_monitoring_down_for in molecule.yml


def prom(path, **params):
    """GET the Prometheus API on node1 (from node1 itself: stdlib Python, the node has no curl)."""
    script = ("import json,sys,urllib.parse,urllib.request\n"
              "q=urllib.parse.urlencode(json.loads(sys.argv[2]))\n"
              "print(urllib.request.urlopen('http://127.0.0.1:9090'+sys.argv[1]+('?'+q if q else ''),timeout=30).read().decode())")
    answer = json.loads(node(NODE1).check_output("python3 -c %s %s %s", script, path, json.dumps(params)))
    assert answer["status"] == "success", answer
    return answer["data"]


def query(expr):
    return prom("/api/v1/query", query=expr)["result"]


def alerts(name):
    return [a for a in prom("/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == name]


def wait_for(what, check, timeout):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(2)


def test_every_target_is_up():
    expected = {("prometheus", NODE1, "127.0.0.1:9090"),
                ("vllm", NODE1, "tiny"), ("vllm", NODE2, "pinned"),
                ("node", NODE1, "127.0.0.1:9100")}

    def targets():
        active = prom("/api/v1/targets")["activeTargets"]
        return {(t["labels"]["job"], t["labels"]["host"], t["labels"]["instance"]): t["health"] for t in active}

    found = wait_for("every target scraped at least once", lambda: (t := targets()) and "unknown" not in t.values() and t, 60)
    assert expected <= set(found), found
    # node2's node-exporter is scraped at node2's own address, not on node1's loopback.
    node2_exporter = [k for k in found if k[0] == "node" and k[1] == NODE2]
    assert len(node2_exporter) == 1 and not node2_exporter[0][2].startswith("127."), found
    assert set(found) == expected | set(node2_exporter), found
    assert set(found.values()) == {"up"}, found
    assert {(r["metric"]["job"], r["metric"]["host"]): r["value"][1] for r in query('up{host!=""}')} == {
        (job, host): "1" for job, host, _ in found}


def test_vllm_metrics_carry_host_instance_model_and_gpus():
    for host, (instance, _port, gpus) in INSTANCES.items():
        for metric in ("vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:num_requests_waiting"):
            series = query(f'{metric}{{host="{host}"}}')
            assert len(series) == 1, (metric, host, series)
            labels = series[0]["metric"]
            assert (labels["instance"], labels["model"], labels["gpus"], labels["model_name"]) == \
                (instance, "tiny-llama", gpus, "tiny-llama"), labels
    # The completions the default tests sent are counted per instance.
    assert {r["metric"]["instance"] for r in query("vllm:request_success_total > 0")} == {"tiny", "pinned"}


def test_the_gpu_collector_reports_the_replayed_capture():
    capture = json.loads(STANDIN.read_text())
    by_gpu = {}
    for metric in ("vllm_gpu_memory_used_bytes", "vllm_gpu_memory_total_bytes", "vllm_gpu_temperature_celsius",
                   "vllm_gpu_power_draw_watts", "vllm_gpu_utilization_ratio"):
        for r in wait_for(metric, lambda m=metric: query(f'{m}{{host="{NODE2}"}}'), 60):
            by_gpu.setdefault(r["metric"]["gpu"], {})[metric] = float(r["value"][1])
    assert {g: len(v) for g, v in by_gpu.items()} == {str(g["index"]): 5 for g in capture["gpus"]}
    for g in capture["gpus"]:
        got = by_gpu[str(g["index"])]
        assert got["vllm_gpu_memory_used_bytes"] == g["memory_used_mib"] * 1024 * 1024
        assert got["vllm_gpu_memory_total_bytes"] == g["memory_total_mib"] * 1024 * 1024
        assert got["vllm_gpu_temperature_celsius"] == g["temperature_c"]
        assert got["vllm_gpu_power_draw_watts"] == g["power_draw_w"]
        assert got["vllm_gpu_utilization_ratio"] == g["utilization_gpu_pct"] / 100
    driver = query(f'vllm_gpu_driver_info{{host="{NODE2}"}}')
    assert [r["metric"]["driver_version"] for r in driver] == [capture["driver_version"]]
    foreign = {r["metric"]["gpu"]: int(r["value"][1]) for r in query(f'vllm_gpu_processes{{host="{NODE2}",owner="foreign"}}')}
    assert foreign == {str(g["index"]): sum(p["gpu"] == g["index"] for p in capture["processes"]) for g in capture["gpus"]}
    # node1 has no GPU: no collector there.
    assert query(f'vllm_gpu_memory_total_bytes{{host="{NODE1}"}}') == []
    # The seeds' CSV log, one row per GPU per run, with the capture's memory figures.
    rows = node(NODE2).file("/var/log/vllm-deploy/nvidia-smi.csv").content_string.splitlines()
    header = [c.strip() for c in rows[0].split(",")]
    last = [dict(zip(header, (c.strip() for c in r.split(",")))) for r in rows[-4:]]
    assert [(r["index"], int(r["memory.used"])) for r in last] == [(str(g["index"]), g["memory_used_mib"]) for g in capture["gpus"]]


def test_each_instance_has_a_plan_record_whose_actual_figure_is_the_one_its_start_logged():
    for host, (instance, _port, _gpus) in INSTANCES.items():
        n = node(host)
        record = json.loads(n.file(f"/var/lib/vllm/reports/{instance}-plan.json").content_string)
        journal = n.check_output(f"journalctl -u vllm-{instance} --no-pager -o cat --since @{record['log_since']}")
        logged = re.findall(r"KV cache size: ([\d,]+) tokens, Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x", journal)
        assert logged, journal[-2000:]
        tokens, concurrency = logged[0]  # the first start after the deploy's restart
        assert record["actual"] == {"kv_cache_tokens": int(tokens.replace(",", "")), "max_concurrency": float(concurrency)}
        assert record["planned"]["kv_cache_tokens"] > 0 and record["planned"]["max_concurrency"] > 0
        off = abs(record["actual"]["kv_cache_tokens"] - record["planned"]["kv_cache_tokens"]) / record["planned"]["kv_cache_tokens"]
        assert record["within_tolerance"] is (off <= 0.05)
        series = {r["metric"]["kind"]: float(r["value"][1])
                  for r in query(f'vllm_deploy_plan_kv_tokens{{host="{host}",vllm_instance="{instance}"}}')}
        assert series == {"planned": record["planned"]["kv_cache_tokens"], "actual": record["actual"]["kv_cache_tokens"]}
    # The converge printed it too.
    assert re.search(r"tiny: KV-cache tokens planned \d+, vLLM reported \d+", converge_log(joined=True))


def test_the_driver_and_foreign_process_alerts_fire_only_where_the_capture_says():
    capture = json.loads(STANDIN.read_text())
    driver = wait_for("VllmDriverNotPinned firing", lambda: [a for a in alerts("VllmDriverNotPinned") if a["state"] == "firing"], 60)
    assert [(a["labels"]["host"], a["labels"]["driver_version"]) for a in driver] == [(NODE2, capture["driver_version"])]
    # Every GPU of the capture runs foreign processes; only GPU 1 is pinned (instance "pinned").
    foreign = wait_for("VllmForeignProcessOnPinnedGpu firing",
                       lambda: [a for a in alerts("VllmForeignProcessOnPinnedGpu") if a["state"] == "firing"], 60)
    assert [(a["labels"]["host"], a["labels"]["gpu"]) for a in foreign] == [(NODE2, "1")]


DASHBOARD = PROJECT / "roles" / "vllm_monitoring" / "files" / "grafana" / "vllm-fleet.json"


def test_every_dashboard_panel_query_returns_data():
    """The shipped Grafana dashboard's PromQL, each query evaluated on this Prometheus: none may be empty."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = [(p["title"], t["expr"]) for p in panels for t in p["targets"]]
    assert len(exprs) >= 10
    empty = [(title, expr) for title, expr in exprs if not query(expr)]
    assert empty == [], empty


def test_grafana_provisioning_on_node2_names_the_dashboard_and_node1s_prometheus():
    """What a Grafana on node2 (group grafana) reads at start: the repository's dashboard, a provider
    pointing at it, and a data source whose URL is node1's Prometheus as node2 can reach it."""
    host = node(NODE2)
    installed = host.file("/var/lib/grafana/dashboards/vllm-deploy/vllm-fleet.json")
    assert installed.mode == 0o644 and json.loads(installed.content_string) == json.loads(DASHBOARD.read_text())
    provider = yaml.safe_load(host.file("/etc/grafana/provisioning/dashboards/vllm-deploy.yaml").content_string)
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards/vllm-deploy"
    source = yaml.safe_load(host.file("/etc/grafana/provisioning/datasources/vllm-deploy.yaml").content_string)
    url = source["datasources"][0]["url"]
    assert source["datasources"][0]["type"] == "prometheus" and url.endswith(":9090"), url
    reached = host.check_output("python3 -c %s %s", "import sys,urllib.request;"
                                "print(urllib.request.urlopen(sys.argv[1]+'/-/ready',timeout=10).status)", url)
    assert reached == "200", (url, reached)


def test_status_yml_prints_one_row_per_instance():
    run = ansible_playbook(playbook="status.yml", timeout=300)
    assert run.returncode == 0, run.stdout[-3000:]
    capture = json.loads(STANDIN.read_text())
    gpu1 = next(g for g in capture["gpus"] if g["index"] == 1)
    for host, (instance, port, _gpus) in INSTANCES.items():
        record = json.loads(node(host).file(f"/var/lib/vllm/reports/{instance}-plan.json").content_string)
        row = next(line.split() for line in run.stdout.splitlines() if line.split()[:2] == [host, instance])
        assert row[2:7] == ["tiny-llama", str(port), "active", "(running)", "-"], row
        assert row[7] == f"{record['planned']['kv_cache_tokens']}/{record['actual']['kv_cache_tokens']}", row
        if host == NODE2:  # the GPU it is pinned to, as the replayed capture reports it
            assert row[8:12] == ["GPU", "1:", f"{gpu1['memory_used_mib']}/{gpu1['memory_total_mib']}", "MiB"], row
        else:
            assert row[8] == "CPU", row


def test_a_stopped_instance_fires_its_down_alert_and_it_clears_when_back():
    n2 = node(NODE2)

    def down(state):
        return [a for a in alerts("VllmInstanceDown") if a["state"] == state]

    assert down("firing") == [] and down("pending") == []
    n2.check_output("systemctl stop vllm-pinned")
    stopped = time.monotonic()
    try:
        firing = wait_for("VllmInstanceDown firing for pinned", lambda: down("firing"), DOWN_FOR_S + 60)
        assert time.monotonic() - stopped >= DOWN_FOR_S  # not before its for: window
        assert [(a["labels"]["host"], a["labels"]["instance"]) for a in firing] == [(NODE2, "pinned")]
    finally:
        n2.check_output("systemctl start vllm-pinned")
    wait_for("VllmInstanceDown cleared", lambda: down("firing") == [] and down("pending") == [] and query(
        f'up{{job="vllm",host="{NODE2}"}} == 1'), 600)
