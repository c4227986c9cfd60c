"""scripts/bench_weights.py (`make bench-weights`): its pure parts (nginx's log, the JSON callback's task
times, the ratios and the printed lines) and its one-line refusals. The benchmark itself is run by hand."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

SCRIPT = REPO / "scripts" / "bench_weights.py"
_spec = importlib.util.spec_from_file_location("bench_weights_script", SCRIPT)
bw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bw)


def test_the_store_log_is_read_per_request_and_odd_lines_are_skipped():
    text = ("/bench/r1/manifest.json 200 812\n"
            "/bench/r1/model-00001-of-00004.safetensors 200 268435456\n"
            "/bench/r1/model-00002-of-00004.safetensors 206 1048576\n"
            "a broken line\n"
            "/favicon.ico 404 153\n"
            "/bench/r1/config.json - 10\n")
    assert bw.parse_nginx_log(text) == [("/bench/r1/manifest.json", 200, 812),
                                        ("/bench/r1/model-00001-of-00004.safetensors", 200, 268435456),
                                        ("/bench/r1/model-00002-of-00004.safetensors", 206, 1048576),
                                        ("/favicon.ico", 404, 153)]


def test_served_bytes_count_the_models_files_not_its_manifest_nor_other_models():
    entries = [("/bench/r1/manifest.json", 200, 812), ("/bench/r1/manifest.json", 200, 812),
               ("/bench/r1/config.json", 200, 700), ("/bench/r1/model-00001-of-00004.safetensors?x=1", 206, 5000),
               ("/bench/r10/config.json", 200, 99), ("/other/r1/config.json", 200, 1)]
    assert bw.served_bytes(entries, "/bench/r1") == 5700
    assert bw.served_bytes(entries, "/bench/r1/") == 5700
    assert bw.served_bytes([], "/bench/r1") == 0


def _task(name, start, end=None, hosts=None):
    duration = {"start": start} | ({"end": end} if end else {})
    return {"task": {"name": name, "duration": duration}, "hosts": hosts or {}}


REPORT = {"plays": [{"play": {"name": "p", "duration": {"start": "2026-12-01T10:00:00.000000Z",
                                                         "end": "2026-12-01T10:00:30.500000Z"}},
                     "tasks": [
                         _task("vllm_model : Install rsync on the node (the copy from the fleet cache)",
                               "2026-12-01T10:00:01.000000Z", "2026-12-01T10:00:11.000000Z"),
                         _task("vllm_model : Create each fetched model's directory",
                               "2026-12-01T10:00:11.000000Z", "2026-12-01T10:00:11.500000Z"),
                         _task("vllm_model : Copy what each node lacks of each model from the fleet cache (rsync)",
                               "2026-12-01T10:00:11.500000Z", "2026-12-01T10:00:20.000000Z"),
                         _task("vllm_model : Check every copied file against the source's digests",
                               "2026-12-01T10:00:20.000000Z", "2026-12-01T10:00:23.250000Z",
                               {"n1": {"failed": True, "msg": "needed 5 bytes\n"}, "n2": {"changed": False}}),
                         _task("vllm_model : Summarise each fetched model on this node", "2026-12-01T10:00:23.250000Z"),
                     ]}]}


def test_task_times_come_from_the_json_callbacks_start_and_last_result():
    times = bw.task_times(REPORT)
    assert [round(s, 2) for _, s in times] == [10.0, 0.5, 8.5, 3.25, 0.0]
    assert bw.seconds_of(times, bw.DISTRIBUTION_TASKS) == pytest.approx(11.75)  # copy + check, not the directory
    assert bw.seconds_of(times, bw.APT_TASK) == pytest.approx(10.0)
    assert bw.seconds_of(times, "no such task") == 0
    assert bw.play_seconds(REPORT) == pytest.approx(30.5)


def test_failures_name_host_task_and_message():
    assert bw.failures(REPORT) == ["n1: vllm_model : Check every copied file against the source's digests: needed 5 bytes"]
    assert bw.failures({"plays": []}) == []


def test_ratios_and_verdicts():
    assert bw.ratio(3, 2) == 1.5 and bw.ratio(1, 0) is None
    assert bw.fmt_ratio(None) == "n/a" and bw.fmt_ratio(1.234) == "1.23"
    assert bw.verdict(1.0, 1.0, False) == "met" and bw.verdict(2.0, 1.0, False) == "missed"
    assert bw.verdict(1.2, 1.2, True) == "met" and bw.verdict(1.21, 1.2, True) == "missed"
    assert bw.verdict(None, 1.2, True) == "n/a"


FIGURES = {"model_bytes": 1 << 30, "served_bytes": 1 << 30, "served_first_bytes": 1 << 30, "fetch_s": 6.0,
           "apt_s": 10.0, "distribution_s": 12.0, "copy_s": 9.0, "check_s": 2.5, "plain_rsync_s": 10.0,
           "first_play_s": 40.0, "noop_s": 9.0, "noop_hash_s": 1.5, "noop_full_s": 18.0, "noop_full_hash_s": 10.5}


def test_the_report_prints_the_table_and_one_line_per_ratio_with_its_goal():
    text = bw.report_text(FIGURES)
    assert "1024.0 MiB" in text
    lines = {line.split("  ")[1].strip(): line for line in text.splitlines() if " / " in line}
    assert "1.00" in lines["bytes fetched from the source / model size"]
    assert "goal 1.0: met" in lines["bytes fetched from the source / model size"]
    assert "1.20" in lines["fleet distribution / plain rsync"] and "goal at most 1.2: met" in lines["fleet distribution / plain rsync"]
    assert "0.50" in lines["no-op re-run with the manifest / full re-hash"]
    assert "hashing tasks alone: 0.14" in lines["no-op re-run with the manifest / full re-hash"]


def test_a_missed_goal_and_a_zero_time_are_printed_not_raised():
    text = bw.report_text(FIGURES | {"served_bytes": 2 << 30, "plain_rsync_s": 0.0})
    assert "2.00   (goal 1.0: missed)" in text
    assert "n/a   (goal at most 1.2: n/a)" in text


def _run(env, *args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def test_without_docker_it_stops_in_one_line(tmp_path):
    # A PATH holding only python: no docker, no nginx, no ansible-playbook.
    (tmp_path / "python3").symlink_to(sys.executable)
    run = _run(dict(os.environ, PATH=str(tmp_path)), "--size-mib", "4")
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == ["bench-weights: docker is not installed (make prereqs)"]
    assert run.stdout == ""


def test_without_the_node_image_it_stops_in_one_line():
    if not shutil.which("docker") or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("no Docker daemon here")
    run = _run(dict(os.environ), "--image", "vllm-deploy/node:no-such-tag")
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == ["bench-weights: no node image vllm-deploy/node:no-such-tag (make node-image builds it)"]
