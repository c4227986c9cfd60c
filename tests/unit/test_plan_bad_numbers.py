"""`vllm-deploy plan` on numbers that cannot be real: every numeric config.json field the planner reads and
every numeric option, each with NaN, infinities, negatives, zero, fractions, absurd sizes and non-numbers.

What a user must see is exit 2 ("bad input") with the field named on one line: never a traceback, never
exit 1 ("does not fit") or 0 ("fits") by accident. The configs are the real calibration ones
(tests/fixtures/calibration/models, sources in each source.txt) with one field broken; json.dumps writes
NaN and Infinity as the bare literals Python's json (and many exporters) put in a broken config.json.
"""

from __future__ import annotations

import copy
import json
import shutil
import signal

import pytest

from conftest import model_config_path

from vllm_deploy.cli import main

BASES = {
    "llama": "meta-llama__Llama-3.1-8B-Instruct",
    "deepseek": "deepseek-ai__DeepSeek-V2-Lite-Chat",
    "mixtral": "mistralai__Mixtral-8x7B-Instruct-v0.1",
    "llava": "llava-hf__llava-v1.6-mistral-7b-hf",
    "gemma3": "google__gemma-3-27b-it",
}

NAN, INF = float("nan"), float("inf")
ABSURD = 10 ** 40
# Values no count or size can take: not numbers, not finite, not integers, below zero, absurdly large.
NOT_A_COUNT = [NAN, INF, -INF, -1, 1.5, ABSURD, "abc", True, [4]]
POSITIVE_BAD = NOT_A_COUNT + [0]

# (base config, dotted path of the field, values that must be refused). Where a field is read only when
# present (alternate spellings, MoE/MLA/vision parts), the base holds that part or the test adds it.
POSITIVE_INT_FIELDS = [
    ("llama", "num_hidden_layers"), ("llama", "hidden_size"), ("llama", "num_attention_heads"),
    ("llama", "num_key_value_heads"), ("llama", "vocab_size"), ("llama", "intermediate_size"),
    ("llama", "head_dim"), ("llama", "max_position_embeddings"), ("llama", "n_positions"),
    ("llama", "max_seq_len"), ("llama", "seq_length"), ("llama", "max_sequence_length"),
    ("llama", "n_head_kv"), ("llama", "num_kv_heads"), ("llama", "multi_query_group_num"),
    ("llama", "hidden_size_per_head"), ("llama", "n_layer"), ("llama", "n_embd"), ("llama", "n_head"),
    ("llama", "ffn_hidden_size"), ("llama", "n_inner"), ("llama", "d_model"), ("llama", "num_layers"),
    ("llama", "model_max_length"), ("llama", "max_seq_length"), ("llama", "seq_len"),
    ("llama", "rope_scaling.original_max_position_embeddings"),
    ("deepseek", "kv_lora_rank"), ("deepseek", "qk_rope_head_dim"), ("deepseek", "qk_nope_head_dim"),
    ("deepseek", "v_head_dim"), ("deepseek", "moe_intermediate_size"), ("deepseek", "moe_layer_freq"),
    ("gemma3", "text_config.sliding_window_pattern"), ("gemma3", "text_config.hidden_size"),
    ("gemma3", "text_config.head_dim"), ("gemma3", "text_config.num_hidden_layers"),
    ("llava", "text_config.intermediate_size"), ("llava", "text_config.max_position_embeddings"),
    ("llava", "vocab_size"),
    ("llava", "vision_config.hidden_size"), ("llava", "vision_config.intermediate_size"),
    ("llava", "vision_config.num_hidden_layers"), ("llava", "vision_config.patch_size"),
    ("llava", "vision_config.image_size"),
]
NON_NEGATIVE_INT_FIELDS = [
    ("deepseek", "n_routed_experts"), ("deepseek", "num_experts_per_tok"), ("deepseek", "first_k_dense_replace"),
    ("deepseek", "n_shared_experts"), ("deepseek", "q_lora_rank"), ("mixtral", "num_local_experts"),
    ("mixtral", "sliding_window"), ("llama", "attention_chunk_size"), ("llama", "max_window_layers"),
    ("llama", "shared_expert_intermediate_size"), ("mixtral", "num_experts"), ("mixtral", "moe_topk"),
    ("mixtral", "num_experts_per_token"),
]
POSITIVE_NUMBER_FIELDS = [
    ("deepseek", "rope_scaling.factor"), ("llama", "quantization_config.bits"),
    ("llama", "quantization_config.w_bit"), ("llama", "quantization_config.weight_bits"),
]

