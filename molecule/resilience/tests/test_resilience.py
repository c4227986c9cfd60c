"""A failed start never leaves the node dark (issue: preflight, diagnosis, ladder, rollback).

Each test drives the real deploy (ansible-playbook) against the node and checks it as a user would.
"""

import json

from helpers import ansible_playbook, completion, converge_log

API_KEY = "resilience-api-key-51c0"
TINY = {"path": "/srv/models/tiny-llama", "source": "generate",
        "generate": {"layers": 2, "hidden": 128, "heads": 2, "kv_heads": 1, "max_position": 2048}}


def deploy(*extra, tags=None, extra_vars=None):
    """deploy.yml against the node; returns (rc, output with wrapped lines joined)."""
    if tags:
        extra += ("--tags", tags)
    if extra_vars:
        extra += ("-e", json.dumps(extra_vars))
    run = ansible_playbook(*extra)
    return run.returncode, run.output


def complete(host, port, max_tokens=3):
    return completion(host, port, key=API_KEY, max_tokens=max_tokens)


def exec_start(host, unit):
    return host.check_output(f"systemctl show -p ExecStart --value {unit}")


def test_preflight_is_skipped_visibly_on_a_cpu_node():
    log = converge_log()
    assert "preflight skipped: mol-res-node1 serves the CPU build (no GPU to check)" in log


def test_a_version_that_cannot_serve_is_rolled_back(host):
    """v2's model has head_dim 16: the CPU kernel lets /health answer 200 but fails every completion."""
    before = host.file("/etc/systemd/system/vllm-tiny.service").sha256sum
    rc, out = deploy(extra_vars={
        "vllm_models": {"tiny-llama": TINY, "tiny-hd16": {
            "path": "/srv/models/tiny-hd16", "source": "generate", "served_name": "tiny-llama",
            "generate": {"layers": 2, "hidden": 32, "heads": 2, "kv_heads": 1}}},
        "vllm_instances": [{"name": "tiny", "model": "tiny-hd16", "gpus": [], "port": 8000,
                            "flags": {"max_model_len": 256, "dtype": "float32", "optimization_level": 0}}],
    })
    assert rc != 0
    assert "failed its gate" in out and "at completion" in out      # health passed; the completion did not
    assert "head_dim=16" in out                                       # the diagnosis names the root cause
    assert "Rolled back: vllm-tiny serves the previous version again (gate passed)." in out
    assert host.file("/etc/systemd/system/vllm-tiny.service").sha256sum == before
    assert "/srv/models/tiny-llama" in exec_start(host, "vllm-tiny")
    assert complete(host, 8000)["usage"]["completion_tokens"] == 3
    assert API_KEY not in out


def test_a_killed_engine_comes_back_and_verify_passes(host):
    pid = host.check_output("systemctl show -p MainPID --value vllm-tiny")
    host.run(f"kill -9 {pid}")
    rc, out = deploy(tags="verify")
    assert rc == 0, out[-3000:]
    assert "vllm-tiny serves tiny-llama" in out
    assert host.check_output("systemctl show -p MainPID --value vllm-tiny") not in ("0", pid)
    assert int(host.check_output("systemctl show -p NRestarts --value vllm-tiny")) >= 1
    assert complete(host, 8000)["usage"]["completion_tokens"] == 3


LADDER_VARS = {
    "vllm_serve_auto_degrade": True,
    "vllm_plan_enforce": False,  # the planner refuses this up front; here we test the runtime ladder
    "vllm_models": {
        "tiny-llama": TINY,
        "kv16k": {"path": "/srv/models/kv16k", "source": "generate", "served_name": "tiny-llama",
                  "generate": {"layers": 4, "hidden": 1024, "heads": 8, "kv_heads": 8, "intermediate": 256,
                               "max_position": 131072}},
    },
    "vllm_instances": [
        {"name": "tiny", "model": "tiny-llama", "gpus": [], "port": 8000, "flags": {"max_model_len": 256, "dtype": "float32", "optimization_level": 0}},
        {"name": "long", "model": "kv16k", "gpus": [], "port": 8001, "flags": {"max_model_len": 131072, "dtype": "float32", "optimization_level": 0}},
    ],
}


def test_the_degrade_ladder_brings_up_a_context_that_does_not_fit(host):
    """16 KiB of KV per token, 1 GiB of KV space, max-model-len 131072: vLLM itself refuses to start
    (2 GiB needed) and estimates 65408; the ladder takes that figure and the instance serves."""
    rc, out = deploy(extra_vars=LADDER_VARS)
    assert rc == 0, out[-4000:]
    report = json.loads(host.file("/var/lib/vllm/reports/long-degrade.json").content_string)
    assert report["served"] is True
    assert report["first_failure"]["category"] == "kv_cache_too_small"
    assert report["first_failure"]["figures"]["estimated_max_model_len"] <= 65408
    assert report["steps"][0]["step"] == "max_model_len" and report["steps"][0]["ok"] is True
    assert report["final_flags"]["max_model_len"] <= 65408
    assert "max_model_len did it" in out  # deploy() joins Ansible's wrapped lines
    assert f"--max-model-len {report['final_flags']['max_model_len']}" in exec_start(host, "vllm-long")
    assert complete(host, 8001)["usage"]["completion_tokens"] == 3
    assert complete(host, 8000)["usage"]["completion_tokens"] == 3   # the other instance never stopped serving


def test_a_rerun_after_the_ladder_changes_nothing(host):
    """The ladder's outcome is kept while the inventory asks for the same flags: no restart, no re-climb."""
    pid = host.check_output("systemctl show -p MainPID --value vllm-long")
    rc, out = deploy(extra_vars=LADDER_VARS)
    assert rc == 0, out[-3000:]
    assert "changed=0" in out.split("PLAY RECAP")[-1]
    assert host.check_output("systemctl show -p MainPID --value vllm-long") == pid
