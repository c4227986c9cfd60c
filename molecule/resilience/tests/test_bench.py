"""bench.yml and tune.yml against the resilience node's real engine (issue 16), with tiny sweeps.

Run before test_resilience.py (file order): the node serves what the converge deployed, instance
`tiny` with the planner's flags (max_num_seqs 8 on the CPU engine). Every figure the tests compare
with is read from vLLM's own result JSON, never from what the code under test derived from it.
"""

import json
import struct

import pytest
import yaml
from helpers import ansible_playbook, completion

API_KEY = "resilience-api-key-51c0"
HOST = "mol-res-node1"
# Two concurrencies, 8 requests each, 8 output tokens: about 10 s of benchmark per sweep on 2 cores.
SWEEP = {"vllm_bench_concurrencies": [1, 2], "vllm_bench_num_prompts": 8,
         "vllm_bench_input_len": 32, "vllm_bench_output_len": 8}
UNIT = "/etc/systemd/system/vllm-tiny.service"


def run(playbook, reports, *args, **extra_vars):
    result = ansible_playbook("-e", json.dumps({**SWEEP, "vllm_bench_reports_dir": str(reports), **extra_vars}), *args,
                              playbook=playbook, timeout=1500)
    return result.returncode, result.output


def the_run_dir(reports, kind):
    dirs = sorted(reports.glob(f"{kind}-*"))
    assert len(dirs) == 1, dirs
    return dirs[0]