CASES = ([(b, p, v) for b, p in POSITIVE_INT_FIELDS for v in POSITIVE_BAD]
         + [(b, p, v) for b, p in NON_NEGATIVE_INT_FIELDS for v in NOT_A_COUNT]
         + [(b, p, v) for b, p in POSITIVE_NUMBER_FIELDS for v in [NAN, INF, -INF, -1, 0, ABSURD, "abc", True]])


def _set(config: dict, dotted: str, value) -> dict:
    config = copy.deepcopy(config)
    node = config
    *parents, leaf = dotted.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return config


class _Hang(Exception):
    pass


def _run(argv, capsys):
    """main(argv) with a time limit: an absurd size must be refused, not computed for minutes."""
    def on_alarm(signum, frame):
        raise _Hang(f"vllm-deploy {' '.join(argv)} ran past 10 s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(10)
    try:
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _assert_refused(rc, out, err, named):
    assert rc == 2, f"exit {rc} (0 fits, 1 does not fit, 2 bad input); stdout: {out[-300:]!r} stderr: {err!r}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got: {err!r}"
    assert named in lines[0], f"{named!r} not named in: {lines[0]!r}"
    assert "Traceback" not in err and not out


@pytest.mark.parametrize("base,path,value", CASES, ids=[f"{b}-{p}-{v!r}" for b, p, v in CASES])
def test_bad_config_field_exits_2_naming_it(base, path, value, tmp_path, capsys):
    config = json.loads(model_config_path(BASES[base]).read_text())
    (tmp_path / "config.json").write_text(json.dumps(_set(config, path, value)))
    rc, out, err = _run(["plan", "--model", str(tmp_path), "--gpu-memory-gib", "79.19"], capsys)
    _assert_refused(rc, out, err, path)


def test_every_base_config_plans_cleanly(tmp_path, capsys):
    """The table above breaks one field of a config that plans; each base itself is good input."""
    for name in BASES.values():
        shutil.copy(model_config_path(name), tmp_path / "config.json")
        rc, out, err = _run(["plan", "--model", str(tmp_path), "--gpu-memory-gib", "79.19", "--json"], capsys)
        assert rc in (0, 1) and not err, (name, err)
        assert json.loads(out)["kv_bytes_per_token"] > 0


@pytest.mark.parametrize("field,value", [
    ("architectures", "LlamaForCausalLM"), ("architectures", 5), ("quantization_config", "fp8"),
    ("rope_scaling", "yarn"), ("text_config", [1]), ("layer_types", "full"),
])
def test_wrong_shape_config_field_exits_2(field, value, tmp_path, capsys):
    config = json.loads(model_config_path(BASES["llama"]).read_text())
    config[field] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    rc, out, err = _run(["plan", "--model", str(tmp_path), "--gpu-memory-gib", "79.19"], capsys)
    _assert_refused(rc, out, err, field)


def test_config_json_that_is_not_an_object_exits_2(tmp_path, capsys):
    (tmp_path / "config.json").write_text("[1, 2, 3]")
    rc, out, err = _run(["plan", "--model", str(tmp_path), "--gpu-memory-gib", "79.19"], capsys)
    _assert_refused(rc, out, err, "config.json")


@pytest.mark.parametrize("total", [-1, 0, ABSURD, 1.5, "big", True, NAN])
def test_bad_safetensors_index_total_size_exits_2(total, tmp_path, capsys):
    shutil.copy(model_config_path(BASES["llama"]), tmp_path / "config.json")
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total}}))
    rc, out, err = _run(["plan", "--model", str(tmp_path), "--gpu-memory-gib", "79.19"], capsys)
    _assert_refused(rc, out, err, "total_size")


