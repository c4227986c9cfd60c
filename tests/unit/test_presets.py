"""Preset selection: GPU table lookup, choose_flags adjusting presets with the planner, pinned flags checked.

Device figures come from real nvidia-smi captures (tests/fixtures/calibration/nvidia-smi/*.meta.yaml).
"""

import json

import pytest
from conftest import model_config_path

from vllm_deploy.planner import PlanError
from vllm_deploy.presets import choose_flags, gpu_total_gib, lookup_gpu, preset_for

TINY_LLAMA = dict(architectures=["LlamaForCausalLM"], model_type="llama", num_hidden_layers=4, hidden_size=1024,
                  num_attention_heads=8, num_key_value_heads=8, head_dim=128, intermediate_size=2048,
                  vocab_size=32000, max_position_embeddings=131072, torch_dtype="bfloat16")
L40S = {"kind": "gpu", "name": "NVIDIA L40S", "memory_total_mib": 46068, "memory_free_mib": 44225, "count": 1}
RTX3090 = {"kind": "gpu", "name": "NVIDIA GeForce RTX 3090", "memory_total_mib": 24576, "count": 1}
H100 = {"kind": "gpu", "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "count": 1}
# What vLLM's parser accepts (vllm-deploy-facts.md); seed-post flags must never be emitted.
ACCEPTED = {"max_model_len", "max_num_seqs", "gpu_memory_utilization", "enforce_eager", "tensor_parallel_size",
            "pipeline_parallel_size", "kv_cache_dtype", "quantization", "dtype", "max_num_batched_tokens"}


def config(name):
    with open(model_config_path(name), encoding="utf-8") as fh:
        return json.load(fh)


@pytest.mark.parametrize("query, expected", [
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),
    ("nvidia h100 80gb hbm3", "NVIDIA H100 80GB HBM3"),
    ("H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),
    ("GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
    ("NVIDIA L40S", "NVIDIA L40S"),
    ("T4", "Tesla T4"),
    ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"),
])
def test_lookup_gpu_loose(query, expected):
    assert lookup_gpu(query)["name"] == expected


def test_lookup_unknown_gpu():
    assert lookup_gpu("Voodoo 2") is None


@pytest.mark.parametrize("device, total", [
    (H100, 79.19),                    # logged by vLLM v0.19.0
    (L40S, 44.42),
    ({"name": "Mystery GPU", "memory_total_mib": 40960}, 39.5),   # MiB/1024 - 0.5 reserve
])
def test_gpu_total_gib(device, total):
    assert gpu_total_gib(device)[0] == pytest.approx(total)


@pytest.mark.parametrize("gb, name", [(8, "gpu-8gb"), (24, "gpu-24gb"), (48, "gpu-48gb"), (80, "gpu-80gb"),
                                      (94, "gpu-96gb"), (141, "gpu-141gb"), (4, "gpu-8gb")])
def test_preset_for_class(gb, name):
    assert preset_for(gb)[0] == name


def test_llama_on_l40s_fits_with_valid_flags():
    r = choose_flags(config=config("meta-llama__Llama-3.1-8B-Instruct"), weights_bytes=None, device=L40S)
    assert r["verdict"] == "fits" and r["preset"] == "gpu-48gb"
    assert set(r["flags"]) <= ACCEPTED
    assert r["flags"]["tensor_parallel_size"] == 1
    assert r["flags"]["max_model_len"] <= 131072
    assert r["plan"]["fits"] and r["message"].startswith("Fits on 1x NVIDIA L40S")


def test_never_above_model_limit():
    # Qwen2.5-7B: max_position_embeddings 32768, no rope scaling -> never above 32768 even on an H200
    r = choose_flags(config=config("Qwen__Qwen2.5-7B-Instruct"), weights_bytes=None,
                     device={"kind": "gpu", "name": "NVIDIA H200", "count": 1})
    assert r["flags"]["max_model_len"] <= 32768


def test_lowers_max_model_len_to_what_fits_and_respects_floor():
    cfg = config("meta-llama__Llama-3.1-8B-Instruct")
    dev = dict(RTX3090)
    r = choose_flags(config=cfg, weights_bytes=None, device=dev, floors={"max_model_len": 16384})
    assert r["flags"]["max_model_len"] >= 16384
    assert r["verdict"] in ("fits", "margin")


def test_pinned_max_model_len_is_kept_and_checked():
    r = choose_flags(config=config("meta-llama__Llama-3.1-8B-Instruct"), weights_bytes=None, device=RTX3090,
                     pinned={"max_model_len": 131072})
    assert r["flags"]["max_model_len"] == 131072
    assert r["verdict"] == "no_fit" and "estimated maximum model length" in r["message"]


def test_margin_when_pinned_at_the_limit():
    cfg = config("meta-llama__Llama-3.1-8B-Instruct")
    probe = choose_flags(config=cfg, weights_bytes=None, device=RTX3090, pinned={"max_model_len": 131072})
    fit = probe["plan"]["max_model_len_fit"]
    r = choose_flags(config=cfg, weights_bytes=None, device=RTX3090, pinned={"max_model_len": fit})
    assert r["verdict"] == "margin"


def test_weights_too_large_is_no_fit():
    # Gemma-3-27B in bf16 (~51 GiB) cannot load on one 44 GiB L40S
    r = choose_flags(config=config("google__gemma-3-27b-it"), weights_bytes=None, device=L40S)
    assert r["verdict"] == "no_fit"


def test_tp_defaults_to_largest_valid_size():
    # 5 GPUs: Qwen3-14B's vocabulary 151936 is not divisible by 5, so TP 4
    r = choose_flags(config=config("Qwen__Qwen3-14B"), weights_bytes=None, device=dict(H100, count=5))
    assert r["flags"]["tensor_parallel_size"] == 4


def test_low_free_memory_lowers_utilization():
    dev = dict(L40S, memory_free_mib=30000)    # ~29.3 GiB free, less the CUDA context
    r = choose_flags(config=config("meta-llama__Llama-3.1-8B-Instruct"), weights_bytes=None, device=dev)
    assert r["flags"]["gpu_memory_utilization"] * 44.42 <= 30000 / 1024 - 0.5


@pytest.mark.parametrize("pinned, field", [
    ({"swap_space": 4}, "swap_space"),
    ({"kv_cache_dtype": "fp16"}, "kv_cache_dtype"),
    ({"tokenizer_pool_size": 4}, "tokenizer_pool_size"),
    ({"maxModelLen": 4096}, "maxModelLen"),
])
def test_rejects_stale_or_unknown_pinned_flags(pinned, field):
    with pytest.raises(PlanError, match=field):
        choose_flags(config=TINY_LLAMA, weights_bytes=10**9, device=L40S, pinned=pinned)


def test_cpu_device():
    r = choose_flags(config=TINY_LLAMA, weights_bytes=10**9, device={"kind": "cpu", "kv_cache_space_gib": 1.0},
                     pinned={"max_model_len": 131072})
    assert r["verdict"] == "no_fit" and r["preset"] == "cpu"
    assert r["plan"]["max_model_len_fit"] == 65408
    ok = choose_flags(config=TINY_LLAMA, weights_bytes=10**9, device={"kind": "cpu", "kv_cache_space_gib": 1.0})
    assert ok["verdict"] in ("fits", "margin") and "gpu_memory_utilization" not in ok["flags"]