def png_size(path):
    """(width, height) from a PNG's IHDR chunk; fails unless the file starts with the PNG signature."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def vllm_result(directory, concurrency):
    return json.loads((directory / f"c{concurrency}.json").read_text())


def serves_original_flags(host):
    exec_start = host.check_output("systemctl show -p ExecStart --value vllm-tiny")
    assert "--max-num-seqs 8 " in exec_start and "--max-num-batched-tokens" not in exec_start, exec_start
    assert host.service("vllm-tiny").is_running
    assert completion(host, 8000, key=API_KEY)["usage"]["completion_tokens"] == 3


def node_state(host):
    """What a tune run must leave as it found it: the unit and what /etc/vllm/previous holds."""
    return host.file(UNIT).sha256sum, host.run("find /etc/vllm/previous -type f -exec sha256sum {} + 2>&1 | sort").stdout


def test_bench_writes_the_results_plots_and_summary(tmp_path):
    rc, out = run("bench.yml", tmp_path)
    assert rc == 0, out[-4000:]
    run_dir = the_run_dir(tmp_path, "bench")
    inst = run_dir / HOST / "tiny"
    for conc in (1, 2):
        result = vllm_result(inst, conc)
        assert result["max_concurrency"] == conc and result["completed"] == 8 and result["failed"] == 0
    for plot, keys in (("throughput", ["output_throughput"]), ("ttft", ["p50_ttft_ms", "p99_ttft_ms"]),
                       ("itl", ["p50_itl_ms", "p99_itl_ms"])):
        data = json.loads((inst / f"{plot}.json").read_text())
        assert data["x"] == [1, 2]
        for key in keys:
            assert data["series"][key] == [vllm_result(inst, c)[key] for c in (1, 2)], (plot, key)
        assert png_size(inst / f"{plot}.png") == (640, 400)  # matplotlib's 6.4 x 4.0 in at 100 dpi
    summary = (run_dir / "summary.md").read_text()
    assert f"### {HOST}/tiny" in summary
    assert "| flags | dtype=float32, max_model_len=256, max_num_seqs=8, optimization_level=0 |" in summary
    plan = json.loads((inst / "instance.json").read_text())["plan"]
    assert f"| planner: KV-cache tokens | {plan['kv_cache_tokens']} |" in summary
    for conc in (1, 2):
        assert f"| {conc} | 8 | 0 | {vllm_result(inst, conc)['output_throughput']:.1f} |" in summary
    assert "![throughput](mol-res-node1/tiny/throughput.png)" in summary
    assert "The sweep took" in summary
    assert f"{HOST}/tiny: c1: " in out                       # the progress line
    assert API_KEY not in out and API_KEY not in (inst / "bench.log").read_text()


def test_tune_with_a_loose_target_picks_one_and_restores_the_flags(host, tmp_path):
    before = node_state(host)
    rc, out = run("tune.yml", tmp_path, "-l", HOST, tune_instance="tiny",
                  vllm_bench_tune_candidates={"max_num_seqs": [8, 4]}, vllm_bench_ttft_p99_slo_ms=600000)
    assert rc == 0, out[-4000:]
    inst = the_run_dir(tmp_path, "tune") / HOST / "tiny"
    assert f"{HOST}/tiny trial 1/2 max_num_seqs=8: gate passed" in out
    assert f"{HOST}/tiny trial 2/2 max_num_seqs=4: gate passed" in out
    # The winner is the trial with the higher throughput vLLM measured (every point meets 600 s).
    best = {t: max(vllm_result(inst / f"trial-{t}", c)["output_throughput"] for c in (1, 2)) for t in (1, 2)}
    winner = max(best, key=best.get)
    snippet = yaml.safe_load((inst / "host_vars-snippet.yml").read_text())
    assert snippet["vllm_instances"][0]["name"] == "tiny"
    assert snippet["vllm_instances"][0]["flags"]["max_num_seqs"] == {1: 8, 2: 4}[winner]
    assert f"chose trial {winner} " in out
    assert "The instance serves its flags before again" in out
    assert node_state(host) == before
    serves_original_flags(host)
    assert API_KEY not in out


def test_tune_reports_an_impossible_target_and_skips_flags_vllm_rejects(host, tmp_path):
    """Trial 1 runs the current flags and misses a 0.001 ms target; trial 2's max_num_batched_tokens 4
    is below max_num_seqs 8, which vLLM refuses at start: diagnosed, skipped, the old flags back."""
    before = node_state(host)
    rc, out = run("tune.yml", tmp_path, "-l", HOST, tune_instance="tiny",
                  vllm_bench_tune_candidates={"max_num_batched_tokens": [None, 4]}, vllm_bench_ttft_p99_slo_ms=0.001)
    assert rc == 0, out[-4000:]
    inst = the_run_dir(tmp_path, "tune") / HOST / "tiny"
    trial2 = json.loads((inst / "trial-2" / "trial.json").read_text())
    assert trial2["outcome"] == "failed"
    assert "Diagnosis:" in trial2["reason"] and "max_num_batched_tokens (4)" in trial2["reason"], trial2["reason"]
    assert "Rolled back: vllm-tiny serves the previous version again (gate passed)." in trial2["reason"]
    assert f"{HOST}/tiny trial 2/2 max_num_batched_tokens=4: failed, skipped" in out
    lowest = min(vllm_result(inst / "trial-1", c)["p99_ttft_ms"] for c in (1, 2))
    assert f"nothing chosen: no trial met the p99 TTFT target of 0.001 ms (the lowest p99 TTFT measured was {lowest:.1f} ms)" in out
    assert not (inst / "host_vars-snippet.yml").exists()
    assert node_state(host) == before
    serves_original_flags(host)


@pytest.mark.parametrize("args, message", [
    (("-e", "instance=tiny"), "tune.yml: give the instance as -e tune_instance=NAME"),
    (("-e", "tune_instance=nope"), f"{HOST}: tune_instance: \"nope\" is not an instance of this host"),
])
def test_tune_refuses_bad_arguments_in_one_line(host, tmp_path, args, message):
    before = node_state(host)
    rc, out = run("tune.yml", tmp_path, "-l", HOST, *args, vllm_bench_ttft_p99_slo_ms=1000)
    assert rc != 0 and message in out, out[-3000:]
    assert node_state(host) == before