# Every numeric option, with the values it must refuse. Counts must be whole numbers >= 1; sizes finite
# and within what any real GPU or host has; the utilization a fraction in (0, 1].
_COMMON_BAD = ["nan", "NaN", "inf", "-inf", "Infinity", "-1", "1e40", "abc", "", "0x10"]
OPTIONS = (
    [("--gpu-memory-gib", v) for v in _COMMON_BAD + ["0"]]
    + [("--num-gpus", v) for v in _COMMON_BAD + ["0", "1.5", "100000000000"]]
    + [("--tensor-parallel-size", v) for v in _COMMON_BAD + ["0", "2.5", "100000000000"]]
    + [("-tp", v) for v in ["nan", "0", "-2"]]
    + [("--pipeline-parallel-size", v) for v in _COMMON_BAD + ["0", "1.5"]]
    + [("-pp", v) for v in ["inf", "0"]]
    + [("--gpu-memory-utilization", v) for v in _COMMON_BAD + ["0", "1.01", "90"]]
    + [("--max-model-len", v) for v in _COMMON_BAD + ["0", "8192.5", str(10 ** 30)]]
    + [("--max-num-seqs", v) for v in _COMMON_BAD + ["0", "1.5", str(10 ** 30)]]
    + [("--max-num-batched-tokens", v) for v in _COMMON_BAD + ["0", "2048.5", str(10 ** 30)]]
    + [("--cpu-offload-gb", v) for v in _COMMON_BAD]
    + [("--free-memory-gib", v) for v in _COMMON_BAD + ["500"]]
    + [("--vllm-version", v) for v in ["abc", "", "-1.0.0", "0.19.x", "1e40"]]
)


@pytest.mark.parametrize("option,value", OPTIONS, ids=[f"{o}={v!r}" for o, v in OPTIONS])
def test_bad_option_exits_2_naming_it(option, value, tmp_path, capsys):
    shutil.copy(model_config_path(BASES["llama"]), tmp_path / "config.json")
    argv = ["plan", "--model", str(tmp_path), "--max-model-len", "8192", "--vllm-version", "0.19.0"]
    if option != "--gpu-memory-gib":
        argv += ["--gpu-memory-gib", "79.19"]
    # `--opt=value` so that a value starting with a dash is the option's value, as a user would type it.
    rc, out, err = _run(argv + [f"{option}={value}"], capsys)
    named = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size"}.get(option, option)
    _assert_refused(rc, out, err, named)


@pytest.mark.parametrize("value", _COMMON_BAD + ["0"])
def test_bad_cpu_kv_space_exits_2(value, tmp_path, capsys):
    shutil.copy(model_config_path(BASES["llama"]), tmp_path / "config.json")
    rc, out, err = _run(["plan", "--model", str(tmp_path), f"--cpu-kv-space-gib={value}"], capsys)
    _assert_refused(rc, out, err, "--cpu-kv-space-gib")


@pytest.mark.parametrize("argv,code", [
    (["--gpu-memory-gib", "79.19", "--max-model-len", "8192", "--vllm-version", "0.19.0"], 0),
    (["--gpu-memory-gib", "79.19", "--gpu-memory-utilization", "0.5", "--max-model-len", "8192"], 0),
    (["--gpu-memory-gib", "23.54", "--max-model-len", "131072"], 1),
    (["--gpu-memory-gib", "79.19", "-tp", "2", "--num-gpus", "2", "--max-model-len", "1e3"], 2),
])
def test_good_numbers_still_plan(argv, code, tmp_path, capsys):
    """The checks refuse what cannot be real, not what is merely unusual (whole numbers only for counts)."""
    shutil.copy(model_config_path(BASES["llama"]), tmp_path / "config.json")
    rc, out, err = _run(["plan", "--model", str(tmp_path)] + argv, capsys)
    assert rc == code, (out, err)
