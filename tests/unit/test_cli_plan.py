"""`vllm-deploy plan`: exit codes (0 fits, 1 no fit, 2 bad input), one-line errors, JSON output."""

import json
import shutil

import pytest

from conftest import model_config_path

from vllm_deploy.cli import main


@pytest.fixture
def llama_dir(tmp_path):
    shutil.copy(model_config_path("meta-llama__Llama-3.1-8B-Instruct"), tmp_path / "config.json")
    return str(tmp_path)


def test_missing_config_exits_2_with_one_line(tmp_path, capsys):
    rc = main(["plan", "--model", str(tmp_path), "--gpu-memory-gib", "79.19"])
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and "config.json" in err


def test_negative_number_exits_2(llama_dir, capsys):
    rc = main(["plan", "--model", llama_dir, "--gpu-memory-gib", "-5"])
    err = capsys.readouterr().err
    assert rc == 2 and "--gpu-memory-gib" in err and len(err.strip().splitlines()) == 1


def test_unknown_gpu_exits_2(llama_dir, capsys):
    assert main(["plan", "--model", llama_dir, "--gpu", "Voodoo 2"]) == 2


def test_fits_exit_0_and_table(llama_dir, capsys):
    rc = main(["plan", "--model", llama_dir, "--gpu-memory-gib", "79.19", "--max-model-len", "8192",
               "--vllm-version", "0.19.0"])
    out = capsys.readouterr().out
    assert rc == 0 and "FITS" in out and "KV cache" in out


def test_no_fit_exit_1_with_suggestions(llama_dir, capsys):
    rc = main(["plan", "--model", llama_dir, "--gpu", "NVIDIA GeForce RTX 3090", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 1 and not d["fits"]
    assert d["gpu_total_gib"] == 23.54            # resolved from gpus.yaml
    assert d["suggestions"][0]["change"]["max_model_len"] == d["max_model_len_fit"]


def test_cpu_backend(tmp_path, capsys):
    cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", num_hidden_layers=4, hidden_size=1024,
               num_attention_heads=8, num_key_value_heads=8, head_dim=128, intermediate_size=2048,
               vocab_size=32000, max_position_embeddings=131072, torch_dtype="bfloat16")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    rc = main(["plan", "--model", str(tmp_path), "--cpu-kv-space-gib", "1", "--max-model-len", "131072", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 1 and d["max_model_len_fit"] == 65408


def test_one_instance_across_nodes_is_planned_per_gpu_and_named_with_its_hosts(tmp_path, capsys):
    """Qwen3-14B's bf16 weights (~28 GiB) do not fit one 24 GiB card; split TP 2 (inside a host) x PP 2
    (across two hosts), each GPU holds a quarter and the plan fits."""
    shutil.copy(model_config_path("Qwen__Qwen3-14B"), tmp_path / "config.json")
    base = ["plan", "--model", str(tmp_path), "--gpu", "NVIDIA GeForce RTX 4090", "--max-model-len", "8192"]
    assert main(base) == 1
    capsys.readouterr()
    rc = main(base + ["-tp", "2", "-pp", "2", "--nodes", "2", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["fits"] and d["nodes"] == {"hosts": 2, "gpus_per_host": 2, "gpus": 4}
    assert d["tensor_parallel_size"] == 2 and d["pipeline_parallel_size"] == 2
    assert main(base + ["-tp", "2", "-pp", "2", "--nodes", "2"]) == 0
    assert capsys.readouterr().out.startswith("one instance across 2 hosts x 2 GPUs = 4 GPUs (TP 2 x PP 2")


def test_gpus_that_do_not_split_over_the_nodes_exit_2(llama_dir, capsys):
    assert main(["plan", "--model", llama_dir, "--gpu-memory-gib", "79.19", "-tp", "3", "--nodes", "2"]) == 2
    assert "do not split evenly over 2 hosts" in capsys.readouterr().err
