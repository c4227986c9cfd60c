"""vLLM failure diagnosis against real logs (tests/fixtures/calibration/vllm-failures: the category comes from
each .meta.yaml, the figures were read by hand from the log text) and against synthetic variants
built from vLLM's own message wordings (V0 and V1)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from conftest import REPO, calibration_dir, calibration_files, model_config_path
from vllm_deploy.diagnose import CATEGORIES, diagnose
from vllm_deploy.ladder import ACTIONS, MEMORY_CATEGORIES
from vllm_deploy.planner import ModelInfo, plan

# Figures read by hand from each log (not from this code's output).
EXPECTED_FIGURES = {
    "37-lost-rank-gloo-pp2-cpu-multinode.log": {},
    "01-kv-cache-too-small-v0-rtx3090.log": {"max_model_len": 29000, "kv_tokens": 23648, "gpu_blocks": 1478,
                                             "kv_available_gib": 2.89, "gpu_memory_utilization": 0.90,
                                             "total_gib": 23.58},
    "05-no-kv-memory-v0-064-docker.log": {},
    "08-free-mem-below-request-v1-rtx3090.log": {"free_gib": 22.76, "total_gib": 24.0,
                                                 "gpu_memory_utilization": 0.97, "requested_gib": 23.28},
    "13-cuda-oom-after-kv-sampler-warmup-v0110.log": {"dummy_requests": 1024},
    "16-cuda-oom-after-kv-cudagraph-v0-8xl4.log": {"gpu_blocks": 22982},
    "20-cuda-oom-runtime-v0-8xa800-dsr1-awq.log": {"tried_to_allocate_gib": 1.27, "total_gib": 79.33,
                                                   "gpu_memory_utilization": 0.9, "max_model_len": 16384,
                                                   "tp_size": 8},
    "23-tp-not-divisible-v1-heads64-tp3.log": {"num_heads": 64, "tp_size": 3},
    "25-max-len-over-model-limit-v1-pydantic.log": {"max_model_len": 513, "derived_max_model_len": 512},
    "27-unsupported-dtype-v0-v100-pcie-qanything.log": {},
    "31-no-driver-v1-docker-no-gpus-flag.log": {},
    "35-model-auth-gated-v0-060-llama3.log": {},
    "36-trust-remote-code-runpod-worker.log": {},
}
# Numbers the fix must name (hand-derived from the figures above).
EXPECTED_IN_FIX = {
    "01-kv-cache-too-small-v0-rtx3090.log": ["--max-model-len 23648"],
    "08-free-mem-below-request-v1-rtx3090.log": ["--gpu-memory-utilization 0.94"],   # 22.76/24 = 0.948
    "13-cuda-oom-after-kv-sampler-warmup-v0110.log": ["--max-num-seqs", "1024"],
    "16-cuda-oom-after-kv-cudagraph-v0-8xl4.log": ["--enforce-eager"],
    "23-tp-not-divisible-v1-heads64-tp3.log": ["1, 2, 4, 8", "--pipeline-parallel-size 3"],
    "25-max-len-over-model-limit-v1-pydantic.log": ["--max-model-len 512"],
    "27-unsupported-dtype-v0-v100-pcie-qanything.log": ["--dtype half"],
    "31-no-driver-v1-docker-no-gpus-flag.log": ["--gpus"],
    "35-model-auth-gated-v0-060-llama3.log": ["HF_TOKEN"],
    "36-trust-remote-code-runpod-worker.log": ["--trust-remote-code"],
}
LOGS = calibration_files("vllm-failures", "*.log")


def test_every_fixture_has_expectations():
    assert set(LOGS) <= set(EXPECTED_FIGURES), "add hand-read figures for new fixtures"


@pytest.mark.parametrize("name", LOGS)
def test_real_log(name):
    d = calibration_dir("vllm-failures")
    meta = yaml.safe_load((d / name.replace(".log", ".meta.yaml")).read_text())
    result = diagnose((d / name).read_bytes())
    assert result.category == meta["category"]
    for key, value in EXPECTED_FIGURES[name].items():
        assert result.figures.get(key) == pytest.approx(value), key
    for needle in EXPECTED_IN_FIX.get(name, []):
        assert needle in result.fix
    assert result.summary and "\n" not in result.summary


# --- synthetic variants, built from vLLM's message templates -----------------------------------
V1_KV = ("ValueError: To serve at least one request with the model's max seq len (131072), (2.0 GiB KV cache is "
         "needed, which is larger than the available KV cache memory (1.0 GiB). Based on the available memory, the "
         "estimated maximum model length is 65408. Try increasing `gpu_memory_utilization` (which also controls CPU "
         "memory on the CPU backend) or decreasing `max_model_len` when initializing the engine.")
V1_KV_OLD = ("ValueError: To serve at least one request with the models's max seq len (32768), (0.95 GiB KV cache is "
             "needed, which is larger than the available KV cache memory (0.41 GiB). Try increasing "
             "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")


def test_v1_kv_wording_with_estimate():
    r = diagnose(V1_KV)
    assert r.category == "kv_cache_too_small"
    assert r.figures["max_model_len"] == 131072 and r.figures["estimated_max_model_len"] == 65408
    assert r.figures["kv_needed_gib"] == 2.0 and r.figures["kv_available_gib"] == 1.0
    assert "--max-model-len 65408 or lower" in r.fix and "--gpu-memory-utilization" in r.fix


def test_v1_kv_old_models_typo_without_estimate():
    r = diagnose(V1_KV_OLD)
    assert r.category == "kv_cache_too_small" and r.figures["max_model_len"] == 32768
    assert r.figures["kv_needed_gib"] == 0.95 and "estimated_max_model_len" not in r.figures


def test_journal_prefixes_engine_tags_and_colours():
    log = "\n".join([
        "Nov 29 10:00:01 gpu1 python[123]: \x1b[1;36m(EngineCore_DP0 pid=456)\x1b[0;0m INFO 11-29 10:00:01 "
        "[gpu_worker.py:298] Available KV cache memory: 1.00 GiB",
        "Nov 29 10:00:02 gpu1 python[123]: (EngineCore_DP0 pid=456) ERROR 11-29 10:00:02 [core.py:708] " + V1_KV,
        "Nov 29 10:00:02 gpu1 python[123]: (APIServer pid=123) RuntimeError: Engine core initialization failed. "
        "See root cause above. Failed core proc(s): {}",
    ])
    r = diagnose(log)
    assert r.category == "kv_cache_too_small" and r.figures["estimated_max_model_len"] == 65408
    assert r.evidence.startswith("ValueError: To serve")


def test_truncated_mid_line_still_classified():
    r = diagnose(V1_KV[:150])
    assert r.category == "kv_cache_too_small" and r.figures["max_model_len"] == 131072


def test_hard_wrapped_lines():
    r = diagnose("ValueError: Free memory on device (10.5/79.19 GiB) on startup is less than desired GPU\n"
                 "memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used")
    assert r.category == "free_memory_below_request"
    assert r.figures["free_gib"] == 10.5 and r.figures["requested_gib"] == 71.27
    assert "--gpu-memory-utilization 0.13" in r.fix        # 10.5/79.19 = 0.1326


@pytest.mark.parametrize("data", [b"", b"   \n\n", b"\xff\xfe\x00garbage\x80\x81", "\x1b[31m\x1b[0m"])
def test_garbage_and_empty_are_unknown(data):
    r = diagnose(data)
    assert r.category == "unknown"
    json.dumps(r.to_dict())


def test_root_cause_is_first_fatal_error_not_the_wrapper():
    log = "\n".join([
        "(Worker_TP1 pid=99) ERROR 04-09 20:31:10 [multiproc_executor.py:949] ValueError: Total number of attention "
        "heads (40) must be divisible by tensor parallel size (3).",
        "(EngineCore_DP0 pid=7) RuntimeError: Worker failed with error 'CUDA out of memory', please check the stack trace",
        "RuntimeError: Engine core initialization failed. See root cause above.",
    ])
    r = diagnose(log)
    assert r.category == "tp_not_divisible" and r.figures["num_heads"] == 40
    assert "1, 2, 4, 5, 8, 10" in r.fix


OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "23.57 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 22.50 GiB memory in use.")


@pytest.mark.parametrize("before,category", [
    (["INFO 06-01 10:00:00 [default_loader.py:262] Loading weights took 3.10 seconds",
      "Traceback (most recent call last):", '  File "x/gpu_model_runner.py", line 1, in load_model'],
     "cuda_oom_weights"),
    (["INFO [gpu_model_runner.py:1] Model loading took 14.99 GiB and 5.1 seconds",
      "Traceback (most recent call last):", '  File "x/gpu_worker.py", line 1, in determine_available_memory',
      '  File "x/gpu_model_runner.py", line 1, in profile_run'],
     "cuda_oom_weights"),
    (["INFO [kv_cache_utils.py:1] GPU KV cache size: 476,000 tokens",
      "Capturing CUDA graph shapes:  40%|████      | 27/67"], "cuda_oom_after_kv"),
    (["INFO [kv_cache_utils.py:1] GPU KV cache size: 476,000 tokens", "Traceback (most recent call last):",
      '  File "x/gpu_worker.py", line 1, in compile_or_warm_up_model',
      '  File "x/gpu_model_runner.py", line 1, in capture_model'], "cuda_oom_after_kv"),
    (["INFO:     Application startup complete.", 'INFO:     127.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK'],
     "cuda_oom_runtime"),
])
def test_oom_phase_from_what_came_before(before, category):
    r = diagnose("\n".join(before + [OOM]))
    assert r.category == category
    assert r.figures["tried_to_allocate_gib"] == 2.0 and r.figures["total_gib"] == 23.57


def test_v1_sampler_warmup_wrapping_a_torch_oom():
    log = "\n".join(["GPU KV cache size: 952,032 tokens", OOM, "",
                     "During handling of the above exception, another exception occurred:", "",
                     "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. "
                     "Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine."])
    r = diagnose(log)
    assert r.category == "cuda_oom_after_kv" and "sampler" in r.summary


@pytest.mark.parametrize("line,category,figure", [
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
     "initializing the engine.", "no_kv_memory", None),
    ("ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token.",
     "no_kv_memory", None),
    ("ValueError: User-specified max_model_len (8192) is greater than the derived max_model_len "
     "(max_position_embeddings=2048.0 or model_max_length=None in model's config.json).",
     "max_len_over_model_limit", ("derived_max_model_len", 2048)),
    ("AssertionError: 151936 is not divisible by 5", "tp_not_divisible", ("tp_size", 5)),
    ("RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed "
     "a driver", "driver_mismatch_or_no_driver", None),
    ("RuntimeError: The NVIDIA driver on your system is too old (found version 12020). Please update your GPU "
     "driver", "driver_mismatch_or_no_driver", ("driver_cuda", 12020)),
    ("Failed to initialize NVML: Driver/library version mismatch", "driver_mismatch_or_no_driver", None),
    ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled system error",
     "nccl_error", None),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, ncclUnhandledCudaError",
     "nccl_error", None),
    ("RuntimeError: Insufficient space in /dev/shm: 160 MiB required, 63 MiB free", "shm_too_small",
     ("shm_required_mib", 160)),
    ("gpu1 NCCL WARN Error: failed to extend /dev/shm/nccl-XyZ to 9637892 bytes", "shm_too_small", None),
    ("OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use",
     "port_in_use", ("port", 8000)),
    ("zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:5570')", "port_in_use", ("port", 5570)),
    ("OSError: meta-llama/Llama-3.1-8B is not a local folder and is not a valid model identifier listed on "
     "'https://huggingface.co/models'", "model_not_found_or_auth", None),
    ("huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo for url "
     "https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json.", "model_not_found_or_auth", None),
    ("ValueError: Loading moonshotai/Kimi-VL requires you to execute the configuration file in that repo on your "
     "local machine. Make sure you have read the code there to avoid malicious use, then set the option "
     "`trust_remote_code=True` to remove this error.", "trust_remote_code_required", None),
    ("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU "
     "has compute capability 7.5. You can use float16 instead by explicitly setting the`dtype` flag in CLI, for "
     "example: --dtype=half.", "unsupported_dtype_or_gpu", ("compute_capability", 7.5)),
    # (0.4's Fp8Config asked for 89)
    ("ValueError: The quantization method fp8 is not supported for the current GPU. Minimum capability: 89. "
     "Current capability: 86.", "unsupported_dtype_or_gpu", ("min_capability", 89)),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device",
     "unsupported_dtype_or_gpu", None),
])
def test_wording_families(line, category, figure):
    r = diagnose("INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.33.0\n" + line + "\n")
    assert r.category == category
    assert category in CATEGORIES
    if figure:
        assert r.figures[figure[0]] == pytest.approx(figure[1])
    assert r.fix


def test_flag_in_command_line_is_not_an_error():
    r = diagnose("python -m vllm.entrypoints.openai.api_server --trust-remote-code --port 8000\n"
                 "INFO:     Uvicorn running on http://0.0.0.0:8000\n")
    assert r.category == "unknown"


def test_unknown_names_the_first_error():
    r = diagnose("Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 'qwen9'\n"
                 "RuntimeError: Engine core initialization failed. See root cause above.\n")
    assert r.category == "unknown" and "KeyError: 'qwen9'" in r.summary


# --- phase: from the message, the frames, the milestones; never guessed --------------------------
def test_oom_without_evidence_is_not_called_a_weights_oom():
    r = diagnose(OOM)
    assert r.category == "cuda_oom" and r.phase == "unknown" and r.phase_confidence == "none"
    assert r.action == "ladder" and "--gpu-memory-utilization" in r.fix


@pytest.mark.parametrize("before,after,category,phase,confidence", [
    # frames above the error line, no "Traceback" header (a worker's excerpt)
    (['  File "x/torch/cuda/graphs.py", line 84, in capture_end', "    super().capture_end()"], [],
     "cuda_oom_after_kv", "graph_capture", "high"),
    (['  File "x/vllm/v1/worker/gpu_model_runner.py", line 1, in _dummy_sampler_run'], [],
     "cuda_oom_after_kv", "sampler_warmup", "high"),
    (["Traceback (most recent call last):", '  File "x/vllm/v1/core/kv_cache_utils.py", line 1, in get_kv_cache_configs',
      '  File "x/vllm/v1/worker/gpu_model_runner.py", line 1, in initialize_kv_cache'], [],
     "cuda_oom_after_kv", "kv_cache_allocation", "high"),
    (["Traceback (most recent call last):", '  File "x/vllm/v1/engine/core.py", line 1, in run_busy_loop',
      '  File "x/vllm/v1/worker/gpu_model_runner.py", line 1, in execute_model'], [],
     "cuda_oom_runtime", "serving", "high"),
    # another rank's traceback, printed after the error line
    ([], ["Traceback (most recent call last):", '  File "x/vllm/worker/model_runner.py", line 1, in profile_run'],
     "cuda_oom_weights", "profile_run", "medium"),
    # only the milestones the log reached
    (["INFO [default_loader.py:1] Loading weights took 3.10 seconds"], [], "cuda_oom_weights", "profile_run", "medium"),
    (["INFO [gpu_worker.py:1] Available KV cache memory: 3.20 GiB"], [], "cuda_oom_after_kv", "kv_cache_allocation",
     "medium"),
    (["INFO [kv_cache_utils.py:1] GPU KV cache size: 476,000 tokens", "INFO [gpu_model_runner.py:1] Graph capturing "
      "finished in 5 secs, took 0.46 GiB"], [], "cuda_oom_after_kv", "sampler_warmup", "low"),
    (["INFO:     Application startup complete."], [], "cuda_oom_runtime", "serving", "medium"),
    ([], ["INFO:     Waiting for application shutdown."], "cuda_oom_runtime", "serving", "medium"),
    # the worker method vLLM names when a distributed call fails (V0 multiproc and Ray workers)
    ([], ["Exception in worker VllmWorkerProcess while processing method load_model."],
     "cuda_oom_weights", "model_loading", "medium"),
    ([], ["Error executing method init_device. This might cause deadlock in distributed execution."],
     "cuda_oom_weights", "init", "medium"),
    # the engine's serving loop died: V0 AsyncLLMEngine's loop callback, V0 MQLLMEngine, V1
    ([], ["Exception in callback _log_task_completion(error_callback=<bound method...>)"],
     "cuda_oom_runtime", "serving", "medium"),
    ([], ["vllm.engine.multiprocessing.MQEngineDeadError: Engine loop is not running. Inspect the stacktrace to "
          "find the original error: OutOfMemoryError('CUDA out of memory.')"], "cuda_oom_runtime", "serving", "medium"),
    ([], ["vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for "
          "the root cause."], "cuda_oom_runtime", "serving", "medium"),
])
def test_oom_phase_evidence(before, after, category, phase, confidence):
    r = diagnose("\n".join(before + [OOM] + after))
    assert (r.category, r.phase, r.phase_confidence) == (category, phase, confidence)
    assert r.phase_evidence


def test_an_info_line_is_not_a_frame():
    r = diagnose("INFO 01-01 00:00:00 [gpu_model_runner.py:1] Starting to load model /m ... (load_model)\n" + OOM)
    assert r.phase == "model_loading" and r.phase_confidence == "medium"      # the milestone, not a frame


def test_phase_reached_is_the_last_milestone_before_the_error():
    log = "\n".join(["Loading model weights took 14.99 GB", "# GPU blocks: 1200, # CPU blocks: 512",
                     "Capturing cudagraphs for decoding.", OOM, "INFO:     Application startup complete."])
    r = diagnose(log)
    assert r.phase_reached == "capturing_cuda_graphs" and r.phase == "graph_capture"


def test_nccl_error_whose_detail_names_dev_shm_is_shm():
    r = diagnose("torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:317, unhandled system error\n"
                 "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n"
                 "Last error:\nError while creating shared memory segment /dev/shm/nccl-a1 (size 9637888)\n")
    assert r.category == "shm_too_small" and "--ipc=host" in r.fix


@pytest.mark.parametrize("line,kind_word", [
    ("NCCL WARN Cuda failure 'peer access is not supported between these two devices'", "NCCL_P2P_DISABLE=1"),
    ("Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:455 'invalid argument'", "--disable-custom-all-reduce"),
    ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE) ran for 600059 "
     "milliseconds before timing out.", "NCCL_DEBUG=INFO"),
])
def test_nccl_wordings_and_their_fixes(line, kind_word):
    r = diagnose(line)
    assert r.category == "nccl_error" and kind_word in r.fix.split(";")[0]


@pytest.mark.parametrize("line", [
    "[rank1]:[E528 08:52:46.164295950 ProcessGroupGloo.cpp:145] Gloo connectFullMesh failed with "
    "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
    "torch.distributed.DistNetworkError: The client socket has timed out after 600s while trying to connect to "
    "(10.0.0.1, 29500).",
])
def test_ranks_that_cannot_connect_fail_at_init(line):
    r = diagnose(line)
    assert (r.category, r.phase, r.phase_confidence) == ("nccl_error", "init", "high")
    assert "GLOO_SOCKET_IFNAME" in r.fix and r.action == "rollback"


def test_nccl_error_without_frames_is_placed_at_init_with_low_confidence():
    r = diagnose("RuntimeError: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)")
    assert (r.category, r.phase, r.phase_confidence) == ("nccl_error", "init", "low")
    # a hang is not a start-up failure: no guess
    r = diagnose("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE) ran "
                 "for 600059 milliseconds before timing out.")
    assert r.phase == "unknown"
    # a milestone the log reached wins over the guess
    r = diagnose("INFO 01-01 00:00:00 [gpu_worker.py:1] Available KV cache memory: 3.20 GiB\n"
                 "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)")
    assert (r.phase, r.phase_confidence) == ("kv_cache_allocation", "medium")


@pytest.mark.parametrize("line,category", [
    ("INFO 06-21 10:00:18 llm_engine.py:128] # GPU blocks: 0, # CPU blocks: 512", "no_kv_memory"),
    ("ValueError: Insufficient GPU memory for KV cache: num_gpu_blocks=0.", "no_kv_memory"),
    ("RuntimeError: Failed to load the model config. If the model is a custom model not yet available in the "
     "HuggingFace transformers library, consider setting `trust_remote_code=True` in LLM or using the "
     "`--trust-remote-code` flag in the CLI.", "trust_remote_code_required"),
    ("ValueError: Model architectures ['FooForCausalLM'] are not supported for now.", "model_not_supported"),
    ("ValueError: Tokenizer class QWenTokenizer does not exist or is not currently imported.", "model_not_supported"),
    ("RuntimeError: unable to write to file </torch_12_34_0>: No space left on device (28)", "shm_too_small"),
    ("huggingface_hub.errors.OfflineModeIsEnabled: Cannot reach https://huggingface.co/api/models/x/y: offline "
     "mode is enabled.", "model_not_found_or_auth"),
])
def test_more_wording_families(line, category):
    assert diagnose(line).category == category


def test_unknown_quotes_the_first_error_and_the_phase_reached():
    r = diagnose("INFO 01-01 00:00:00 [default_loader.py:1] Loading weights took 3.10 seconds\n"
                 "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert r.category == "unknown" and r.action == "rollback"
    assert "an illegal memory access" in r.summary and "the log reached: weights loaded" in r.summary


def test_every_category_has_a_deploy_action_and_the_readme_says_it():
    readme = (REPO / "README.md").read_text()
    for category in CATEGORIES:
        assert ACTIONS[category] in ("ladder", "refuse", "rollback"), category
        assert f"`{category}`" in readme, f"README's diagnosis table lacks {category}"
    assert MEMORY_CATEGORIES == {c for c in CATEGORIES if ACTIONS[c] == "ladder"}


# --- the CLI -----------------------------------------------------------------------------------
def _cli(*args, stdin=b""):
    return subprocess.run([sys.executable, "-m", "vllm_deploy", *args], input=stdin, capture_output=True,
                          cwd=REPO, timeout=60)


def test_cli_json_from_stdin():
    proc = _cli("diagnose", "--json", stdin=V1_KV.encode())
    assert proc.returncode == 0
    out = json.loads(proc.stdout)
    assert out["category"] == "kv_cache_too_small" and out["figures"]["estimated_max_model_len"] == 65408
    assert out["phase"] == "kv_cache_allocation" and out["phase_confidence"] == "high" and out["action"] == "ladder"


def test_cli_text_shows_phase_confidence_and_action():
    proc = _cli("diagnose", stdin=("INFO:     Application startup complete.\n" + OOM).encode())
    assert proc.returncode == 0
    assert b"category:   cuda_oom_runtime" in proc.stdout
    assert b"phase:      serving (confidence: medium; the log reached: serving)" in proc.stdout
    assert b"deploy:     ladder:" in proc.stdout


def test_cli_text_and_exit_codes(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("nothing to see\n")
    proc = _cli("diagnose", str(log))
    assert proc.returncode == 1 and b"category:   unknown" in proc.stdout
    missing = _cli("diagnose", str(tmp_path / "absent.log"))
    assert missing.returncode == 2 and b"cannot read" in missing.stderr


def test_cli_gpus_reads_csv_from_stdin():
    proc = _cli("gpus", "--json", stdin=b"0, GPU-a, NVIDIA L4, 23034, 70, 22964, 525.125.06\n")
    facts = json.loads(proc.stdout)
    assert proc.returncode == 0 and facts["gpu_count"] == 1 and facts["gpus"][0]["memory_free_mib"] == 22964


# vLLM 0.32's SchedulerConfig.verify_max_model_len (vllm/config/scheduler.py), raised while the config is
# validated, so pydantic wraps it the way the real ModelConfig fixture (25-...-pydantic.log) shows.
SCHEDULER_REFUSAL = "\n".join([
    "(APIServer pid=2301) pydantic_core._pydantic_core.ValidationError: 1 validation error for SchedulerConfig",
    "(APIServer pid=2301)   Value error, max_num_batched_tokens (4) must be greater than or equal to max_num_seqs (8). "
    "[type=value_error, input_value=ArgsKwargs((), {'runner_type': 'generate'}), input_type=ArgsKwargs]",
])


@pytest.mark.parametrize("log", [
    SCHEDULER_REFUSAL,
    "ValueError: max_num_batched_tokens (4) must be greater than or equal to max_num_seqs (8).",
])
def test_a_flag_combination_vllm_refuses_is_quoted(log):
    r = diagnose(log)
    assert r.category == "config_rejected"
    assert "max_num_batched_tokens (4) must be greater than or equal to max_num_seqs (8)" in r.summary
    assert "\n" not in r.summary and "max_num_batched_tokens at least max_num_seqs" in r.fix


def test_a_precise_category_wins_over_config_rejected():
    """The max-model-len refusal is also a pydantic 'Value error': its own category names the fix."""
    log = ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
           "  Value error, User-specified max_model_len (513) is greater than the derived max_model_len "
           "(max_position_embeddings=512 or model_max_length=None in model's config.json).")
    assert diagnose(log).category == "max_len_over_model_limit"


# --- an excerpt cut inside a traceback, before its error line ----------------------------------
def _frames(*funcs: str) -> str:
    return "\n".join(f'  File "/x/vllm/{f.split(":")[0]}.py", line 1, in {f.split(":")[-1]}\n    call()' for f in funcs)


@pytest.mark.parametrize("funcs,category,phase", [
    (["worker/worker:_warm_up_model", "worker/model_runner:capture_model"], "cuda_oom_after_kv", "graph_capture"),
    (["v1/worker/gpu_model_runner:_dummy_sampler_run", "models/llama:sample"], "cuda_oom_after_kv", "sampler_warmup"),
    (["v1/worker/gpu_worker:load_model", "model_executor/models/utils:make_layers", "models/llama:__init__"],
     "cuda_oom_weights", "model_loading"),
    (["worker/worker:init_device", "worker/worker:init_worker_distributed_environment",
      "torch/distributed/distributed_c10d:all_reduce"], "nccl_error", "init"),
    # reading the checkpoint fails for other reasons too (a weight name): no guess
    (["v1/worker/gpu_worker:load_model", "models/llama:load_weights"], "unknown", "model_loading"),
    # nothing usual at engine construction
    (["v1/engine/core:__init__", "v1/executor/abstract:__init__"], "unknown", "unknown"),
])
def test_a_traceback_cut_before_its_error(funcs, category, phase):
    r = diagnose("Traceback (most recent call last):\n" + _frames(*funcs))
    assert (r.category, r.phase) == (category, phase)
    if category != "unknown":
        assert r.confidence == "low" and r.phase_confidence == "medium" and "before its error line" in r.summary


def test_a_traceback_with_its_error_line_is_not_cut():
    r = diagnose("Traceback (most recent call last):\n" + _frames("worker/model_runner:capture_model") +
                 "\nKeyError: 'layers.0'\n")
    assert r.category == "unknown" and "KeyError" in r.summary


@pytest.mark.parametrize("line", [
    "INFO 05-26 07:50:20 [core.py:58] Initializing a V1 LLM engine (v0.8.5) with config: model='m', "
    "enforce_eager=False",
    "INFO 08-27 05:12:10 llm_engine.py:184] Initializing an LLM engine (v0.5.5) with config: model='m'",
    "INFO 05-26 07:50:26 [parallel_state.py:1004] rank 0 in world size 1 is assigned as DP rank 0, PP rank 0, TP rank 0",
])
def test_only_the_engine_config_or_distributed_setup_reached_is_init(line):
    r = diagnose(line + "\nRuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert (r.phase, r.phase_confidence, r.phase_reached) == ("init", "low", "engine_configured")
    r = diagnose(line + "\nINFO 01-01 00:00:00 [gpu_model_runner.py:1] Starting to load model m...\n" + OOM)
    assert (r.category, r.phase) == ("cuda_oom_weights", "model_loading")


@pytest.mark.parametrize("line,category,figure", [
    ("ValueError: Model architectures ['Qwen2ForCausalLM'] failed to be inspected. Please check the logs for more "
     "details.", "model_not_supported", None),
    ("ValueError: JinaEmbeddingsV4Model has no vLLM implementation and the Transformers implementation is not "
     "compatible with vLLM. Try setting VLLM_USE_V1=0.", "model_not_supported", None),
    ('  File "/x/transformers/models/auto/configuration_auto.py", line 710, in __getitem__\n    raise KeyError(key)\n'
     "KeyError: 'qwen2'", "model_not_supported", ("model_type", "qwen2")),
    ("ValueError: Cannot provide a placement group of placement_group_specs=[{'GPU': 1.0}, {'GPU': 1.0}] within "
     "1800 seconds. See `ray status` to make sure the cluster has enough resources.", "config_rejected", None),
    ("ValueError: Ray does not allocate any GPUs on the driver node. Consider adjusting the Ray placement group or "
     "running the driver on a GPU node.", "config_rejected", None),
    # Ray's host-memory monitor, not a CUDA OOM: no ladder; it killed a worker, so a rank is gone (round 16's threads)
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.", "lost_rank", None),
])
def test_model_and_ray_wordings(line, category, figure):
    r = diagnose(line)
    assert r.category == category and r.action == ACTIONS[category]
    if figure:
        assert r.figures[figure[0]] == figure[1]
    if category == "config_rejected":
        assert "ray status" in r.fix and r.phase == "init"


def test_an_error_the_model_registry_logged_is_model_not_supported():
    log = ("ERROR 03-02 17:03:02 registry.py:306]   File \"/x/vllm/model_executor/layers/logits_processor.py\", "
           "line 14, in <module>\n"
           "ERROR 03-02 17:03:02 registry.py:306]     from vllm.model_executor.layers.vocab_parallel_embedding import (\n")
    r = diagnose(log)
    assert (r.category, r.phase, r.confidence) == ("model_not_supported", "init", "medium")
    assert "clean venv" in r.fix
    # the same lines from another logger are no evidence
    assert diagnose(log.replace("registry.py", "core.py")).category == "unknown"


def test_no_kernel_image_without_other_evidence_is_placed_at_init_with_low_confidence():
    r = diagnose("RuntimeError: CUDA error: no kernel image is available for execution on the device")
    assert (r.category, r.phase, r.phase_confidence) == ("unsupported_dtype_or_gpu", "init", "low")
    r = diagnose("INFO 01-01 00:00:00 [default_loader.py:1] Loading weights took 3.10 seconds\n"
                 "RuntimeError: CUDA error: no kernel image is available for execution on the device")
    assert (r.phase, r.phase_confidence) == ("profile_run", "medium")


@pytest.mark.parametrize("config,phase", [
    ("Initializing a V1 LLM engine (v0.9.1) with config: model='m', enforce_eager=True, tensor_parallel_size=1",
     "kv_cache_allocation"),
    ("non-default args: {'model': 'm', 'enforce_eager': True}", "kv_cache_allocation"),
    ("Initializing a V1 LLM engine (v0.9.1) with config: model='m', enforce_eager=False", "graph_capture"),
])
def test_eager_mode_in_the_config_line_rules_out_graph_capture(config, phase):
    r = diagnose("\n".join([config, "INFO [kv_cache_utils.py:1] GPU KV cache size: 476,000 tokens", OOM]))
    assert (r.phase, r.phase_confidence) == (phase, "low")


@pytest.mark.parametrize("line", [
    "INFO 03-31 15:19:40 metrics.py:455] Avg prompt throughput: 12.3 tokens/s, Avg generation throughput: 40.1 "
    "tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 3.1%, CPU KV cache usage: 0.0%.",
    "INFO 03-31 15:19:40 [async_llm_engine.py:1] Finished request chatcmpl-1.",
    'INFO:     10.0.0.2:51234 - "POST /generate HTTP/1.1" 200 OK',
])
def test_serving_lines_before_the_error(line):
    r = diagnose(line + "\n" + OOM)
    assert (r.category, r.phase, r.phase_confidence) == ("cuda_oom_runtime", "serving", "medium")


@pytest.mark.parametrize("line", [
    "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.96 GiB total capacity)",
    "RuntimeError: HIP error: hipErrorOutOfMemory",
    "RuntimeError: Triton Error [CUDA]: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
])
def test_oom_wordings_of_other_devices_and_apis(line):
    r = diagnose('Traceback (most recent call last):\n  File "/x/vllm/worker/model_runner.py", line 1, in load_model\n'
                 + line)
    assert (r.category, r.phase) == ("cuda_oom_weights", "model_loading")


# --- wordings of issue 26 (round 2): each from vLLM's, transformers' or torch's source, or a fixture ------------
@pytest.mark.parametrize("line,category,phase,figure", [
    # vllm/model_executor/models/registry.py, _try_resolve_transformers (blind 036 has the first)
    ("ValueError: Cannot find model module. 'MiniMaxM1ForCausalLM' is not a registered model in the Transformers "
     "library (only relevant if the model is meant to be in Transformers) and 'AutoModel' is not present in the "
     "model config's 'auto_map' (relevant if the model is custom).", "model_not_supported", "init", None),
    ("ValueError: The Transformers implementation of 'FooForCausalLM' is not compatible with vLLM.",
     "model_not_supported", "init", None),
    # registry.py, _raise_for_unsupported: an architecture in _PREVIOUSLY_SUPPORTED_MODELS
    ("ValueError: Model architecture MPTForCausalLM was supported in vLLM until v0.10.2, and is not supported "
     "anymore. Please use an older version of vLLM if you want to use this model architecture.",
     "model_not_supported", "init", ("last_version", "0.10.2")),
    # transformers' configuration_auto.py, as logs retype it (quotes instead of its backticks)
    ("ValueError: The checkpoint you are trying to load has model type 'gpt_oss' but Transformers does not "
     "recognize this architecture.", "model_not_supported", "init", ("model_type", "gpt_oss")),
    # transformers' dynamic_module_utils.resolve_trust_remote_code, lower-cased and with typographic quotes as
    # pasted in vllm-project/vllm#9531
    ("valueerror: loading internvl2-8b/ requires you to execute the configuration file in that repo on your local "
     "machine. make sure you have read the code there to avoid malicious use, then set the option "
     "'trust_remote_code=true\u2019 to remove this error.", "trust_remote_code_required", "init", None),
    ("You can avoid this prompt in future by passing the argument 'trust_remote_code=True'.",
     "trust_remote_code_required", "init", None),
])
def test_round2_wordings(line, category, phase, figure):
    r = diagnose(line)
    assert (r.category, r.phase) == (category, phase) and r.action == ACTIONS[category]
    assert r.fix and r.phase_evidence
    if figure:
        assert r.figures[figure[0]] == figure[1]


def test_a_dropped_architecture_asks_for_an_older_vllm():
    r = diagnose("ValueError: Model architecture MPTForCausalLM was supported in vLLM until v0.10.2, and is not "
                 "supported anymore.")
    assert "older vLLM" in r.fix and "v0.10.2" in r.fix


@pytest.mark.parametrize("line,blocks", [
    # vllm/executor/executor_base.py (V0 0.6.3+): "# %s blocks: %d, # CPU blocks: %d" with the platform's device name
    ("INFO 03-14 18:57:59 [executor_base.py:111] # cuda blocks: 4739, # CPU blocks: 859", 4739),
    ("INFO 05-30 16:23:28 executor_base.py:110] # CUDA blocks: 5519, # CPU blocks: 9362", 5519),
    ("INFO 05-30 16:23:28 executor_base.py:110] # npu blocks: 812, # CPU blocks: 512", 812),
])
def test_v0_block_count_in_the_device_s_name(line, blocks):
    r = diagnose(line + "\n" + OOM)
    assert (r.category, r.phase_reached, r.figures["gpu_blocks"]) == ("cuda_oom_after_kv", "kv_cache_allocated", blocks)
    r = diagnose(line.replace(str(blocks), "0", 1))
    assert (r.category, r.phase) == ("no_kv_memory", "kv_cache_allocation")
    # the swap space's count is not the cache's
    assert diagnose("INFO x # CPU blocks: 0\n" + OOM).category == "cuda_oom"


@pytest.mark.parametrize("funcs,kind_word", [
    # V0 0.4 with Ray (blind 060): the custom all-reduce's set-up gathers its IPC handles at worker start
    (["distributed/device_communicators/custom_all_reduce:__init__",
      "distributed/device_communicators/custom_all_reduce:_gather_ipc_meta",
      "torch/distributed/distributed_c10d:all_gather_object"], "--disable-custom-all-reduce"),
    # pynccl.py's PyNcclCommunicator.__init__ warms NCCL up with one all_reduce
    (["distributed/device_communicators/pynccl:__init__", "distributed/device_communicators/pynccl:all_reduce"],
     "NCCL_DEBUG=INFO"),
    (["distributed/parallel_state:ensure_model_parallel_initialized", "distributed/parallel_state:__init__",
      "torch/distributed/distributed_c10d:broadcast"], "NCCL_DEBUG=INFO"),
    # a V0 Ray worker's init_device cut inside the process-group set-up (vllm-project/vllm, multi-node NCCL thread)
    (["executor/ray_utils:execute_method", "worker/worker:init_device",
      "worker/worker:init_worker_distributed_environment"], "NCCL_DEBUG=INFO"),
])
def test_a_traceback_cut_in_a_communicator_s_set_up_is_init(funcs, kind_word):
    r = diagnose("Traceback (most recent call last):\n" + _frames(*funcs))
    assert (r.category, r.phase, r.phase_confidence) == ("nccl_error", "init", "medium")
    assert kind_word in r.fix.split(";")[0]


@pytest.mark.parametrize("line", [
    # vllm/compilation/backends.py, during V1's profiling run (its first forward compiles the model)
    "INFO 05-26 07:51:10 [backends.py:430] Dynamo bytecode transform time: 6.21 s",
    "INFO 05-26 07:51:15 [backends.py:148] Compiling a graph for dynamic shape takes 4.55 s",
    "INFO 05-26 07:51:20 [monitor.py:33] torch.compile takes 10.76 s in total",
])
def test_compilation_lines_are_the_profiling_run(line):
    r = diagnose("Model loading took 14.99 GiB and 5.1 seconds\n" + line + "\n" + OOM)
    assert (r.category, r.phase, r.phase_reached) == ("cuda_oom_weights", "profile_run", "profiling")


@pytest.mark.parametrize("log,phase,confidence", [
    # NCCL's shared-memory transport (transport/shm.cc; public 009, 010): set up with the communicators
    ("NCCL WARN Error while creating shared memory segment /dev/shm/nccl-xxxxx (size 7340384)", "init", "low"),
    ("gpu1 NCCL WARN Error: failed to extend /dev/shm/nccl-XyZ to 9637892 bytes", "init", "low"),
    # a milestone still wins over the guess
    ("Available KV cache memory: 3.20 GiB\nNCCL WARN Error: failed to extend /dev/shm/nccl-XyZ to 9637892 bytes",
     "kv_cache_allocation", "medium"),
    # torch's own shared tensors are not NCCL's: no guess
    ("RuntimeError: unable to write to file </torch_12_34_0>: No space left on device (28)", "unknown", "none"),
])
def test_nccl_s_dev_shm_segment_is_set_up_at_init(log, phase, confidence):
    r = diagnose(log)
    assert (r.category, r.phase, r.phase_confidence) == ("shm_too_small", phase, confidence)


@pytest.mark.parametrize("seq,phase", [(4967570, "serving"), (120000, "serving"), (20518, "unknown"), (2, "unknown")])
def test_a_watchdog_timeout_past_start_up_s_collectives_is_serving(seq, phase):
    # torch's ProcessGroupNCCL watchdog (public 048: SeqNum=4967570 after 7 days)
    r = diagnose(f"[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: "
                 f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=73728, NumelOut=73728, Timeout(ms)=1800000) ran "
                 "for 1800542 milliseconds before timing out.")
    assert (r.category, r.phase) == ("nccl_error", phase)
    assert r.phase_confidence == ("low" if phase == "serving" else "none")


@pytest.mark.parametrize("tail,category", [
    # V0's enc_dec_model_runner.py / model_runner.py "Starting profile run for multi-modal models." then a worker
    # exits and the traceback is cut before its error (blind 045)
    (["(VllmWorkerProcess pid=67) INFO 11-05 04:16:48 multiproc_worker_utils.py:244] Worker exiting",
      "Traceback (most recent call last):",
      '  File "/x/vllm/engine/multiprocessing/engine.py", line 388, in run_mp_engine',
      "    engine = MQLLMEngine.from_engine_args(engine_args=engine_args,"], "cuda_oom_weights"),
    ([], "cuda_oom_weights"),
    # an error line after the profiling run started is that error, not a guess
    (["KeyError: 'model.layers.0.mlp.experts'"], "unknown"),
])
def test_a_log_that_stops_in_the_profiling_run(tail, category):
    r = diagnose("\n".join(["INFO 11-05 04:16:47 model_runner.py:1025] Loading model weights took 10.0714 GB",
                            "INFO 11-05 04:16:47 enc_dec_model_runner.py:297] Starting profile run for multi-modal "
                            "models."] + tail))
    assert (r.category, r.phase) == (category, "profile_run")
    if category != "unknown":
        assert r.confidence == "low" and "profiling run" in r.summary and r.action == "ladder"
        assert "--max-num-batched-tokens" in r.fix


@pytest.mark.parametrize("line,kind_word,phase,confidence", [
    # vllm/distributed/device_communicators/pynccl_wrapper.py (V0 0.4 to V1)
    ("ERROR 10-18 14:42:48 pynccl_wrapper.py:196] Failed to load NCCL library from libnccl.so.2 .It is expected if "
     "you are not running on NVIDIA/AMD GPUs.Otherwise, the nccl library might not exist, be corrupted or it does "
     "not support the current platform Linux-5.15.0-50-generic-x86_64-with-glibc2.31.", "VLLM_NCCL_SO_PATH", "init",
     "low"),
    # torch's TCPStore (vllm-project/vllm#17056, #12526): the ranks never met
    ("torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 1/4 clients joined.",
     "GLOO_SOCKET_IFNAME", "init", "high"),
    ("torch.distributed.DistStoreError: wait timeout after 600000ms, keys: /default_pg/0//cuda//0",
     "GLOO_SOCKET_IFNAME", "init", "high"),
    # torch's ProcessGroupNCCL watchdog taking the process down
    ("[rank0]:[E1024 10:00:00.000 ProcessGroupNCCL.cpp:1500] Some NCCL operations have failed or timed out. Due to "
     "the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
     "NCCL_DEBUG=INFO", "unknown", "none"),
])
def test_nccl_and_rendezvous_wordings(line, kind_word, phase, confidence):
    r = diagnose(line)
    assert (r.category, r.phase, r.phase_confidence) == ("nccl_error", phase, confidence)
    assert kind_word in r.fix.split(";")[0] and r.action == "rollback"


def test_ray_cannot_schedule_the_gpu_workers():
    # Ray's autoscaler warning while vLLM waits for its placement group
    line = ("(autoscaler +9m40s) Warning: The following resource request cannot be scheduled right now: {'CPU': 1.0, "
            "'GPU': 1.0}. This is likely due to all cluster resources being claimed by actors.")
    r = diagnose(line)
    assert (r.category, r.phase, r.confidence) == ("config_rejected", "init", "medium") and "ray status" in r.fix
    assert diagnose(line.replace("'GPU': 1.0", "'memory': 1.0")).category == "unknown"
    # a real error elsewhere wins over the warning
    assert diagnose(line + "\n" + OOM).category == "cuda_oom"


@pytest.mark.parametrize("frames,line,category,phase", [
    # V0 (0.5-0.6) weight loading: worker.load_model > model_runner.load_model > loader.load_model (blind 049)
    (["worker/worker:load_model", "worker/model_runner:load_model", "model_executor/model_loader/loader:load_model",
      "model_executor/model_loader/loader:_initialize_model"],
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 14.62 GiB "
     "of which 3.12 MiB is free.", "cuda_oom_weights", "model_loading"),
    # older torch (< 2.1) wording inside the checkpoint reader
    (["worker/worker:load_model", "model_executor/models/llama:load_weights"],
     "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 500.00 MiB (GPU 0; 23.69 GiB total capacity; "
     "22.34 GiB already allocated; 1.19 MiB free; 22.60 GiB reserved in total by PyTorch)", "cuda_oom_weights",
     "model_loading"),
    # a quantized checkpoint repacked after loading (model_loader/utils.py process_weights_after_loading, Marlin)
    (["v1/worker/gpu_model_runner:load_model", "model_executor/model_loader/utils:process_weights_after_loading",
      "model_executor/layers/quantization/gptq_marlin:process_weights_after_loading"],
     "RuntimeError: CUDA error: out of memory", "cuda_oom_weights", "model_loading"),
    # the OOM message's first line lost in the excerpt: torch's detail alone (CUDACachingAllocator.cpp)
    ([], "ss has 23.40 GiB memory in use. Of the allocated memory 22.88 GiB is allocated by PyTorch, and 188.29 MiB is "
         "reserved by PyTorch but unallocated.", "cuda_oom", "unknown"),
    (["v1/engine/core:run_busy_loop", "v1/worker/gpu_model_runner:execute_model"],
     "GPU 0 has a total capacity of 23.57 GiB of which 154.25 MiB is free. Including non-PyTorch memory, this process "
     "has 23.40 GiB memory in use.", "cuda_oom_runtime", "serving"),
])
def test_oom_wordings_and_the_frames_that_place_them(frames, line, category, phase):
    r = diagnose("Traceback (most recent call last):\n" + _frames(*frames) + "\n" + line if frames else line)
    assert (r.category, r.phase) == (category, phase) and r.action == "ladder"


def test_a_multi_modal_profiling_run_and_the_crashes_that_are_not_an_oom():
    # V1 gpu_model_runner.profile_run: "Encoder cache will be initialized with a budget of %s tokens, and profiled
    # with %s %s items of the maximum feature size."
    start = ("INFO 05-30 07:44:00 [gpu_model_runner.py:5132] Model loading took 21.42 GiB memory and 175.2 seconds\n"
             "INFO 05-30 07:44:00 [gpu_model_runner.py:6136] Encoder cache will be initialized with a budget of 32768 "
             "tokens, and profiled with 2 image items of the maximum feature size.\n")
    r = diagnose(start + OOM)
    assert (r.category, r.phase, r.phase_reached) == ("cuda_oom_weights", "profile_run", "profiling")
    assert diagnose(start).category == "cuda_oom_weights"
    # a segfault or the host's OOM killer there is no CUDA OOM
    for crash in ["!!!!!!! Segfault encountered !!!!!!!\nRuntimeError: Engine core initialization failed.",
                  "ERROR 05-30 07:45:00 [core_client.py:1] Engine core proc EngineCore_DP0 died unexpectedly, "
                  "killed by signal -9", "Killed"]:
        r = diagnose(start + crash)
        assert (r.category, r.phase) == ("unknown", "profile_run"), crash


@pytest.mark.parametrize("line", [
    # uvicorn starts the API server once the engine is up (V0 MQLLMEngine and V1)
    "INFO:     Started server process [1]",
    "INFO:     Waiting for application startup.",
])
def test_the_api_server_starting_is_serving(line):
    r = diagnose(line + "\n" + OOM)
    assert (r.category, r.phase, r.phase_confidence) == ("cuda_oom_runtime", "serving", "medium")


@pytest.mark.parametrize("line,reached,category,phase", [
    # vLLM 0.20+ start-up lines (monitor.py, gpu_model_runner.py, gpu_worker.py), as they appear in public logs
    ("(EngineCore pid=1501) INFO [monitor.py:53] torch.compile took 22.16 s in total", "profiling",
     "cuda_oom_weights", "profile_run"),
    ("(EngineCore pid=75) INFO Initial profiling/warmup run took 100.46 s", "profiling", "cuda_oom_weights",
     "profile_run"),
    ("(EngineCore pid=75) INFO Profiling CUDA graph memory: PIECEWISE=51, FULL=35", "profiling", "cuda_oom_weights",
     "profile_run"),
    ("(EngineCore pid=75) INFO Estimated CUDA graph memory: 1.58 GiB total", "memory_profiled", "cuda_oom_after_kv",
     "kv_cache_allocation"),
    ("(Worker_TP0 pid=514) INFO [gpu_worker.py:621] CUDA graph pool memory: 1.49 GiB (actual), 1.58 GiB (estimated)",
     "cuda_graphs_captured", "cuda_oom_after_kv", "sampler_warmup"),
    ("(Worker_TP0 pid=123) Free memory on device (264.19/267.69 GiB) on startup. Actual usage is 205.08 GiB for "
     "weight, 3.75 GiB for peak activation, 1.63 GiB for non-torch memory, and 0.14 GiB for CUDAGraph memory.",
     "cuda_graphs_captured", "cuda_oom_after_kv", "sampler_warmup"),
])
def test_newer_v1_start_up_lines(line, reached, category, phase):
    r = diagnose(line + "\n" + OOM)
    assert (r.phase_reached, r.category, r.phase) == (reached, category, phase)


def test_an_overridden_block_count_is_not_an_empty_cache():
    # gpu_worker.py with num_gpu_blocks_override: "Overriding num_gpu_blocks=0 with num_gpu_blocks_override=512"
    r = diagnose("INFO Overriding num_gpu_blocks=0 with num_gpu_blocks_override=512\n" + OOM)
    assert r.category != "no_kv_memory"


@pytest.mark.parametrize("line", [
    # transformers' dynamic_module_utils.resolve_trust_remote_code names the auto class's file
    "ValueError: Loading THUDM/glm-4v-9b requires you to execute the image processor file in that repo on your local "
    "machine.",
    "ValueError: Loading openbmb/MiniCPM-o-2_6 requires you to execute the feature extractor file in that repo",
    "ValueError: Loading THUDM/chatglm3-6b requires you to execute the tokenizer file",     # a line cut there
])
def test_remote_code_of_any_auto_class(line):
    r = diagnose(line)
    assert (r.category, r.phase) == ("trust_remote_code_required", "init") and "--trust-remote-code" in r.fix


@pytest.mark.parametrize("before", [
    # V1 core.py run_engine_core: the busy loop failed ("EngineCore failed to start." is start-up's)
    ["(EngineCore_0 pid=2651) ERROR 06-11 11:46:39 [core.py:517] EngineCore encountered a fatal error."],
    # V1 logging_utils/dump_input.py, logged when a step's model execution fails
    ["(EngineCore_DP0 pid=413) ERROR 11-10 12:30:57 [dump_input.py:79] Dumping scheduler stats: "
     "SchedulerStats(num_running_reqs=1, num_waiting_reqs=0)"],
    ["ERROR 11-10 12:30:57 [dump_input.py:69] Dumping input data for V1 LLM engine (v0.11.0) with config: model='m'"],
])
def test_v1_busy_loop_failures_are_serving(before):
    r = diagnose("\n".join(before + [OOM]))
    assert (r.category, r.phase, r.phase_confidence) == ("cuda_oom_runtime", "serving", "medium")
    r = diagnose("\n".join(["ERROR [core.py:1] EngineCore failed to start.", OOM]))
    assert r.category == "cuda_oom"


@pytest.mark.parametrize("line,seqs", [
    # V1 gpu_model_runner._dummy_pooler_run (pooling models), and vllm-ascend's NPU wording of the sampler's
    ("RuntimeError: CUDA out of memory occurred when warming up pooler (task='embed') with 256 dummy requests. Please "
     "try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.", 256),
    ("RuntimeError: CUDA out of memory occurred when warming up pooler with 1024 dummy requests.", 1024),
    ("RuntimeError: NPU out of memory occurred when warming up sampler with 512 dummy requests.", 512),
])
def test_the_pooler_s_warm_up_is_the_sampler_s(line, seqs):
    r = diagnose(line)
    assert (r.category, r.phase, r.phase_confidence) == ("cuda_oom_after_kv", "sampler_warmup", "high")
    assert r.figures["dummy_requests"] == seqs and f"try {seqs // 2}" in r.fix


@pytest.mark.parametrize("line,category,word", [
    # V1's attention-backend selector (vllm/platforms/cuda.py), as in vllm-project/vllm issues on Gemma-4/GPT-OSS
    ("ValueError: Selected backend AttentionBackendEnum.FLASHINFER is not valid for this configuration. Reason: "
     "['head_size not supported']", "config_rejected", "--attention-backend"),
    ("ValueError: Selected backend AttentionBackendEnum.FLASH_ATTN is not valid for this configuration. Reason: "
     "['kv_cache_dtype not supported']", "config_rejected", "--kv-cache-dtype auto"),
    ("ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(head_size=64). Reasons: "
     "{FLASH_ATTN: [kv_cache_dtype not supported]}", "config_rejected", "--attention-backend"),
    # the GPU itself is the reason
    ("ValueError: Selected backend AttentionBackendEnum.FLASH_ATTN is not valid for this configuration. Reason: "
     "['compute capability not supported']", "unsupported_dtype_or_gpu", "kernel"),
])
def test_the_attention_backend_selector(line, category, word):
    r = diagnose(line)
    assert r.category == category and word in r.fix and r.action == "rollback"
    if category == "config_rejected":
        assert (r.phase, r.phase_confidence) == ("model_loading", "low")
        frames = "Traceback (most recent call last):\n" + _frames("v1/worker/gpu_worker:init_device",
                                                                 "v1/worker/gpu_model_runner:__init__")
        assert diagnose(frames + "\n" + line).phase == "init"       # its own frames say where


@pytest.mark.parametrize("line,word,figure", [
    # torch's CUDA init warning on an HGX/DGX whose nvidia-fabricmanager is down (c10/cuda/CUDAFunctions.cpp)
    ("UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions "
     "before calling NumCudaDevices() that might have already set an error? Error 802: system not yet initialized "
     "(Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:109.)", "nvidia-fabricmanager", None),
    # the NVIDIA container runtime refusing an image built for a newer CUDA than the driver
    ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.9, please update your driver to a "
     "newer version, or use an earlier cuda container: unknown.", "--gpus", ("image_cuda", 12.9)),
    # Docker without the NVIDIA runtime
    ('docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].', "toolkit",
     None),
    ("RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.", "nvidia-smi", None),
])
def test_driver_and_container_runtime_wordings(line, word, figure):
    r = diagnose(line)
    assert (r.category, r.phase, r.action) == ("driver_mismatch_or_no_driver", "init", "refuse") and word in r.fix
    if figure:
        assert r.figures[figure[0]] == figure[1] and "12.9" in r.summary


@pytest.mark.parametrize("line", [
    # CUDA's cudaErrorInvalidDevice when a worker sets a device past CUDA_VISIBLE_DEVICES
    "RuntimeError: CUDA error: invalid device ordinal\nCUDA kernel errors might be asynchronously reported at some "
    "other API call, so the stacktrace below might be incorrect.",
    # torch's lazy CUDA init assert for the same
    "torch.cuda.DeferredCudaCallError: CUDA call failed lazily at initialization with error: device >= 0 && device < "
    "num_gpus INTERNAL ASSERT FAILED at \"../aten/src/ATen/cuda/CUDAContext.cpp\":50",
])
def test_a_device_past_the_visible_ones_is_too_few_gpus(line):
    r = diagnose(line)
    assert (r.category, r.phase, r.action) == ("tp_not_divisible", "init", "refuse")
    assert "CUDA_VISIBLE_DEVICES" in r.fix


def test_a_file_missing_from_the_model_repository():
    # huggingface_hub.errors.EntryNotFoundError (a file the repository lacks, e.g. a wrong revision or subfolder)
    r = diagnose("huggingface_hub.errors.EntryNotFoundError: 404 Client Error. (Request ID: Root=1-abc)\n"
                 "Entry Not Found for url: https://huggingface.co/org/model/resolve/main/config.json.")
    assert (r.category, r.phase) == ("model_not_found_or_auth", "init")


def test_an_oom_on_a_gpu_other_processes_share():
    # torch >= 2.1 lists every process on the GPU (blind 031: two replicas on one GPU under KubeRay)
    r = diagnose("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.59 GiB. GPU 0 has a total capacity "
                 "of 47.50 GiB of which 590.81 MiB is free. Process 4057874 has 20.04 GiB memory in use. Process "
                 "4060801 has 26.40 GiB memory in use. Of the allocated memory 25.76 GiB is allocated by PyTorch.")
    assert r.category == "cuda_oom" and r.figures["gpu_processes_gib"] == [20.04, 26.4]
    assert "2 processes hold this GPU (20.04 + 26.4 GiB)" in r.summary
    assert r.fix.startswith("Another process shares this GPU") and "--gpu-memory-utilization" in r.fix
    assert "gpu_processes_gib" not in diagnose(OOM).figures


def test_a_triton_kernel_past_the_gpu_s_shared_memory():
    # triton.runtime.errors.OutOfResources (an fp8 MLA decode kernel on consumer Blackwell, SM 12.0)
    line = ("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 102400, Hardware limit: "
            "101376. Reducing block sizes or `num_stages` may help.")
    r = diagnose(line)
    assert (r.category, r.phase) == ("unsupported_dtype_or_gpu", "unknown") and "--kv-cache-dtype auto" in r.fix
    assert r.figures["smem_required"] == 102400 and "101376" in r.summary
    r = diagnose("Model loading took 14.99 GiB and 5.1 seconds\n" + line)
    assert (r.phase, r.phase_confidence) == ("profile_run", "medium")


@pytest.mark.parametrize("line,category,phase", [
    # vllm/worker/worker_base.py execute_method: f"Error executing method {method!r}. This might cause deadlock ..."
    ("ERROR 05-06 08:55:19 worker_base.py:145] Error executing method 'load_model'. This might cause deadlock in "
     "distributed execution.", "cuda_oom_weights", "model_loading"),
    ("ERROR 05-06 08:55:19 worker_base.py:145] Error executing method 'determine_num_available_blocks'. This might "
     "cause deadlock in distributed execution.", "cuda_oom_weights", "profile_run"),
])
def test_the_quoted_worker_method(line, category, phase):
    r = diagnose(line + "\n" + OOM)
    assert (r.category, r.phase) == (category, phase)


def test_a_v0_engine_step_that_hung_was_serving():
    # vllm/engine/async_llm_engine.py run_engine_loop, after an NCCL error on another rank
    r = diagnose("ERROR 07-31 11:57:33 async_llm_engine.py:658] Engine iteration timed out. This should never happen!\n"
                 "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)")
    assert (r.category, r.phase, r.phase_confidence) == ("nccl_error", "serving", "medium")


@pytest.mark.parametrize("line,category,phase,word", [
    # vLLM's argument parser (argparse's "%(prog)s: error: %(message)s"; dev threads containers/ramalama and
    # vllm-project/vllm-omni): a sampling parameter or a plugin's flag the installed vLLM does not know
    ("usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...\n"
     "vllm: error: unrecognized arguments: --temperature 0.8", "config_rejected", "init", "vllm serve --help"),
    ("vllm serve: error: argument --dtype: invalid choice: 'fp4' (choose from auto, half, float16)",
     "config_rejected", "init", "vllm serve --help"),
    # Ray's raylet (src/ray/object_manager/plasma/store_runner.cc) before any engine starts
    ("[2026-03-25 05:44:29,435 W 39 39] (raylet) store_runner.cc:83: System memory request exceeds memory available "
     "in /dev/shm. The request is for 10200547328 bytes, and the amount available is 9663676416 bytes.",
     "shm_too_small", "init", "--shm-size"),
    # rdma-core's mlx5 provider under NCCL's IB transport (OpenRLHF/OpenRLHF weight sync over NCCL)
    ("(LLMRayActor pid=90738, ip=172.19.24.110) mlx5: host_unknown: got completion with error:",
     "nccl_error", "init", "NCCL_IB_DISABLE"),
])
def test_cli_ray_store_and_infiniband_wordings(line, category, phase, word):
    r = diagnose(line)
    assert (r.category, r.phase) == (category, phase) and word in r.fix


def test_a_cut_remote_code_error_under_its_frame():
    # transformers/dynamic_module_utils.py resolve_trust_remote_code raises only its ValueError (BerriAI/litellm#6121:
    # the message cut after "Loading deepse")
    r = diagnose('  File "/x/transformers/dynamic_module_utils.py", line 678, in resolve_trust_remote_code\n'
                 "    raise ValueError(\nValueError: Loading deepse")
    assert (r.category, r.phase) == ("trust_remote_code_required", "init")
    assert diagnose("ValueError: Loading deepse").category == "unknown"


@pytest.mark.parametrize("after,phase", [
    # Ray prints its workers' deduplicated lines late (QwenLM/Qwen#819: the OOM, then the workers' capture line)
    ("(RayWorkerVllm pid=74362) INFO 12-18 21:44:36 model_runner.py:394] Capturing the model for CUDA graphs. This "
     "may lead to unexpected consequences if the model is not static. [repeated 7x across cluster]", "graph_capture"),
    # an error line pasted above the log's last lines (xorbitsai/inference: the profiling line, V0 model_runner.py)
    ("INFO 07-11 13:46:49 model_runner.py:858] CUDA graphs can take additional 1~3 GiB memory per GPU.",
     "graph_capture"),
])
def test_an_error_heading_the_log_is_placed_by_the_lines_after_it(after, phase):
    r = diagnose("RuntimeError: CUDA error: out of memory\n" + after)
    assert (r.category, r.phase, r.phase_confidence) == ("cuda_oom_after_kv", phase, "low")
    # not after a start-up that came first, nor past another error line
    assert diagnose("x\n" * 300 + "RuntimeError: CUDA error: out of memory\n" + after).phase == "unknown"
    assert diagnose("RuntimeError: CUDA error: out of memory\nValueError: other\n" + after).phase == "unknown"


def test_triton_without_an_active_driver():
    # vllm/triton_utils/importing.py (0.9+); gpustack/gpustack: a vLLM container without libcuda.so.1
    line = ("INFO 12-10 12:04:47 [importing.py:44] Triton is installed but 0 active driver(s) found (expected 1). "
            "Disabling Triton to prevent runtime errors.")
    r = diagnose(line)
    assert (r.category, r.phase, r.confidence) == ("driver_mismatch_or_no_driver", "init", "medium")
    assert "libcuda.so.1" in r.summary
    # weak: a failure named elsewhere wins; a CPU or TPU build prints it too
    assert diagnose(line + "\n" + OOM).category == "cuda_oom"
    assert diagnose("INFO [__init__.py:235] Automatically detected platform cpu.\n" + line).category == "unknown"
    assert diagnose("INFO [__init__.py:59] TPU info: node_name=tpu-0\n" + line).category == "unknown"


@pytest.mark.parametrize("args,category", [
    # gpustack/gpustack: gemma-3-27b (32 heads) scheduled on 3 GPUs, the excerpt stops at the server's version line
    ("Run vllm with arguments: serve /m/gemma-3-27b-it --max-model-len 8192 --tensor-parallel-size 3 --port 40059",
     "tp_not_divisible"),
    ("non-default args: {'model': '/m', 'tensor_parallel_size': 6}", "tp_not_divisible"),
    ("non-default args: {'model': '/m', 'tensor_parallel_size': 4}", "unknown"),
])
def test_a_start_up_that_stops_with_an_odd_tensor_parallel_size(args, category):
    log = args + "\nINFO 06-19 11:30:25 [api_server.py:1043] vLLM API server version 0.8.5.post1"
    r = diagnose(log)
    assert r.category == category and (r.confidence == "low" if category != "unknown" else True)
    assert r.phase == ("init" if category != "unknown" else "unknown")
    # past the weights, or with an error line of its own, the size is not the guess
    assert diagnose(log + "\nINFO Loading model weights took 14.9 GiB").category != "tp_not_divisible"
    assert diagnose(log + "\nValueError: something else").category == "unknown"


def test_a_cut_request_traceback_is_serving():
    # V0's AsyncLLMEngine answering a request under uvicorn, cut before its error (vllm-project/vllm OOM thread)
    r = diagnose(_frames("engine/async_llm_engine:generate", "engine/async_llm_engine:_process_request",
                         "uvicorn/protocols/http/httptools_impl:run_asgi"))
    assert (r.category, r.phase) == ("unknown", "serving")


def test_a_notebook_traceback_quoting_vllm_s_source():
    # IPython's layout (File ~/...:722, in ..., "-->" and numbered source lines) quotes V0's
    # logger.info("Loading model weights took ...") in model_runner.py load_model: no milestone, the frame says where
    log = ("File ~/env/lib/python3.10/site-packages/vllm/worker/model_runner.py:722, in GPUModelRunnerBase.load_model"
           "(self)\n    720 logger.info(\"Starting to load model %s...\", self.model_config.model)\n"
           "--> 722     self.model = get_model(model_config=self.model_config,\n"
           "    732 logger.info(\"Loading model weights took %.4f GB\",\n")
    r = diagnose(log)
    assert (r.category, r.phase, r.phase_reached) == ("unknown", "model_loading", "none")


@pytest.mark.parametrize("line,phase", [
    # vllm/engine/multiprocessing/engine.py: MQLLMEngine.start() logs its loop's error as repr(e)
    ("ERROR 12-19 09:33:44 engine.py:135] OutOfMemoryError('Error in model execution (input dumped to "
     "/tmp/err_execute_model_input_20241219-093344.pkl): CUDA out of memory. Tried to allocate 524.00 MiB.')",
     "serving"),
    # the profiling run's error through the same wrapper, raised (str) at start-up: no phase from the wrapper
    ("torch.OutOfMemoryError: Error in model execution (input dumped to /tmp/err_execute_model_input_2025.pkl): "
     "CUDA out of memory. Tried to allocate 7.00 GiB.", "unknown"),
])
def test_the_mq_engine_loop_s_repr_of_a_model_execution_error(line, phase):
    assert diagnose(line).phase == phase


# --- wordings of issue 26 (round 3): from vLLM's, Python's, uvicorn's, Ray's and RL trainers' source or logs -------
_ENGINE_ARGS_TB = ("Traceback (most recent call last):\n"
                   '  File "/x/openrlhf/trainer/ray/vllm_engine.py", line 58, in __init__\n'
                   "    self.llm = vllm.LLM(*args, **kwargs)\n"
                   '  File "/x/vllm/entrypoints/llm.py", line 210, in __init__\n'
                   "    engine_args = EngineArgs(\n")


@pytest.mark.parametrize("log,argument", [
    # Python 3.10+ names the dataclass: vllm/entrypoints/llm.py LLM.__init__ passes **kwargs to EngineArgs(...)
    # (OpenRLHF/OpenRLHF#702: worker_use_ray, removed in vLLM 0.7.0)
    (_ENGINE_ARGS_TB + "TypeError: EngineArgs.__init__() got an unexpected keyword argument 'worker_use_ray'",
     "worker_use_ray"),
    # the API server's AsyncEngineArgs (hiyouga/LlamaFactory#6523: limit_mm_per_prompt on vLLM 0.5.3)
    ("TypeError: AsyncEngineArgs.__init__() got an unexpected keyword argument 'limit_mm_per_prompt'",
     "limit_mm_per_prompt"),
    # Python 3.8/3.9 print a bare __init__(): the traceback's EngineArgs( line just above names the class
    (_ENGINE_ARGS_TB + "TypeError: __init__() got an unexpected keyword argument 'worker_use_ray'", "worker_use_ray"),
    (_ENGINE_ARGS_TB + "    ^^^^^^^^^^^\nTypeError: __init__() got an unexpected keyword argument 'disable_log_requests'",
     "disable_log_requests"),
])
def test_an_engine_argument_the_installed_vllm_does_not_have(log, argument):
    r = diagnose(log)
    assert (r.category, r.phase, r.phase_confidence, r.action) == ("config_rejected", "init", "high", "rollback")
    assert r.figures["argument"] == argument and f"'{argument}'" in r.summary and "pin vLLM" in r.fix


@pytest.mark.parametrize("log", [
    # a model class's constructor (an out-of-tree model written for another vLLM) is not an engine argument
    "TypeError: LlamaForCausalLM.__init__() got an unexpected keyword argument 'prefix'",
    "TypeError: __init__() got an unexpected keyword argument 'prefix'",
    # a call after start-up (LLM.generate's signature), not the engine's configuration
    "TypeError: LLM.generate() got an unexpected keyword argument 'prompt_token_ids'",
])
def test_other_unexpected_keyword_arguments_are_not_the_engine_s(log):
    assert diagnose(log).category != "config_rejected"


_RAY_TB = ("Traceback (most recent call last):\n"
           '  File "/x/vllm/engine/ray_utils.py", line 37, in execute_method\n'
           "    return executor(*args, **kwargs)")


@pytest.mark.parametrize("line,phase", [
    # V0 0.4 vllm/engine/ray_utils.py: logger.exception(f"Error executing method {method}. This might cause ...")
    # just before the traceback (blind2 039: an excerpt cut inside it)
    ("(RayWorkerVllm pid=14289) ERROR 04-17 09:00:33 ray_utils.py:44] Error executing method init_device. This might "
     "cause deadlock in distributed execution.", "init"),
    # vllm/worker/worker_base.py from 0.6 quotes it ({method!r}); V1's ray_utils.RayWorkerWrapper inherits it
    ("ERROR 05-06 08:55:19 worker_base.py:145] Error executing method 'load_model'. This might cause deadlock in "
     "distributed execution.", "model_loading"),
    ("ERROR worker_base.py:145] Error executing method 'determine_num_available_blocks'. This might cause deadlock in "
     "distributed execution.", "profile_run"),
    ("ERROR worker_base.py:145] Error executing method 'initialize_cache'. This might cause deadlock in distributed "
     "execution.", "kv_cache_allocation"),
    ("ERROR worker_base.py:145] Error executing method 'compile_or_warm_up_model'. This might cause deadlock in "
     "distributed execution.", "graph_capture"),
    # V0 0.2-0.3 Worker methods
    ("ERROR ray_utils.py:30] Error executing method profile_num_available_blocks. This might cause deadlock in "
     "distributed execution.", "profile_run"),
    ("ERROR ray_utils.py:30] Error executing method warm_up_model. This might cause deadlock in distributed "
     "execution.", "graph_capture"),
    # vllm/executor/multiproc_worker_utils.py: "Exception in worker %s while processing method %s."
    ("(VllmWorkerProcess pid=29708) ERROR 09-03 12:08:10 multiproc_worker_utils.py:226] Exception in worker "
     "VllmWorkerProcess while processing method load_model.", "model_loading"),
    ("ERROR worker_base.py:620] Error executing method 'execute_model'. This might cause deadlock in distributed "
     "execution.", "serving"),
    # near miss: another line between the method line and the traceback: not this traceback's method
    ("ERROR ray_utils.py:44] Error executing method init_device. This might cause deadlock in distributed "
     "execution.\nINFO 04-17 09:00:34 llm_engine.py:100] Initializing an LLM engine", "unknown"),
])
def test_the_worker_method_logged_above_a_cut_traceback(line, phase):
    r = diagnose(line + "\n" + _RAY_TB)
    assert r.phase == phase
    if phase != "unknown":
        assert r.phase_confidence == "medium" and "method" in r.phase_evidence


_UVICORN_START = ("INFO:     Started server process [1]\nINFO:     Waiting for application startup.\n"
                  "INFO:     Application startup complete.\n")
_BIND = "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use"


@pytest.mark.parametrize("log,phase", [
    # uvicorn's Server.startup binds after the app's lifespan start-up (blind 027, blind2 042)
    (_UVICORN_START + _BIND + "\nINFO:     Waiting for application shutdown.", "init"),
    # vLLM's route list and its API-server line come before the bind too
    ("INFO 09-19 08:57:55 launcher.py:19] Available routes are:\n" + _UVICORN_START + _BIND, "init"),
    # as pasted in a markdown quote around a CI log ("> " then buildkite's "  | ")
    ("\n".join(">   | " + line for line in (_UVICORN_START + _BIND).splitlines()), "init"),
    # near miss: a request was served before the bind error (some later bind, not the server's): serving
    (_UVICORN_START + 'INFO:     10.0.0.1:5000 - "POST /v1/completions HTTP/1.1" 200 OK\n'
     "OSError: [Errno 98] Address already in use", "serving"),
])
def test_a_bind_error_after_the_api_server_s_start_up_lines(log, phase):
    r = diagnose(log)
    assert (r.category, r.phase, r.phase_confidence) == ("port_in_use", phase, "medium")
    assert r.figures.get("port") in (8000, None)


@pytest.mark.parametrize("before,error,category,phase", [
    # OpenRLHF's worker wrap (openrlhf/trainer/ray/vllm_worker_wrap.py update_weight) before an IB error (blind2 041)
    ("(LLMRayActor pid=90621, ip=172.19.24.110) update weight: model.embed_tokens.weight, dtype: torch.bfloat16, "
     "shape: torch.Size([152064, 5120])", "(LLMRayActor pid=90738, ip=172.19.24.110) mlx5: host_unknown: got "
     "completion with error:", "nccl_error", "serving"),
    # verl's sharding manager (log_gpu_memory_usage("After sync model weights in sharding manager"))
    ("After sync model weights in sharding manager, memory allocated (GB): 10.52, memory reserved (GB): 12.01",
     "RuntimeError: NCCL error: unhandled system error", "nccl_error", "serving"),
    # the weight update's own frames: its load_weights is no start-up (vLLM's examples/offline_inference/rlhf_utils.py
    # WorkerExtension.update_weight; OpenRLHF's update_weight_cuda_ipc; verl's LLM.sync_model_weights)
    ("Traceback (most recent call last):\n" + _frames("x/vllm_worker_wrap:update_weight", "models/qwen2:load_weights"),
     OOM, "cuda_oom_runtime", "serving"),
    ("Traceback (most recent call last):\n" + _frames("third_party/vllm/llm:sync_model_weights",
                                                      "models/llama:load_weights"), OOM, "cuda_oom_runtime", "serving"),
    # near miss: load_weights alone is the start-up's weight loading
    ("Traceback (most recent call last):\n" + _frames("worker/worker:load_model", "models/qwen2:load_weights"),
     OOM, "cuda_oom_weights", "model_loading"),
])
def test_an_rl_trainer_s_weight_sync_is_serving(before, error, category, phase):
    r = diagnose(before + "\n" + error)
    assert (r.category, r.phase) == (category, phase)


_PROFILED = ("(RayWorkerWrapper pid=1463574, ip=192.168.10.60) INFO 03-27 10:29:01 [worker.py:267] Memory profiling "
             "takes 4.26 seconds")
_CAPTURING = ("(RayWorkerWrapper pid=1861983) INFO 03-27 10:29:03 [model_runner.py:1442] Capturing cudagraphs for "
              "decoding. This may lead to unexpected consequences if the model is not static.")


@pytest.mark.parametrize("log,category,phase", [
    # Ray's log deduplication prints the other workers' copies of an earlier line late (blind2 033: the memory
    # profiling of 30 workers after one worker's graph-capture line): no step back
    ([_CAPTURING, _PROFILED + " [repeated 30x across cluster]"], "cuda_oom_after_kv", "graph_capture"),
    ([_CAPTURING, _PROFILED + " [repeated 30x across cluster]", OOM], "cuda_oom_after_kv", "graph_capture"),
    # near miss: the same line without Ray's mark is read where it stands
    ([_CAPTURING, _PROFILED, OOM], "cuda_oom_after_kv", "kv_cache_allocation"),
])
def test_ray_s_late_copies_of_earlier_lines_are_no_step_back(log, category, phase):
    r = diagnose("\n".join(log))
    assert (r.category, r.phase) == (category, phase)


def _diagnosed_as(log, category, phase, word):
    """The category, phase and the deploy's action for it; `word` (when given) is in the fix."""
    r = diagnose(log)
    assert (r.category, r.phase) == (category, phase) and r.action == ACTIONS[category]
    if word:
        assert word in r.fix


@pytest.mark.parametrize("log,category,phase,word", [
    # vLLM executor/ray_utils.py initialize_ray_cluster: the caller's own placement group has too few GPU bundles
    ("ValueError: The number of required GPUs exceeds the total number of available GPUs in the placement group.",
     "config_rejected", "init", "placement group of your own"),
    # the same in 0.6+ with its figures, on another device ("TPU")
    ("ValueError: The number of required TPUs exceeds the total number of available TPUs in the placement group. "
     "Required number of devices: 8. Total number of devices: 4.", "config_rejected", "init", "ray status"),
    # ray_utils.py: the driver's node has no GPU Ray can give (every GPU in another placement group's bundles)
    ("ValueError: Current node has no GPU available. current_node_resource={'memory': 8.0, 'GPU_group_0_ab': 1.0}. "
     "vLLM engine cannot start without GPU.", "config_rejected", "init", "VLLM_HOST_IP"),
    # ray_utils.py _verify_bundles
    ("RuntimeError: driver node id 5b2e0c is not included in a placement group 0a1b. Node id -> bundles {}. You don't "
     "have enough GPUs available in a current node.", "config_rejected", "init", "ray status"),
    ("ValueError: Placement group bundle cannot have more than 1 GPU.", "config_rejected", "init", "one bundle"),
    # newer vLLM logs the cluster-wide shortage as a warning and waits: weak, an error elsewhere wins
    ("WARNING 02-02 19:54:20 ray_utils.py:315] The number of required GPUs exceeds the total number of available GPUs "
     "in the placement group.\nINFO 01-01 00:00:00 [gpu_model_runner.py:1] Starting to load model m...\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.", "cuda_oom_weights", "model_loading",
     "weights"),
    # config.py ModelConfig._verify_quantization (0.2: before GPTQ; V1: a checkpoint naming no quant_method)
    ("ValueError: Unknown quantization method: gptq. Must be one of ['awq', 'squeezellm'].", "config_rejected", "init",
     "newer release"),
    ("Value error, Unknown quantization method: . Must be one of ['aqlm', 'awq', 'fp8', 'modelopt', 'modelopt_fp4']",
     "config_rejected", "init", "re-export"),
    ("ValueError: Quantization method specified in the model config (gptq) does not match the quantization method "
     "specified in the `quantization` argument (awq).", "config_rejected", "init", "--quantization"),
    # quantization/awq.py, gptq.py create_weights (0.2 - today)
    ('  File "/x/vllm/model_executor/layers/quantization/awq.py", line 85, in create_weights\n    raise ValueError(\n'
     "ValueError: The input size is not aligned with the quantized weight shape. This can be caused by too large "
     "tensor parallel size.", "tp_not_divisible", "model_loading", "group"),
    ("ValueError: The output size is not aligned with the quantized weight shape. This can be caused by too large "
     "tensor parallel size.", "tp_not_divisible", "model_loading", "group"),
    # near misses: another tool's unknown quantization method, a placement group the user created fine
    ("ValueError: Unknown quantization method: int3", "unknown", "init", None),
    ("INFO Created a placement group of placement_group_specs=[{'GPU': 1.0}] for the workers.", "unknown", "unknown",
     None),
])
def test_ray_placement_quantization_and_quantized_shape_wordings(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,category,phase,word", [
    # torch ProcessGroupNCCL.cpp's heartbeat monitor (2.2+): the watchdog thread hung in a NCCL/CUDA call
    ("[rank1]:[E ProcessGroupNCCL.cpp:1316] [PG 2 Rank 1] Heartbeat monitor timed out! Process will be terminated "
     "after dumping debug info. workMetaList_.size()=138", "nccl_error", "unknown", "NCCL_DEBUG=INFO"),
    ("[rank1]:[F ProcessGroupNCCL.cpp:1169] [PG 2 Rank 1] ProcessGroupNCCL's watchdog got stuck for 600 seconds without "
     "making progress in monitoring enqueued collectives.", "nccl_error", "unknown", "rank that stopped"),
    # the watchdog on a group whose first collective never completed (torch 2.4+): start-up's warm-up all-reduce
    ("[rank2]:[E1001 16:06:04.537131842 ProcessGroupNCCL.cpp:607] [Rank 2] Watchdog caught collective operation "
     "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=128, NumelOut=128, Timeout(ms)=600000) ran for 600009 "
     "milliseconds before timing out.", "nccl_error", "init", "NCCL_DEBUG=INFO"),
    ("[rank0]:[E822 16:31:16.131 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: "
     "WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=600000)\n[rank0]:[E822 16:31:16.132547721 ProcessGroupNCCL.cpp:2271] [PG "
     "ID 4 PG GUID 67 Rank 0] failure detected by watchdog at work sequence id: 1 PG status: last enqueued work: 1, "
     "last completed work: -1", "nccl_error", "init", "NCCL_DEBUG=INFO"),
    # torch's c10d ProcessGroupGloo, its line cut by the excerpt ("Gloo connectFullMesh fai")
    ("RuntimeError: Gloo connectFullMesh fai", "nccl_error", "init", "GLOO_SOCKET_IFNAME"),
    # CUDA's cudaErrorPeerAccessUnsupported through torch (vLLM's custom all-reduce opening the other GPUs' buffers)
    ("RuntimeError: CUDA error: peer access is not supported between these two devices\nCUDA kernel errors might be "
     "asynchronously reported at some other API call", "nccl_error", "init", "NCCL_P2P_DISABLE=1"),
    # near misses: another backend's watchdog (Ascend HCCL), a later collective without a milestone
    ("[E ProcessGroupHCCL.cpp:1] ProcessGroupHCCL's watchdog got stuck for 600 seconds without making progress",
     "unknown", "unknown", None),
    ("[rank0]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=128, "
     "NumelOut=128, Timeout(ms)=600000) ran for 600009 milliseconds before timing out.", "nccl_error", "unknown", None),
])
def test_nccl_heartbeat_first_collective_gloo_and_peer_access_wordings(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


def _cut(frames: str, error: str) -> str:
    return "Traceback (most recent call last):\n" + frames + error


@pytest.mark.parametrize("log,category,phase", [
    # a log line pasted as a markdown code span or after a fence's backticks (GitHub issues)
    ("`vllm: error: unrecognized arguments: --config`", "config_rejected", "init"),
    ("  ```ValueError: The number of required GPUs exceeds the total number of available GPUs in the placement group.```",
     "config_rejected", "init"),
    # vLLM transformers_utils/config.py get_config: neither config.json nor params.json (0.6-0.7, then 0.7.3+)
    ('  File "/x/vllm/transformers_utils/config.py", line 201, in get_config\n    raise ValueError(f"No supported config '
     'format found in {model}")\nValueError: No supported config format found in org/Qwen2.5-VL-72B-AWQ`',
     "model_not_found_or_auth", "init"),
    ("ValueError: Could not detect config format for no config file found. With config_format 'auto', ensure your "
     "model has either config.json (HF format) or params.json (Mistral format).", "model_not_found_or_auth", "init"),
    # the GPTQ weights repacked for Marlin after loading (vllm/_custom_ops.py), the excerpt starting there
    ('  File "/x/vllm/_custom_ops.py", line 1279, in gptq_marlin_repack\n    return torch.ops._C.gptq_marlin_repack(\n'
     "RuntimeError: CUDA driver error: out of memory", "cuda_oom_weights", "model_loading"),
    ('  File "/x/vllm/_custom_ops.py", line 700, in awq_marlin_moe_repack\n    return torch.ops._moe_C.awq_marlin_moe_'
     'repack(\nRuntimeError: CUDA driver error: out of memory', "cuda_oom_weights", "model_loading"),
    # Ray's compiled graph (the Ray executors' execute_model): a channel read timing out while serving
    (_cut('  File "/x/ray/experimental/channel/shared_memory_channel.py", line 480, in read\n'
          '    ret = self._worker.get_objects(\n',
          "ray.exceptions.RayChannelTimeoutError: System error: Timed out waiting for object available to read."),
     "unknown", "serving"),
    # near misses: a Marlin kernel in the forward pass is no weight loading; another tool's config format; a code
    # span in the middle of a line stays
    ('  File "/x/vllm/model_executor/layers/quantization/utils/marlin_utils.py", line 300, in apply_gptq_marlin_linear\n'
     "RuntimeError: CUDA driver error: out of memory", "cuda_oom", "unknown"),
    ("Error: could not detect config format for app.toml; use --format=yaml", "unknown", "unknown"),
    ("I ran `vllm: error: unrecognized arguments: --config` again", "unknown", "unknown"),
])
def test_markdown_code_spans_config_format_marlin_repack_and_ray_compiled_graph(log, category, phase):
    r = diagnose(log)
    assert (r.category, r.phase) == (category, phase)
    if category == "config_rejected" and "vllm: error" in log:
        assert r.summary.endswith("--config")


@pytest.mark.parametrize("log,phase", [
    # models/utils.py _merge_multimodal_embeddings (0.6 - today): a request's image tokens and placeholders differ
    ("ValueError: Attempted to assign 2816 = 2816 multimodal tokens to 2817 placeholders", "serving"),
    ("ValueError: Attempted to assign 1 x 576 = 576 multimodal tokens to 575 placeholders", "serving"),
    # near misses: the same error after a profiling milestone is placed by the milestone (V0 profiles with dummy
    # images); another message about placeholders says nothing
    ("INFO 01-01 00:00:00 [worker.py:1] Starting profile run for multi-modal models.\n"
     "ValueError: Attempted to assign 2816 = 2816 multimodal tokens to 2817 placeholders", "profile_run"),
    ("ValueError: Attempted to assign 3 placeholders to the template", "init"),
])
def test_a_request_s_multimodal_placeholder_mismatch_is_serving(log, phase):
    r = diagnose(log)
    assert (r.category, r.phase) == ("unknown", phase)


@pytest.mark.parametrize("log,category,phase,word", [
    # compressed-tensors' _check_scheme_supported (vllm/model_executor/layers/quantization/compressed_tensors/
    # compressed_tensors.py, 0.6 - 0.11): a RuntimeError of three strings, printed as a tuple (blind3 015)
    ("RuntimeError: ('Quantization scheme is not supported for ', 'the current GPU. Min capability: 80. ', "
     "'Current capability: 75.')", "unsupported_dtype_or_gpu", "init", "8.0+"),
    # the same check joined into one sentence (quark's and later forks' copy of it)
    ("RuntimeError: Quantization scheme is not supported for the current GPU. Min capability: 75. Current "
     "capability: 70.", "unsupported_dtype_or_gpu", "init", "7.5+"),
    # ModelConfig's check of the method (vllm/config.py 0.2 - 0.10, vllm/config/vllm.py later)
    ("ValueError: The quantization method awq is not supported for the current GPU. Minimum capability: 75. Current "
     "capability: 70.", "unsupported_dtype_or_gpu", "init", "7.5+"),
    # (0.4's Fp8Config asked for 89)
    ("ValueError: The quantization method fp8 is not supported for the current GPU. Minimum capability: 89. Current "
     "capability: 86.", "unsupported_dtype_or_gpu", "init", "8.9+"),
    # kernels built for newer GPUs only, at their first call: vLLM's csrc/quantization/gptq_marlin/gptq_marlin.cu and
    # allspark ("requires CUDA_ARCH >= 8.0"), torch's aten/src/ATen/native/cuda/Blas.cpp _scaled_mm (FP8 before Ada)
    ("RuntimeError: marlin_gemm(..) requires CUDA_ARCH >= 8.0", "unsupported_dtype_or_gpu", "unknown", "8.0+"),
    ("RuntimeError: allspark_w8a16_gemm(..) requires CUDA_ARCH >= 8.0", "unsupported_dtype_or_gpu", "unknown", "8.0+"),
    ("RuntimeError: torch._scaled_mm is only supported on CUDA devices with compute capability >= 9.0 or 8.9, or ROCm "
     "MI300+", "unsupported_dtype_or_gpu", "unknown", "8.9+"),
    ("INFO 01-01 00:00:00 [gpu_model_runner.py:1] Starting profile run\nRuntimeError: torch._scaled_mm is only "
     "supported on CUDA devices with compute capability >= 9.0 or 8.9, or ROCm MI300+", "unsupported_dtype_or_gpu",
     "profile_run", "Ada"),
    # near misses: vLLM's warning that FP8 falls back to weight-only Marlin on a pre-Ada GPU (marlin_utils_fp8.py) is
    # no error; a scheme the GPU does support logs no refusal; another op's "only supported on CUDA devices"
    ("WARNING 01-01 00:00:00 marlin_utils_fp8.py:1] Your GPU does not have native support for FP8 computation but FP8 "
     "quantization is being used. Weight-only FP8 compression will be used leveraging the Marlin kernel.",
     "unknown", "unknown", None),
    ("INFO Using scheme CompressedTensorsWNA16. Min capability: 80. Current capability: 90.", "unknown", "unknown", None),
    ("RuntimeError: pin_memory is only supported on CUDA devices", "unknown", "init", None),
])
def test_a_quantization_or_kernel_that_needs_a_newer_gpu(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,category,phase,word", [
    # vllm/config.py DeviceConfig (0.3 - 0.4): torch sees no CUDA device (blind3 039: a Ray actor without a GPU)
    ('  File "/x/vllm/config.py", line 484, in __init__\n    raise RuntimeError("No supported device detected.")\n'
     "RuntimeError: No supported device detected.", "driver_mismatch_or_no_driver", "init", "--gpus all"),
    ("RuntimeError: No supported device detected.", "driver_mismatch_or_no_driver", "init", "nvidia-smi"),
    # its successors (vllm/config.py 0.5+: "Failed to infer device type"; platforms/__init__.py 0.7+), and torch's
    ("RuntimeError: Failed to infer device type", "driver_mismatch_or_no_driver", "init", "--gpus all"),
    ("RuntimeError: No CUDA GPUs are available", "driver_mismatch_or_no_driver", "init", "--gpus all"),
    ("RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a "
     "driver from http://www.nvidia.com/Download/index.aspx", "driver_mismatch_or_no_driver", "init", "nvidia-smi"),
    # near misses: the same words from other programs (a device server's warning, a game's renderer)
    ("WARN No supported device detected. Server will start without a device.", "unknown", "unknown", None),
    ("MyRenderException: No supported device detected!", "unknown", "init", None),
])
def test_no_device_for_vllm_to_run_on(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,category,phase,word", [
    # vLLM's platform check of a GPU below what it runs on (blind4 008: a P100 beside an A100)
    ("RuntimeError: GPUs with compute capability less than 7.0 are not supported.", "unsupported_dtype_or_gpu", "init",
     "gpus:"),
    ("RuntimeError: GPUs with compute capability below 7.0 are not supported.", "unsupported_dtype_or_gpu", "init",
     "7.0"),
    # triton's (triton/backends/nvidia, raised through torch._dynamo at the first compiled kernel; blind4 108)
    ("RuntimeError: Found Tesla P40 which is too old to be supported by the triton GPU compiler, which is used as the "
     "backend. Triton only supports devices of CUDA Capability >= 7.0, but your device is of CUDA capability 6.1",
     "unsupported_dtype_or_gpu", "unknown", "gpus:"),
    ("RuntimeError: Found Tesla P100-PCIE-16GB which is too old to be supported by the triton GPU compiler",
     "unsupported_dtype_or_gpu", "unknown", "7.0"),
    # near misses: a capability that is supported, said in passing; another compiler's words
    ("INFO GPUs with compute capability 8.0 are supported by the FlashAttention backend.", "unknown", "unknown", None),
    ("WARNING Found GCC 9 which is too old to be supported by the compiler cache", "unknown", "unknown", None),
])
def test_a_gpu_older_than_vllm_runs_on(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,category,phase,word", [
    # torch.distributed's TCPStore cannot listen: its port is taken (c10d socket.cpp; blind4 013) - a port in use,
    # not ranks failing to reach each other
    ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: "
     "33649, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use", "port_in_use", "init",
     "ss -ltnp"),
    ("torch.distributed.DistNetworkError: The server socket has failed to bind to [::]:29500 (errno: 98 - Address "
     "already in use).", "port_in_use", "init", None),
    # near miss: the same error class for ranks that cannot reach each other stays a rendezvous failure
    ("torch.distributed.DistNetworkError: Connection reset by peer", "nccl_error", "init", "GLOO_SOCKET_IFNAME"),
])
def test_a_rendezvous_port_in_use(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,category,phase,word", [
    # httpx's wording of the Hub refusing a gated or private model (blind4 021: the URL cut on the next line)
    ("httpx.HTTPStatusError: Client error '403 Forbidden' for url\n'https://huggingface.co/krea/Krea-",
     "model_not_found_or_auth", "init", "HF_TOKEN"),
    ("httpx.HTTPStatusError: Client error '401 Unauthorized' for url 'https://huggingface.co/api/models/org/m'",
     "model_not_found_or_auth", "init", "HF_TOKEN"),
    # near misses: the same client refused by another server (a user's own API), a 404 from the Hub stays the
    # wording the rules already read elsewhere, not this one
    ("httpx.HTTPStatusError: Client error '403 Forbidden' for url 'http://localhost:8000/v1/chat/completions'",
     "unknown", "init", None),
    ("httpx.HTTPStatusError: Server error '503 Service Unavailable' for url 'https://huggingface.co/api/models/o/m'",
     "unknown", "init", None),
])
def test_the_hub_refusing_a_download_through_httpx(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,category,phase,word", [
    # a model class's own assert on its heads, the failing line above a bare AssertionError (models/chatglm.py,
    # blind4 024, and the same assert in other model files)
    ('  File "/x/vllm/model_executor/models/chatglm.py", line 53, in __init__\n    assert self.total_num_kv_heads % '
     "tp_size == 0\nAssertionError", "tp_not_divisible", "model_loading", "multi_query_group_num"),
    ("    assert self.total_num_heads % tp_size == 0\nAssertionError", "tp_not_divisible", "model_loading",
     "num_attention_heads"),
    ("    assert self.total_num_kv_heads % tensor_model_parallel_world_size == 0\nAssertionError", "tp_not_divisible",
     "model_loading", "--pipeline-parallel-size"),
    # compressed-tensors finds no scheme for a layer (compressed_tensors.py _get_scheme; blind4 018)
    ("NotImplementedError: No compressed-tensors compatible scheme was found.", "model_not_supported",
     "model_loading", "Upgrade vLLM"),
    # near misses: the assert shown in a traceback whose error is another; a divisibility assert on something else
    ("    assert self.total_num_heads % tp_size == 0\n    self.num_heads = x\nValueError: boom", "unknown", "init",
     None),
    ("    assert self.hidden_size % 64 == 0\nAssertionError", "unknown", "init", None),
])
def test_a_model_assert_on_heads_and_a_quantization_scheme_without_kernels(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


_TORCH_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.15 GiB. GPU 0 has a total capacity of 79"


@pytest.mark.parametrize("log,category,phase,word", [
    # the chat endpoint logging a request's failure (entrypoints/openai/serving_chat.py's logger.exception, V0 in
    # docker compose, blind3 030; V1 behind the API server's process tag)
    ("vllm  | ERROR 02-11 08:25:49 serving_chat.py:661]   File \"/x/vllm/model_executor/layers/activation.py\", line "
     "81, in forward_cuda\nvllm  | ERROR 02-11 08:25:49 serving_chat.py:661] " + _TORCH_OOM, "cuda_oom_runtime",
     "serving", "--max-num-batched-tokens"),
    ("(APIServer pid=3176541) ERROR 09-16 10:40:29 [serving_chat.py:1051] Error in chat completion stream generator.\n"
     "(APIServer pid=3176541) ERROR 09-16 10:40:29 [serving_chat.py:1051] Traceback (most recent call last):\n"
     + _TORCH_OOM, "cuda_oom_runtime", "serving", None),
    ("ERROR 06-09 11:40:52 [serving_completion.py:401] " + _TORCH_OOM, "cuda_oom_runtime", "serving", None),
    # its message alone, the header stripped by whoever pasted the log
    ("Error in chat completion stream generator.\nTraceback (most recent call last):\n" + _TORCH_OOM,
     "cuda_oom_runtime", "serving", None),
    # near misses: the endpoints' INFO/WARNING lines are no error they logged (this rule reads errors only); the
    # engine's own logger (engine.py) and another program's module named *serving*.py are no endpoint; a frame that
    # places the error wins over the endpoint's header
    ("INFO 02-11 08:20:00 serving_chat.py:80] Using default chat sampling params from model\n" + _TORCH_OOM,
     "cuda_oom", "unknown", None),
    ("WARNING 02-11 08:20:00 [serving_completion.py:70] Default sampling parameters have been overridden\n"
     + _TORCH_OOM, "cuda_oom", "unknown", None),
    ("ERROR 11-18 18:07:28 engine.py:366] " + _TORCH_OOM, "cuda_oom", "unknown", None),
    ("ERROR 11-18 18:07:28 [model_serving.py:12] " + _TORCH_OOM, "cuda_oom", "unknown", None),
    ('ERROR 02-11 08:25:49 serving_chat.py:661]   File "/x/vllm/worker/model_runner.py", line 1, in profile_run\n'
     "ERROR 02-11 08:25:49 serving_chat.py:661] " + _TORCH_OOM, "cuda_oom_weights", "profile_run", None),
])
def test_an_error_the_api_server_s_endpoints_logged_is_serving(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("model,tp,refused", [
    ("meta-llama__Llama-3.1-8B-Instruct", 3, "attention heads"),  # 32 heads
    ("Qwen__Qwen3-14B", 5, "vocabulary"),  # 40 heads divide by 5, the padded vocabulary 151936 does not
])
def test_the_planner_refuses_the_layouts_the_tp_action_says_it_refuses(model, tp, refused):
    """tp_not_divisible's action says the planner refuses the layout: it does (its reasons are vLLM's own words, and
    diagnosed as that category), and the text names what it does not check."""
    with open(model_config_path(model), encoding="utf-8") as fh:
        p = plan(ModelInfo.from_config(json.load(fh)), gpu_total_gib=79.19, num_gpus=tp, tensor_parallel_size=tp)
    assert not p.fits
    r = diagnose(p.reasons[0])
    assert (r.category, r.action) == ("tp_not_divisible", "refuse")
    assert "planner" in r.action_text and refused in r.action_text and "quantized layer's groups" in r.action_text


_CMD_72B = "vllm serve Qwen/Qwen2.5-72B-Instruct --port 8000\n"
_OOM_HELD = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 768.00 MiB. GPU 0 has a total capacity of "
             "79.15 GiB of which 752.31 MiB is free. Including non-PyTorch memory, this process has {held} GiB memory in "
             "use.")


@pytest.mark.parametrize("log,category,phase,word", [
    # a model class that runs only some generations of its family (models/minicpmv.py MiniCPMV.__new__; blind5 116-118)
    ("ValueError: Currently, MiniCPMV only supports versions 2.0, 2.5, 2.6, 4.0. Got version: (4, 5)",
     "model_not_supported", "model_loading", "Upgrade vLLM to a release that lists the model's version"),
    ("使用vllm推理报错：ValueError: Currently, MiniCPMV only supports versions 2.0, 2.5, and 2.6", "model_not_supported",
     "model_loading", None),
    # Ascend's collective library through torch_npu (blind5 025): HCCL's words for NCCL's failures
    ("RuntimeError: InnerRunOpApi:torch_npu/csrc/framework/OpParamMaker.cpp:281 OPS function error: HcclAllreduce, "
     "error code is 6\nEI0006: Getting socket times out. Reason: Remote Rank did not send the data in time.",
     "nccl_error", "unknown", "NCCL_DEBUG=INFO"),
    ("RuntimeError: HCCL function error: HcclGetRootInfo(&hcclID), error code is 7", "nccl_error", "init", None),
    # an external launcher's world size against the parallel layout (parallel_state.py; blind5 121, torchrun)
    ("torchrun --nproc-per-node=8 run.py\nRuntimeError: world_size (8) is not equal to tensor_model_parallel_size (1) x "
     "pipeline_model_parallel_size (1). ", "config_rejected", "init", "torchrun"),
    # divide() of a dimension over the ranks, as the layers are built (distributed/utils.py; blind4 023, blind5 135)
    ("AssertionError: 151552 is not divisible by 6", "tp_not_divisible", "model_loading", "1, 2, 4, 8, 16"),
    # an import that fails at module level: the program stopped before it read any argument (blind5 031, 131)
    ('Traceback (most recent call last):\n  File "/usr/bin/vllm", line 5, in <module>\n    from vllm.entrypoints.cli.'
     "main import main\nModuleNotFoundError: No module named 'vllm.benchmarks.serve'", "unknown", "init", None),
    # the engine's ZMQ sockets are bound as it starts (utils make_zmq_socket; blind5 015)
    ('  File "/x/vllm/utils/network_utils.py", line 338, in make_zmq_socket\n    socket.bind(path)\n'
     "zmq.error.ZMQError: Cannot assign requested address (addr='tcp://10.1.2.3:41257')", "unknown", "init", None),
    # compressed-tensors maps each layer to a target as it is built (find_matched_target; blind5 021)
    ("ValueError: Unable to find matching target for model.layers.0.self_attn.fused_qkv_a_proj in the "
     "compressed-tensors config.", "unknown", "model_loading", None),
    # near misses: another project's "only supports versions" warning; an HCCL info line; an import inside a
    # function (a handler's, no start-up step); a world size that matches, printed as information
    ("WARNING Currently, FlashInfer only supports versions 0.2 and newer", "unknown", "unknown", None),
    ("INFO hccl communicator initialized for rank 1", "unknown", "unknown", None),
    ('Traceback (most recent call last):\n  File "/srv/app.py", line 9, in handler\n    import foo\n'
     "ImportError: cannot import name 'x' from 'foo'", "unknown", "init", None),
    ("INFO world_size=8 tensor_model_parallel_size=8 pipeline_model_parallel_size=1", "unknown", "unknown", None),
])
def test_round5_wordings(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,category,phase", [
    # one GPU's share of the named model's weights is more than the GPU holds (134 GiB of 72B bf16 on 79 GiB;
    # blind5 130: FastChat-style `--model`, no -tp)
    (_CMD_72B + _OOM_HELD.format(held="29.47"), "cuda_oom_weights", "model_loading"),
    # ... torch 2.1's own typo in its message ("total capacty") still gives the GPU's size
    (_CMD_72B + _OOM_HELD.format(held="29.47").replace("capacity", "capacty"), "cuda_oom_weights", "model_loading"),
    # a quantized checkpoint's share (72B at 4 bits: 33.5 GiB) above what the process had allocated: still loading
    ("vllm serve Qwen/Qwen2.5-72B-Instruct-AWQ\n" + _OOM_HELD.format(held="30.00"), "cuda_oom_weights",
     "model_loading"),
    # near misses: split over 4 GPUs (33.5 GiB each) the weights fit and the process held more: no phase from the size;
    # a small model; a size named only in prose, with no command line to show the parallel layout
    ("vllm serve Qwen/Qwen2.5-72B-Instruct --tensor-parallel-size 4\n" + _OOM_HELD.format(held="78.40"), "cuda_oom",
     "unknown"),
    ("python -m vllm.entrypoints.openai.api_server --model /m/Llama-3.1-8B-Instruct\n" + _OOM_HELD.format(held="78.40"),
     "cuda_oom", "unknown"),
    ("why can HF run the 72b-chat model but vllm cannot: " + _OOM_HELD.format(held="78.40"), "cuda_oom", "unknown"),
    ("vllm serve Qwen/Qwen3-30B-A3B\n" + _OOM_HELD.format(held="78.40"), "cuda_oom", "unknown"),
])
def test_an_oom_no_step_places_read_against_the_named_model_s_weights(log, category, phase):
    r = diagnose(log)
    assert (r.category, r.phase) == (category, phase)
    if category == "cuda_oom_weights":
        assert r.phase_confidence == "low" and "GiB of weights per GPU" in r.summary and "72B parameters" in r.summary
        assert "-tp N" in r.fix


_BUILT_OOM = ('  File "/venv/lib/python3.9/site-packages/vllm/model_executor/models/llama.py", line 201, in <listcomp>\n'
              "    LlamaDecoderLayer(config) for _ in range(config.num_hidden_layers)\n"
              '  File "/venv/lib/python3.9/site-packages/vllm/model_executor/{layers}", line 272, in __init__\n'
              "    self.weight = Parameter(torch.empty(\n"
              "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 160.00 MiB (GPU 0; 79.35 GiB total "
              "capacity; 78.58 GiB already allocated; 145.19 MiB free)")
_KERNEL = ("RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
           "CUDA kernel errors might be asynchronously reported at some other API call")


@pytest.mark.parametrize("log,category,phase,word", [
    # NCCL's segment path pasted into a page as a link (blind6 003): /dev/shm is the cause, not NCCL
    ("ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\nLast error:\n"
     "Error while creating shared memory segment [/dev/shm/nccl-EoOvZr](https://x.example/dev/shm/nccl-EoOvZr) "
     "(size 7340384)", "shm_too_small", "init", "/dev/shm"),
    # Ray's autoscaler while the engine waits for its placement group (blind6 002)
    ("Waiting for creating a placement group of specs for 70 seconds...\nError: No available node types can fulfill "
     "resource request {'node:10.61.0.27': 0.001, 'GPU': 1.0}", "config_rejected", "init", "ray status"),
    # ModelConfig without architectures, under pydantic's weak wrapper (blind6 011)
    ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n  Value error, No model "
     "architectures are specified [type=value_error, input_value=ArgsKwargs((), {'model': '/m'})]",
     "model_not_supported", "init", "--hf-overrides"),
    # transformers' words cut by a stored copy (blind6 026)
    ("ValueError: The checkpoint you are trying to load has model type `qwen2_5_vl` but Transformers does not "
     "recognize this archite", "model_not_supported", "init", "transformers it pins"),
    # a RoPE scaling type the rotary-embedding factory does not know (blind6 027)
    ('[rank0]:     raise ValueError(f"Unknown RoPE scaling type {scaling_type}")\n[rank0]: ValueError: Unknown RoPE '
     "scaling type extended", "config_rejected", "init", "--rope-scaling"),
    # an OOM as the model's layers are built: each allocates its weights (blind6 001, V0 0.1's parallel_utils; V1's
    # model_executor/layers)
    (_BUILT_OOM.format(layers="parallel_utils/tensor_parallel/layers.py").replace("model_executor/parallel_utils",
                                                                                  "parallel_utils"),
     "cuda_oom_weights", "model_loading", None),
    (_BUILT_OOM.format(layers="layers/linear.py"), "cuda_oom_weights", "model_loading", None),
    # the missing kernel is a layer's forward: the first forward pass is the profiling run (blind6 006)
    ('  File "/x/vllm/model_executor/layers/linear.py", line 135, in apply\n    return F.linear(x, layer.weight, bias)\n'
     + _KERNEL, "unsupported_dtype_or_gpu", "profile_run", None),
    # a checkpoint tensor name missing from the model's parameters (blind6 017: unknown by its collector; since round
    # 15 a variant this vLLM does not load, as most such threads concluded); CUDA touched before a fork (blind6 022)
    ("[rank0]: KeyError: 'layers.60.mlp.gate_up_proj.weight'", "model_not_supported", "model_loading", None),
    ("RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the "
     "'spawn' start method", "unknown", "init", None),
    # near misses: a bare kernel error keeps its device-init reading; a KeyError that names no tensor; a model's forward
    # frame above an OOM says nothing of the step (start-up's profiling run or a request); another segment failure
    (_KERNEL, "unsupported_dtype_or_gpu", "init", None),
    ("KeyError: 'choices'", "unknown", "init", None),
    ('  File "/x/vllm/model_executor/models/qwen2_5_vl.py", line 393, in forward\n    qk = qk.contiguous()\n'
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 204.00 MiB.", "cuda_oom", "unknown", None),
    ("Error: No available node types can fulfill resource request {'CPU': 4.0}", "unknown", "unknown", None),
])
def test_round6_wordings(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,category,phase,word", [
    # a hybrid model's Mamba state cache against max_num_seqs, before graph capture (blind7 005)
    ("ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (856). Each decode sequence requires one "
     "Mamba cache block, so CUDA graph capture cannot proceed.", "kv_cache_too_small", "graph_capture",
     "--max-num-seqs 856"),
    # FP8 block quantization: a rank's slice is no whole number of blocks (blind7 011), a line wrapped by the log
    ("  ValueError: Weight input_size_per_partition = 192 is not divisible by\n  weight quantization block_k = 128.",
     "tp_not_divisible", "model_loading", None),
    # torchao's FP8 needs a newer GPU (blind7 012); Triton's MMA layout assertion on a pre-Ampere GPU (blind7 110)
    ("Float8 dynamic activation quantization is only supported on CUDA>=8.9 and MI300+", "unsupported_dtype_or_gpu",
     "model_loading", "8.9"),
    ("python: /project/lib/Analysis/Allocation.cpp:47: getCvtOrder: Assertion `!(srcMmaLayout && dstMmaLayout && "
     "!srcMmaLayout.isAmpere()) && \"Unexpected mma -> mma layout conversion\"' failed.", "unsupported_dtype_or_gpu",
     "unknown", None),
    # TCPStore could not listen, the errno cut (blind7 102)
    ("RuntimeError: The server socket has failed to listen on any local network address. port: 46571, useIpv6: 0, "
     "code: -9", "port_in_use", "init", "46571"),
    # a GGUF architecture transformers' reader does not map (blind7 109); a file the model directory lacks (blind7 114)
    ('    raise ValueError(f"Architecture {architecture} not supported")\nValueError: Architecture chatglm not supported',
     "model_not_supported", "init", None),
    ("OSError: /models/MiniCPM-Llama3-V-2_5 does not appear to have a file named preprocessor_config.json. Checkout "
     "'https://huggingface.co//models/MiniCPM-Llama3-V-2_5/tree/None' for available files.", "model_not_found_or_auth",
     "init", None),
    # the loader finds no weight files (blind7 113): model loading, not start-up's config reading
    ("RuntimeError: Cannot find any model weights with /llamas/model", "model_not_found_or_auth", "model_loading",
     None),
    # compressed-tensors picks a layer's scheme as the layer is built (blind7 112)
    ('  File "/x/vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py", line 757, in '
     "get_scheme\n    self._check_scheme_supported(scheme.get_min_capability())\nRuntimeError: ('Quantization scheme is "
     "not supported for ', 'the current GPU. Min capability: 75. ', 'Current capability: 70.')",
     "unsupported_dtype_or_gpu", "model_loading", None),
    # unknown failures placed by their own words: a Ray version mismatch (blind7 111), a prompt longer than
    # max_model_len (blind7 115). (Weights left uninitialised, blind7 106, unknown by its thread, have been read as
    # checkpoint and class not matching since round 12, whose 106 has the same words and a thread that found vLLM's
    # class for the variant missing: the round-12 table.)
    ("ValueError: Following weights were not initialized from checkpoint: {'language_model.model.norm.weight'}",
     "model_not_supported", "model_loading", None),
    ("RuntimeError: Version mismatch: The cluster was started with:\n    Ray: 2.43.0\n    Python: 3.11.10\nThis process "
     "on node 10.18.215.196 was started with:\n    Ray: 2.44.1", "unknown", "init", None),
    ("ValueError: Prompt length of 4178 is longer than the maximum model length of 4096.", "unknown", "serving", None),
    # near misses: a max_num_seqs refusal without Mamba blocks stays a config refusal; another reader's "not supported";
    # a file name that is no JSON the model needs; a layer's forward frame is no scheme selection
    ("ValueError: max_num_seqs (8) exceeds max_num_batched_tokens (4)", "config_rejected", "init", None),
    ("WARNING architecture x86 not supported by this build", "unknown", "unknown", None),
    ("OSError: /models/x does not appear to have a file named tokenizer.model", "unknown", "init", None),
])
def test_round7_wordings(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,category,phase,word", [
    # an adapter above the engine's LoRA rank (blind8 001); no CUDA-graph sizes for spec decode and sequence
    # parallelism at once (blind8 003)
    ("ValueError: LoRA rank 64 is greater than max_lora_rank 16.", "config_rejected", "init", "--max-lora-rank 64"),
    ("RuntimeError: Worker failed with error 'Can't determine cudagraph shapes that are both a multiple of 3 "
     "(num_speculative_tokens + 1) required by spec-decode and 4 (tensor_parallel_size)'", "config_rejected", "init",
     None),
    # Intel XPU's oneCCL in NCCL's place (blind8 004)
    ('  File "/v/torch/distributed/distributed_c10d.py", line 2806, in all_reduce\n    work = group.allreduce([tensor])\n'
     "RuntimeError: oneCCL: ze_fd_manager.cpp:214 fill_device_fds: EXCEPTION: open failed: fd: -1", "nccl_error",
     "init", None),
    # an architecture vLLM cannot split into pipeline stages (blind8 007); a MoE layer's quantization scheme without
    # kernels, as the layers are built (blind8 015)
    ("NotImplementedError: Pipeline parallelism is only supported for the following  architectures: "
     "['AquilaForCausalLM', 'LlamaForCausalLM']", "model_not_supported", "init", "--pipeline-parallel-size"),
    ('  File "/v/vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe.py", line 135, in '
     "get_moe_method\n    raise RuntimeError(\nRuntimeError: Unsupported FusedMoe scheme: num_bits=4 type='int'",
     "model_not_supported", "model_loading", None),
    # a LoRA adapter path with no adapter (blind8 018); a Ray placement group GPUStack could not get (blind8 116)
    ('ValueError: Loading lora ["qc failed: No adapter found for /train/output/checkpoint-100"]',
     "model_not_found_or_auth", "init", "adapter_config.json"),
    ("ValueError: Cannot provide a placement group requiring 4.0 GPUs (placement_group_specs=[{'GPU': 1.0}])",
     "config_rejected", "init", "ray status"),
    # V0 0.2's background loop dying on an OOM: serving (blind8 014); V0's profiling of multi-modal dummy data (blind8 020)
    ('Traceback (most recent call last):\n  File "/workspace/vllm/engine/async_llm_engine.py", line 29, in '
     "_raise_exception_on_finish\n    task.result()\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to "
     "allocate 1.50 GiB", "cuda_oom_runtime", "serving", None),
    ("WARNING 04-27 16:27:59 [profiling.py:245] The sequence length used for profiling (max_num_batched_tokens / "
     "max_num_seqs = 20000) is too short to hold the multi-modal embeddings in the worst case\nERROR 04-27 16:28:02 "
     "[engine.py:448] CUDA out of memory. Tried to allocate 800.00 MiB.", "cuda_oom_weights", "profile_run", None),
    # the decoder prompt over max_model_len, pasted above the engine's config line: still a request's (blind8 008)
    ("ValueError: The decoder prompt (length 18425) is longer than the maximum model length of 12288.\nInitializing a "
     "V1 LLM engine (v0.9.1) with config: model='/m'", "unknown", "serving", None),
    # near misses: a rank within the limit, said in passing; an adapter that loaded; a placement group that was provided
    ("INFO LoRA rank 8 is within max_lora_rank 16", "unknown", "unknown", None),
    ("INFO Loaded new LoRA adapter: name 'qc', path '/train/output/checkpoint-100'", "unknown", "unknown", None),
    ("INFO Created a placement group requiring 4.0 GPUs", "unknown", "unknown", None),
])
def test_round8_wordings(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


# Wordings no rule knows, read by their family (a subject and a refusal in one exception message): the category with
# low confidence, the message quoted, the deploy's action for that category. The messages are vLLM's, transformers'
# and torch's kind of wording for each failure, not copies of any collected log.
@pytest.mark.parametrize("log,category,phase", [
    # a capability word and a refusal: the GPU is the limit
    ("RuntimeError: FlashMLA is only supported on Hopper GPUs (compute capability 9.0); this GPU has 8.6",
     "unsupported_dtype_or_gpu", "init"),
    ("ValueError: fp8 KV cache is not supported on sm_75", "unsupported_dtype_or_gpu", "init"),
    # a model word and a refusal: this vLLM cannot serve the model
    ("ValueError: Model type xverse_moe is not supported by this version of vLLM", "model_not_supported", "init"),
    ("NotImplementedError: Sliding window attention is not supported for this model architecture",
     "model_not_supported", "init"),
    # an engine argument (any spelling of one vLLM's parser has) and a refusal: vLLM refused its configuration
    ("ValueError: gpu_memory_utilization must be in (0, 1], got 1.2", "config_rejected", "init"),
    ("ValueError: --enable-prefix-caching cannot be combined with the sliding window of this checkpoint",
     "config_rejected", "init"),
    ("ValueError: The chosen tensor parallel size exceeds what the cluster offers", "config_rejected", "init"),
    # the layout split over ranks
    ("AssertionError: hidden_size_per_partition must be divisible by tp_size (6)", "tp_not_divisible", "init"),
    # a model or adapter that is not where it was looked for; a hub refusing the download
    ("FileNotFoundError: checkpoint directory /ckpt/step-100 could not be found", "model_not_found_or_auth", "init"),
    ("huggingface_hub.errors.HfHubHTTPError: 403 Forbidden: you are not in the authorized list. Cannot access content "
     "at: https://huggingface.co/google/gemma-3-27b-it/resolve/main/config.json", "model_not_found_or_auth", "init"),
    # the collective libraries of other vendors; a socket already taken; the driver
    ("RuntimeError: RCCL call failed: unhandled cuda error", "nccl_error", "init"),
    ("RuntimeError: The engine's ZMQ socket could not bind to tcp://127.0.0.1:5557", "port_in_use", "init"),
    ("RuntimeError: no CUDA devices were found", "driver_mismatch_or_no_driver", "init"),
    # a message that goes on on its own line (a bare AssertionError's)
    ("AssertionError\nBlockwise fp8 GEMM is only supported on CUDA >= 8.9", "unsupported_dtype_or_gpu", "init"),
    # another accelerator as the limit
    ("NotImplementedError: Sliding window attention is not supported on XPU", "unsupported_dtype_or_gpu", "init"),
    # another device's words for its memory running out: plain cuda_oom without a phase, named by the phase the log
    # shows (never guessed from a log that shows none)
    ("RuntimeError: HPU memory is exhausted while allocating 2.1 GiB", "cuda_oom", "unknown"),
    ("INFO 01-01 00:00:00 [gpu_model_runner.py:1] Starting to load model /m\n"
     "RuntimeError: Failed to allocate 512 MiB of device memory", "cuda_oom_weights", "model_loading"),
    # XLA's words for a TPU's HBM running out (its kernels' vmem scratch is no device memory: below)
    ("jaxlib._jax.XlaRuntimeError: RESOURCE_EXHAUSTED: Error allocating device buffer of 3.1G", "cuda_oom", "unknown"),
    # the KV cache, a length and a shortfall: too small for one request; the KV cache and nothing left: no memory for it.
    # Placed, where the log does not say, where those are decided: the KV-cache allocation
    ("ValueError: max_model_len (131072) is larger than the number of tokens the KV cache can hold (42000) on this "
     "device", "kv_cache_too_small", "kv_cache_allocation"),
    ("ValueError: The model's context length (32768) exceeds the maximum number of tokens the KV cache can store "
     "(16384)", "kv_cache_too_small", "kv_cache_allocation"),
    ("RuntimeError: KV cache sizing found no memory left for cache blocks after the model's weights", "no_kv_memory",
     "kv_cache_allocation"),
    ("ValueError: kv_budget is -2.1 GB after the model's weights", "no_kv_memory", "kv_cache_allocation"),
    # less free memory than asked for; the shared-memory file system full
    ("ValueError: Free NPU memory (12.1 GiB) is less than the 28.8 GiB requested by gpu_memory_utilization=0.9",
     "free_memory_below_request", "init"),
    ("OSError: could not create a shared memory segment for the tensor queue: /dev/shm has no space left",
     "shm_too_small", "init"),
    # the model's files missing from the cache; the hub's name not resolved (offline, DNS)
    ("FileNotFoundError: [Errno 2] No such file or directory: '/data/hf/hub/models--org--m/snapshots/abc/"
     "model-00001-of-00004.safetensors'", "model_not_found_or_auth", "init"),
    ("urllib3.exceptions.NameResolutionError: Failed to resolve 'huggingface.co' ([Errno -3] Temporary failure in name "
     "resolution)", "model_not_found_or_auth", "init"),
    # a CUDA library the wheel links against, missing; a kernel built without this GPU's architecture
    ("ImportError: libcublasLt.so.13: cannot open shared object file: No such file or directory",
     "driver_mismatch_or_no_driver", "init"),
    ("torch.AcceleratorError: hipErrorNoBinaryForGpu: Unable to find code object for all current devices!",
     "unsupported_dtype_or_gpu", "init"),
    ("RuntimeError: HIP error: no kernel image is available for this device type", "unsupported_dtype_or_gpu", "init"),
    ("RuntimeError: This operator cannot run on soc_version Ascend310P3: not supported", "unsupported_dtype_or_gpu",
     "init"),
    # a dtype refused by a kernel or a quantization method
    ("ValueError: torch.float32 is not supported by the Marlin kernels; use float16", "unsupported_dtype_or_gpu",
     "init"),
    # transformers not recognising the model; a class vLLM has no implementation of
    ("ValueError: Transformers does not recognize the model type `kimi_k3` in this checkpoint", "model_not_supported",
     "init"),
    ("ValueError: MiniCPMO4Model has no vLLM implementation and the Transformers fallback does not support it",
     "model_not_supported", "init"),
    # a choice among vLLM's own parts refused
    ("ValueError: Unknown attention backend 'FLASH_ATTN_V4'", "config_rejected", "init"),
    ("ValueError: Cannot create a placement group with 16 GPUs: only 8 are available", "config_rejected", "init"),
    # an error line naming the request it failed on: serving, and an OOM there is the serving one
    ("ERROR 01-01 00:00:00 [offload.py:1] Error gathering blocks for request cmpl-9cbf94ef-0: RESOURCE_EXHAUSTED: "
     "Error allocating device buffer", "cuda_oom_runtime", "serving"),
    # torch.distributed's rendezvous failing (its store, its sockets)
    ("RuntimeError: [c10d] TCPStore client could not connect to 10.0.0.2:29500", "nccl_error", "init"),
    # the error line above a second traceback that the excerpt cuts short (the server's, as it gives up): still read
    ("RuntimeError: HPU memory is exhausted while allocating 2.1 GiB\nTraceback (most recent call last):\n"
     '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/api_server.py", line 1121, in run_server\n'
     "    async with build_async_engine_client(args) as engine_client:\n"
     '  File "/usr/local/lib/python3.12/dist-packages/vllm/engine/multiprocessing/engine.py", line 75, in __init__\n'
     "    self.engine = LLMEngine(*args, **kwargs)\n", "cuda_oom_weights", "init"),
])
def test_an_unknown_wording_is_read_by_its_family(log, category, phase):
    r = diagnose(log)
    assert (r.category, r.phase, r.confidence) == (category, phase, "low")
    assert r.action == ACTIONS[category] and "no rule knows this wording" in r.summary


@pytest.mark.parametrize("log", [
    # request-time errors are no deploy failure
    "ValueError: The decoder prompt (length 9000) is longer than the maximum model length of 8192. Make sure that "
    "`max_model_len` is no smaller than the number of text tokens.",
    # a refusal without a subject; a subject without a refusal; a server's own 403 to a client
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "ValueError: max_model_len is 8192",
    "httpx.HTTPStatusError: Client error '403 Forbidden' for url 'http://localhost:8000/v1/chat/completions'",
    # a log line, not an error: the engine's config line names trust_remote_code=False; a warning's "not supported"
    "INFO 01-01 00:00:00 llm_engine.py:100] Initializing an LLM engine with config: model='m', trust_remote_code=False",
    "WARNING 01-01 00:00:00 config.py:1] Model architecture x is not supported by the fast path",
    # the watchdog's frame line after an illegal access
    "Exception raised from ncclCommWatchdog at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1601",
    # the host's memory, not a device's; a TPU kernel's scratch space
    "RuntimeError: [enforce fail at alloc_cpu.cpp:83] DefaultCPUAllocator: not enough memory: you tried to allocate 8 GB",
    "jaxlib._jax.XlaRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory in memory space vmem",
    # a worker's death names no cause: what killed it is elsewhere (the readers of the blind rounds' logs, and their
    # collectors, mostly filed such logs by that cause; a fallback to lost_rank was right on 3 of 15)
    "RuntimeError: Worker process exited unexpectedly",
    # free memory named without a shortfall
    "ValueError: free memory must be a float",
    # one of vLLM's functions called with a keyword it lacks (a wrapper's, or the engine's own wiring: an engine
    # argument's name in it is no refusal): the versions out of step, no category
    "TypeError: generate_stream() got an unexpected keyword argument 'prompt_token_ids'",
    "TypeError: Worker.__init__() got an unexpected keyword argument 'kv_cache_dtype'",
])
def test_no_family_without_both_words(log):
    assert diagnose(log).category == "unknown"


@pytest.mark.parametrize("log,category,phase,word", [
    # torch cannot count the GPUs, its error code past a cut line (blind9 117, 118)
    ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
     "NumCudaDevices() that might have", "driver_mismatch_or_no_driver", "init", None),
    # torch_npu's code for a failed distributed call, "hccl api failed" cut off (blind9 007)
    ("RuntimeError: create_config:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:148\n"
     "[ERROR] 2025-09-03-03:02:37 (PID:7226, Device:1, RankID:-1) ERR02200 DIST call hcc", "nccl_error", "init", None),
    # Ascend's ACL runtime out of memory as vllm-ascend starts its graph capture (blind9 009)
    ("RuntimeError: Worker failed with error 'NPUModelRunner init failed, error is capture_begin:build/x.cpp:12'\n"
     "[ERROR] 2026-04-17-09:16:39 (PID:1, Device:0, RankID:-1) ERR00100 PTA call acl api failed\n"
     "[Error]: Failed to apply for memory.", "cuda_oom_after_kv", "graph_capture", "--enforce-eager"),
    # vLLM 0.2-0.3's Ray check against the whole cluster (blind9 116)
    ("ValueError: The number of required GPUs exceeds the total number of available GPUs in the cluster.",
     "config_rejected", "init", "ray status"),
    # transformers' unknown model type, the line cut before "architecture" (blind9 108)
    ("ValueError: The checkpoint you are trying to load has model type `qwen2_5_vl` but Transformers does not recognize",
     "model_not_supported", "init", None),
    # no kernel for the GPU in an attention backend's forward: the profiling run's first forward (blind9 004)
    ('  File "/x/vllm/attention/backends/xformers.py", line 279, in forward\n    output = torch.empty_like(query)\n'
     "RuntimeError: CUDA error: no kernel image is available for execution on the device", "unsupported_dtype_or_gpu",
     "profile_run", None),
    # memory profiling that saw no change at all: the device does not report the run's memory (blind9 008)
    ("AssertionError: Error in memory profiling. Initial free memory 30.3 GiB, current free memory 30.3 GiB. This "
     "happens when the GPU memory was not properly cleaned up", "unknown", "profile_run", "--kv-cache-memory-bytes"),
    # a model's own context limit in its words (blind9 107); Ray started by the engine, then its raylet fails (017)
    ("ValueError: TT-LLama8B do not support max_model_len greater than 32768 on N150 (received 65536).",
     "max_len_over_model_limit", "init", "--max-model-len"),
    ("INFO worker.py:1752 -- Started a local Ray instance.\n[2024-06-13 16:11:51,588 E 13261 13261] core_worker.cc:228: "
     "Failed to register worker 0100 to Raylet. IOError", "unknown", "init", None),
    # near misses: profiling that saw memory go down stays another process; the ACL memory line without the capture
    # call stays a plain OOM; a message naming max_model_len without a limit is a refused flag
    ("AssertionError: Error in memory profiling. Initial free memory 30.3 GiB, current free memory 12.1 GiB",
     "free_memory_below_request", "profile_run", None),
    ("[Error]: Failed to apply for memory.", "cuda_oom", "unknown", None),
    ("ValueError: max_model_len must be set", "config_rejected", "init", None),
])
def test_round9_wordings(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,category,phase,word", [
    # torch's TCPStore cannot listen, its errno name cut at the line's end (blind10 111): the port, not the ranks
    ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: "
     "12345, useIpv6: false, code: -98, name: EADDRINUS", "port_in_use", "init", None),
    # V1's start-up check of free memory, cut after "desired" (blind10 112)
    ("ValueError: Free memory on device cuda:0 (22.35/23.56 GiB) on startup is less than desired",
     "free_memory_below_request", "init", "--gpu-memory-utilization"),
    # V1's model runner wrapping an OOM as the weights load (blind10 114)
    ("ERROR 05-02 23:41:19 [gpu_model_runner.py:4877] Failed to load model - not enough GPU memory. Try lowering "
     "--gpu-memory-utilization to free memory for weights", "cuda_oom_weights", "model_loading", None),
    # another device's OOM while torch moves the built model onto it (blind10 116)
    ('  File "/x/torch/nn/modules/module.py", line 1158, in convert\n    return t.to(device)\n'
     "RuntimeError: XPU out of memory. Tried to allocate 1.02 GiB (GPU 0; 15.56 GiB total capacity)",
     "cuda_oom_weights", "model_loading", None),
    # Triton's dtype refusal "in this architecture" is the GPU's (blind10 109); vLLM's loader finding a checkpoint
    # part the model class lacks (blind10 105), as the weights load (its own rule since round 12)
    ("ValueError: type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')",
     "unsupported_dtype_or_gpu", "init", None),
    ("ValueError: There is no module or parameter named 'score' in Qwen2VLForConditionalGeneration",
     "model_not_supported", "model_loading", None),
    # near misses: a TCPStore failing for another reason stays the ranks' rendezvous; transformers' "this architecture"
    # is the model's
    ("torch.distributed.DistNetworkError: The client socket has timed out after 600s while trying to connect to "
     "(10.0.0.1, 29500)", "nccl_error", "init", None),
    ("ValueError: The checkpoint you are trying to load has model type `foo` but Transformers does not recognize this "
     "architecture.", "model_not_supported", "init", None),
])
def test_round10_wordings(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,category,phase,word", [
    # a worker process of the engine died, no cause in the log (blind11 015, 108; blind9 120)
    ("ERROR 11-08 11:01:30 [multiproc_executor.py:1] Worker proc VllmWorker-3 died unexpectedly, shutting down executor.",
     "lost_rank", "unknown", "dmesg"),
    ("RayActorError: The actor died unexpectedly before finishing this task.\n\tclass_name: RayWorker\nThe actor is dead "
     "because its worker process has died. Worker exit type: SYSTEM_ERROR", "lost_rank", "unknown", "ray logs"),
    # the Hub's 404 for a repository's file, transformers' OSError cut mid-word (blind11 008)
    ("requests.exceptions.HTTPError: 404 Client Error: Not Found for url: https://huggingface.co/org/m/resolve/main/"
     "config.json", "model_not_found_or_auth", "init", None),
    ("OSError: org/m is not a local fold", "model_not_found_or_auth", "init", None),
    # V1 grouping the layers' KV specs into pages (blind11 109)
    ('  File "/x/vllm/v1/core/kv_cache_utils.py", line 1740, in get_kv_cache_groups\n'
     "    filtered_spec = unify_kv_cache_spec_page_size(filtered_spec)\nAssertionError", "unknown",
     "kv_cache_allocation", None),
    # an OOM creating tensors under the loader's torch.device context (blind11 001)
    ('  File "/x/torch/utils/_device.py", line 103, in __torch_function__\n    return func(*args, **kwargs)\n'
     "RuntimeError: NPU out of memory. Tried to allocate 52.00 MiB (NPU 1; 60.96 GiB total capacity)",
     "cuda_oom_weights", "model_loading", None),
    # an OOM in the model's forward while the offline LLM is being constructed: the profiling run (blind11 005)
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
     '  File "/x/vllm/entrypoints/llm.py", line 253, in __init__\n    self.llm_engine = LLMEngine.from_engine_args(\n'
     '  File "/x/vllm/model_executor/models/qwen2_5_vl.py", line 395, in forward\n    x = x + self.attn(x)',
     "cuda_oom_weights", "profile_run", None),
    # near misses: the worker's death beside its cause (an OOM) is that cause; the same forward frame while serving
    # (no construction frame) says nothing; a 404 from another server
    ("Worker proc VllmWorker-0 died unexpectedly\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB",
     "cuda_oom", "unknown", None),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
     '  File "/x/vllm/model_executor/models/qwen2_5_vl.py", line 395, in forward\n    x = x + self.attn(x)',
     "cuda_oom", "unknown", None),
    ("requests.exceptions.HTTPError: 404 Client Error: Not Found for url: http://localhost:8000/v1/models",
     "unknown", "init", None),
])
def test_round11_wordings(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,category,phase,word", [
    # XLA on a TPU out of HBM as the engine precompiles after the KV cache was sized (blind12 002), out of the scalar
    # memory a long sequence's graph needs (blind10 005)
    ('  File "/x/vllm/v1/worker/tpu_worker.py", line 219, in compile_or_warm_up_model\n'
     "    self.model_runner.capture_model()\nRuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: Error loading "
     "program: Attempting to reserve 1.04G at the bottom of memory. That was not possible.",
     "cuda_oom_after_kv", "graph_capture", None),
    ("RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in "
     "memory space smem. Used 1.00M of 1.00M smem.", "cuda_oom", "unknown", None),
    # Ascend: the driver library missing in a container (blind12 013); no kernel of an operator for this chip or dtype
    # (blind12 015, 016); a chip vllm-ascend does not know (blind12 017). (Init: no start-up milestone before them.)
    ("ImportError: libascend_hal.so: cannot open shared object file: No such file or directory\nRuntimeError: Failed to "
     "load the backend extension: torch_npu.", "driver_mismatch_or_no_driver", "init", None),
    ("ERROR engine.py:389]         Cannot find bin of op PromptFlashAttention, integral key 0/1/|bf16/ND/bf16/ND/.\n"
     "ERROR engine.py:389]         Cannot find binary for op PromptFlashAttention.",
     "unsupported_dtype_or_gpu", "init", "Atlas A2"),
    ("RuntimeError: call aclnnMoeGatingTopKSoftmax failed, detail:EZ1001: [PID: 51715] 2025-08-04-12:34:15.1 "
     "MoeGatingTopKSoftmax ...\n        TraceBack (most recent call last):\n        Check nnopExecutor != nullptr failed",
     "unsupported_dtype_or_gpu", "init", "Atlas A2"),
    ('  File "/x/vllm_ascend/utils.py", line 706, in check_ascend\n    raise RuntimeError(f"Can not support soc_version: '
     '{soc_version}.")\nRuntimeError: Can not support soc_version: 104.', "unsupported_dtype_or_gpu", "init", "Atlas A2"),
    # a bundle index past the caller's placement group (blind12 103); Kunlun's XCCL refusing a communicator (105)
    ("ValueError: placement group bundle index 8 is invalid. Valid placement group indexes: 0-2",
     "config_rejected", "init", None),
    ("[XCCL][init.cpp:1227] host 10.0.0.1 addr_window check failed\nValueError: [INVALID PARAMETER]: error code= 1(at "
     ".../torch_xmlir/csrc/new_xccl/XCCLUtils.hpp:53)", "nccl_error", "init", None),
    # the checkpoint's weights and the class vLLM built for it do not match, as they load (blind12 106, 107)
    ("ValueError: There is no module or parameter named 'embed_tokens' in Qwen3ForCausalLM",
     "model_not_supported", "model_loading", "--task embed"),
    ("ValueError: Following weights were not initialized from checkpoint: {'language_model.lm_head.weight'}",
     "model_not_supported", "model_loading", "--task embed"),
    # near misses: a kernel's own vmem limit on a TPU (no memory flag helps: blind8 016); an Ascend operator failing
    # for another reason; XCCL's warning without a failure
    ("jaxlib._jax.XlaRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory in memory space vmem while allocating on "
     "stack for %rpa", "unknown", "init", None),
    ("RuntimeError: call aclnnMatmul failed, detail:EZ9999: Inner Error!", "unknown", "init", None),
    ("[XCCL][util.cpp:346] dev 0 addr_window not properly set", "unknown", "unknown", None),
])
def test_round12_wordings(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,category,phase,word", [
    # a parallel layout refused in prose ("pipeline parallelism") reads as a refused engine argument (blind13 009)
    ("NotImplementedError: Pipeline parallelism is not supported yet with multiprocessing.", "config_rejected", "init",
     None),
    # a quantized layer the Marlin kernels cannot take (blind13 003): its shape, as the layer is built
    ("ERROR engine.py:366] Weight output_size_per_partition = 4304 is not divisible by  min_thread_n = 64. Consider "
     "reducing tensor_parallel_size or running with --quantization gptq.",
     "model_not_supported", "model_loading", "modules_to_not_convert"),
    # the Run:ai model streamer unable to read the weights (blind13 110)
    ("Exception: Could not send runai_request to libstreamer due to: b'File access error'",
     "model_not_found_or_auth", "model_loading", "s3://"),
    # an Ascend operator refusing a tensor's dtype (blind13 207, 208)
    ("RuntimeError: npu_quant_matmul: aclnnQuantMatmulWeightNz failed, error code is 161002\n"
     "AclNN_Parameter_Error(EZ1001): Bias dtype should be INT32, actual dtype is DT_FLOAT16",
     "unsupported_dtype_or_gpu", "init", "Atlas A2"),
    ("aclnnQuantMatmulWeightNz failed, error code is 161002\nAclNN_Parameter_Error(EZ1001):\nTensor scale not "
     "implemented for DT_FLOAT16,\nshould be in dtype support list\n[DT_UINT64, DT_BFLOAT16, DT_INT64, DT_FLOAT].",
     "unsupported_dtype_or_gpu", "init", "Atlas A2"),
    # NCCL refusing CUDA-graph capture (blind13 014)
    ("NCCL WARN NCCL cannot be captured in a graph if either it wasn't built with CUDA runtime >= 11.3 or if the "
     "installed CUDA driver < R465.", "nccl_error", "graph_capture", "--enforce-eager"),
    # a Ray Serve replica's process tag, and the OpenAI server's request handler frames: a request (blind13 109)
    ('(ServeReplica:default:VLLMDeployment pid=1328933)   File "/x/vllm/entrypoints/openai/serving_engine.py", line '
     "665, in <genexpr>\n(ServeReplica:default:VLLMDeployment pid=1328933)     return any(model.name == model_name for "
     "model in self.base_model_paths)\n(ServeReplica:default:VLLMDeployment pid=1328933) AttributeError: 'str' object "
     "has no attribute 'name'", "unknown", "serving", None),
    # near misses: an Ascend kernel failing to launch, no dtype named; a parallel group's state, no refusal
    ("AclNN_Parameter_Error(EZ1001): FlashAttentionScore launch kernel failed.", "unknown", "init", None),
    ("AssertionError: expert parallel group is not initialized", "unknown", "init", None),
])
def test_round13_wordings(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


def test_marlin_shape_names_the_dimension_it_read():
    r = diagnose("Weight input_size_per_partition = 1000 is not divisible by min_thread_k = 128.")
    assert r.summary.startswith("A quantized layer's input size per GPU (1000)") and "(128)" in r.summary


@pytest.mark.parametrize("log,category,phase,word", [
    # Marlin's tile refusing a slice on an engine of more than one rank (blind14 207): the tensor-parallel split
    ("(VllmWorkerProcess pid=14679) ERROR 08-05 23:29:38 multiproc_worker_utils.py:226] Exception in worker "
     "VllmWorkerProcess while processing method load_model: Weight input_size_per_partition = 7392 is not divisible by "
     "min_thread_k = 128., Traceback (most recent call last):", "tp_not_divisible", "model_loading", "smaller --tensor-parallel-size"),
    ("INFO Initializing an LLM engine with config: model='m', tensor_parallel_size=4, pipeline_parallel_size=1\n"
     "ValueError: Weight output_size_per_partition = 7392 is not divisible by min_thread_n = 64.",
     "tp_not_divisible", "model_loading", "smaller --tensor-parallel-size"),
    # HCCL's port taken (blind14 201): port_in_use with HCCL's port, not the engine's --port
    ("[rank0]: RuntimeError: createHCCLComm:compiler_depend.ts:1479 HCCL function error: HcclGetRootInfo(&hcclID), error "
     "code is 11\n[rank0]: EJ0003: [PID: 159] Failed to bind the IP port. Reason: The IP address and port have been "
     "bound already.\n[rank0]:         TraceBack (most recent call last):\n[rank0]:         host nic listen start "
     "failed, port[60000], return[11]", "port_in_use", "init", "60000"),
    # the model's rope_scaling in a shape this stack cannot read (blind14 103, 108)
    ("ValueError: `rope_scaling` must be a dictionary with two fields, `type` and `factor`, got {'factor': 8.0, "
     "'rope_type': 'llama3'}", "model_not_supported", "init", "transformers"),
    ('  File "/x/vllm/config.py", line 1740, in _get_and_verify_max_len\n    assert "factor" in rope_scaling\n'
     "AssertionError", "model_not_supported", "init", "transformers"),
    # a refusal worded "hasn't supported" (blind14 002), ModelScope's missing revision (205) in the frames' step,
    # Apple Metal's out-of-memory (209)
    ("ValueError: GGUF quantization hasn't supported tensor parallelism yet.", "config_rejected", "init", None),
    ('  File "/x/vllm/worker/model_runner.py", line 1276, in profile_run\n  File "/x/modelscope/hub/api.py", line 600, '
     "in get_valid_revision_detail\nmodelscope.hub.errors.NotExistError: The model: Qwen/Qwen2.5-VL-7B-Instruct has "
     "no revision: main !", "model_not_found_or_auth", "profile_run", "--revision master"),
    ("std::runtime_error: [METAL] Command buffer execution failed: Insufficient Memory "
     "(00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)", "cuda_oom", "unknown", None),
    # near misses: Marlin's refusal with one rank stays the layer's (blind13 003); HCCL's error alone stays NCCL's;
    # a rope type the engine's factory does not know stays a refused argument (round 9)
    ("Weight output_size_per_partition = 4304 is not divisible by  min_thread_n = 64.", "model_not_supported", "model_loading",
     "modules_to_not_convert"),
    ("RuntimeError: createHCCLComm: HCCL function error: HcclGetRootInfo(&hcclID), error code is 11", "nccl_error",
     "init", None),
    ("ValueError: Unknown RoPE scaling type extended", "config_rejected", "init", None),
    # "hasn't been supported" with no subject of any family; Metal's other command-buffer errors
    ("ValueError: This feature hasn't been supported yet.", "unknown", "init", None),
    ("[METAL] Command buffer execution failed: Caused GPU Timeout Error "
     "(00000002:kIOGPUCommandBufferCallbackErrorTimeout)", "unknown", "unknown", None),
])
def test_round14_wordings(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,category,phase,word", [
    # the Hub unreachable in requests' words (blind15 007): the model cannot be fetched
    ("requests.exceptions.ConnectionError: (MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max "
     "retries exceeded with url: /api/models/org/m/revision/main (Caused by NewConnectionError('<urllib3.connection."
     "HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno 101] Network is unreachable'))\")",
     "model_not_found_or_auth", "init", "HF_HUB_OFFLINE"),
    # a GPU architecture by name refused (blind15 114), Ascend's runtime out of device memory (201), a kernel table
    # with no entry for the platform (205)
    ("    assert all(\nAssertionError: One of GPU archs of ['gfx1201'] is invalid or not supported",
     "unsupported_dtype_or_gpu", "init", None),
    ("(EngineCore_DP0 pid=553) EL0004: [PID: 553] Failed to allocate memory.\n(EngineCore_DP0 pid=553)         alloc "
     "device memory failed, runtime result = 207001[FUNC:ReportCallError]", "cuda_oom", "unknown", None),
    ('  File "vllm/model_executor/layers/quantization/kernels/scaled_mm/__init__.py", line 57, in '
     "choose_scaled_mm_linear_kernel\n    for kernel in _POSSIBLE_KERNELS[current_platform._enum]:\n"
     "KeyError: <PlatformEnum.HPU: 4>", "unsupported_dtype_or_gpu", "model_loading", "quantization"),
    # one of vLLM's environment variables refused (blind15 011); a feature an --enable- flag switches, in prose (004)
    ("INFO [__init__.py:243] Automatically detected platform cpu.\n"
     "NotImplementedError: VLLM_USE_V1=1 is not supported with device type=cpu.", "config_rejected", "init", None),
    ("NotImplementedError: Sliding window is not allowed with prefix caching enabled!", "config_rejected", "init", None),
    # a worker the kernel killed (blind15 111): the rank is gone, the fix points at the OOM killer
    ("CRITICAL 05-07 19:18:17 [core_client.py:359] Got fatal signal from worker processes, shutting down. See stack "
     "trace above for root cause issue.\n(VllmWorker rank=0 pid=2) Traceback (most recent call last):\nKilled",
     "lost_rank", "unknown", "dmesg"),
    # a KeyError naming a checkpoint tensor (blind15 107, 109, 115, 203): a variant this vLLM does not load
    ("ERROR 02-05 02:55:25 [core.py:842] KeyError: 'layers.0.mlp.experts.w2_weight_scale_inv'",
     "model_not_supported", "model_loading", "upgrade vLLM"),
    # near misses: a KeyError that names no tensor; the executor's fatal signal without the kill; a sliding-window
    # refusal that names the model stays the model's; an environment variable named without a refusal
    ("KeyError: 'rope_type'", "unknown", "init", None),
    ("CRITICAL 05-07 19:18:17 [core_client.py:359] Got fatal signal from worker processes, shutting down. See stack "
     "trace above for root cause issue.", "unknown", "unknown", None),
    ("ValueError: Sliding window attention is not supported for this model", "model_not_supported", "init", None),
    ("ValueError: VLLM_ATTENTION_BACKEND is set to FLASHINFER but FlashInfer is not installed", "unknown", "init", None),
])
def test_round15_wordings(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,category,phase,word", [
    # another platform's plugin finding no memory for the KV cache (blind16 212, 213, 221: vllm-metal)
    ("ValueError: Paged attention: not enough Metal memory for KV cache. metal_limit=5.73GB, fraction=0.15, "
     "usable_metal=0.86GB, model_memory=0.34GB, overhead=1.42GB, kv_budget=-0.89GB.", "no_kv_memory",
     "kv_cache_allocation", "--gpu-memory-utilization"),
    # Ray's memory monitor killing a worker for the node's host memory (014, 015, 026): a rank gone, the fix on RAM
    ("ERROR 03-21 17:27:44 [core.py:340] ray.exceptions.OutOfMemoryError: Task was killed due to the node running low "
     "on memory.", "lost_rank", "unknown", "RAM"),
    ("(raylet) node_manager.cc:3007: 2 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed "
     "due to other reasons at node", "lost_rank", "unknown", "RAY_memory_usage_threshold"),
    # the TPU's HBM in XLA's allocation words (210); the Hub unreachable, quotes escaped inside a repr (016)
    ("RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 832.0K. That was not possible. There "
     "are 112.5K free.; (0x0x0_HBM0)", "cuda_oom", "unknown", None),
    ("requests.exceptions.ConnectionError: (MaxRetryError('HTTPSConnectionPool(host=\\'huggingface.co\\', port=443): "
     "Max retries exceeded with url: /api/models/meta-llama/Llama-2-13b-chat-hf", "model_not_found_or_auth", "init", None),
    # the CUDA runtime vLLM was built for missing (018); a kernel with no code for the GPU (102); Ascend's operator
    # package for another SoC (205)
    ("    from vllm import cuda_utils\nImportError: libcudart.so.12: cannot open shared object file: No such file or "
     "directory", "driver_mismatch_or_no_driver", "init", "nvidia-cuda-runtime"),
    ("RuntimeError: HIP error: invalid device function\nHIP kernel errors might be asynchronously reported at some "
     "other API call", "unsupported_dtype_or_gpu", "init", None),
    ("[ERROR] the socversion Ascend910B1 of bin package does not match the current device socverison Ascend310P3.",
     "unsupported_dtype_or_gpu", "init", None),
    # the hub's cache not there (113), a GGUF read as a config (001) or not mapped (214), a LoRA module vLLM cannot
    # load (004), a config class without a field vLLM reads (112)
    ("Cache directory not found: /data/.cache/huggingface. Please use `cache_dir` argument or set `HF_HUB_CACHE` "
     "environment variable.", "model_not_found_or_auth", "unknown", None),
    ("OSError: It looks like the config file at '/root/.cache/m/tinyllama-1.1b-chat-v1.0.Q4_0.gguf' is not a valid "
     "JSON file.", "model_not_supported", "init", "--tokenizer"),
    ("RuntimeError: Failed to map GGUF parameters (356):", "model_not_supported", "model_loading", "GGUF loader"),
    ("ValueError: base_model.model.lm_head.weight is unsupported LoRA weight", "model_not_supported", "unknown",
     "modules_to_save"),
    ("AttributeError: 'Qwen2_5OmniConfig' object has no attribute 'num_attention_heads'", "model_not_supported", "init",
     None),
    # an attention backend this vLLM does not have (208); more DP ranks on a node than devices (211); a tensor that
    # does not split over a TPU mesh (217)
    ("ValueError: Unknown attention backend: 'ASCEND'. Valid options are: FLASH_ATTN, TRITON_ATTN, XFORMERS",
     "config_rejected", "init", "VLLM_ATTENTION_BACKEND"),
    ("AssertionError: DP adjusted local rank 3 is out of bounds for 1 devices.", "config_rejected", "init",
     "--data-parallel-size"),
    ("ValueError: One of device_put args was given the sharding of NamedSharding(mesh=Mesh('data': 1, 'model': 8), "
     "spec=PartitionSpec('model', None)), which implies that the global size of its dimension 0 should be divisible "
     "by 8, but it is equal to 4", "tp_not_divisible", "init", None),
    # near misses: Ray's OOM of a task with no worker named stays Ray's (not the GPU's); a config object's missing
    # field that is no config class; vmem (a kernel's own limit) stays unknown; a device function named in prose
    ("AttributeError: 'GPUModelRunner' object has no attribute 'kv_caches'", "unknown", "init", None),
    ("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory "
     "space vmem. Used 76.58M of 64.00M vmem.", "unknown", "init", None),
    ("ImportError: libcudnn.so.9: cannot open shared object file", "unknown", "init", None),
])
def test_round16_wordings(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,phase", [
    # a launcher or wrapper saying the engine never came up, and no exception line of its own: start-up (low)
    ("2024-07-01 07:28:04.488 1 kserve ERROR [__main__.py:<module>():254] Failed to start model server: integer "
     "division or modulo by zero", "init"),
    ("/usr/bin/python3: Error while finding module specification for 'vllm.entrypoints.openai.api_server' "
     "(ModuleNotFoundError: No module named 'vllm')", "init"),
    # after a start-up milestone, the milestone places it (not this guess); no such words: no phase
    ("INFO 01-01 00:00:00 [gpu_model_runner.py:1] Starting to load model /m\n"
     "kserve ERROR Failed to start model server: boom", "model_loading"),
    ("kserve WARNING the model server stopped", "unknown"),
])
def test_a_wrapper_saying_the_engine_failed_to_start_places_it_at_start_up(log, phase):
    r = diagnose(log)
    assert (r.category, r.phase) == ("unknown", phase)
    assert r.phase_confidence == ("none" if phase == "unknown" else "low")


@pytest.mark.parametrize("log,category,phase,word", [
    # torch_npu failing to bring up the NPU as the device is initialised: the driver, firmware and CANN below it
    # (blind14 203, blind15 202, blind17 202, 206)
    ("RuntimeError: Initialize:torch_npu/csrc/core/npu/sys_ctrl/npu_sys_ctrl.cpp:146 NPU function error: "
     "c10_npu::SetDevice(device_id_), error code is 507033", "driver_mismatch_or_no_driver", "init", "npu-smi"),
    ("RuntimeError: SetPrecisionMode:torch_npu/csrc/framework/LazyInitAclops.cpp:155 NPU function error: "
     "at_npu::native::AclSetCompileopt(aclCompileOpt::ACL_PRECISION_MODE, precision_mode), error code is 500001",
     "driver_mismatch_or_no_driver", "init", "CANN"),
    # near miss: the same torch_npu wording for an operator while serving is no device initialisation
    ("RuntimeError: npu_fusion_attention:op_plugin/ops/FlashAttentionKernelNpuOpApi.cpp:1345 NPU function error: "
     "call aclnnFlashAttentionVarLenScore failed, error code is 561103", "unknown", "init", None),
    # HCCL's own error codes (CANN's EI class), whichever torch_npu call surfaced them (blind5 025, blind17 209, 210)
    ("RuntimeError: npuSynchronizeDevice:compiler_depend.ts:479 NPU function error: AclrtSynchronizeDeviceWithTimeout, "
     "error code is 507048\nEI0002: [PID: 13075] 2025-06-25-10:45:23.586.187 The wait execution of the Notify register "
     "times out.", "nccl_error", "unknown", None),
    ("RuntimeError: EI0007: [PID: 50935] 2025-09-10-03:36:31.100.592 Failed to allocate resource[qp] with info "
     "[aicpu rank:7]\n        Transport init error. Reason: [Create][DestLink]Create Dest error!", "nccl_error", "init",
     None),
    # a KeyError naming only a tensor's suffix (a quantization description looked up with an empty prefix: blind17 207)
    ("KeyError: '.weight'", "model_not_supported", "model_loading", None),
    # a model class looked up in a plugin's registry and not there: the class is not served (blind17 213)
    ('  File "/ws/vllm_omni/diffusion/registry.py", line 402, in initialize_model\n'
     "ValueError: Model class BailingMMNativeForConditionalGeneration not found in diffusion model registry.",
     "model_not_supported", "model_loading", "registry"),
])
def test_round17_wordings(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,category,phase,word", [
    # the client saw the engine-core process die, nothing else in the log: the engine is gone (blind18 006)
    ("ERROR 01-16 17:16:49 [core_client.py:605] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
     "lost_rank", "unknown", "dmesg"),
    # near miss: its SIGKILL form stays the crash it was read as (no cause the rules name)
    ("ERROR 05-30 07:45:00 [core_client.py:1] Engine core proc EngineCore_DP0 died unexpectedly, killed by signal -9",
     "unknown", "unknown", None),
    # a cause in the log wins over the notice (blind14 209)
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
     "ERROR [core_client.py:605] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
     "cuda_oom", "unknown", None),
])
def test_round18_wordings(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,category,phase,word", [
    # Ray's cluster-wide check in its bare words, the ValueError's prefix not posted (blind19 103)
    ("The number of required GPUs exceeds the total number of available GPUs in the cluster.",
     "config_rejected", "init", "ray status"),
    # a FlashAttention-3 ("hopper") kernel's launch failing on another GPU, after the profiling milestone (blind19 107)
    ("INFO [gpu_model_runner.py:2591] Encoder cache will be initialized with a budget of 16384 tokens, and profiled "
     "with 1 image items of the maximum feature size.\n"
     "CUDA error (/__w/xformers/xformers/third_party/flash-attention/hopper/flash_fwd_launch_template.h:188): "
     "invalid argument", "unsupported_dtype_or_gpu", "profile_run", "--mm-encoder-attn-backend"),
    # near miss: a CUDA error in FlashAttention-2's sources is no Hopper-only kernel (and no cause the rules name)
    ("CUDA error (/src/flash-attention/csrc/flash_attn/src/flash_fwd_launch_template.h:89): invalid argument",
     "unknown", "unknown", None),
])
def test_round19_wordings(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)


@pytest.mark.parametrize("log,category,phase,word", [
    # sleep mode's allocator mapping memory back on wake-up: the line alone, and under wake_up's frames (blind20 021, 022)
    ("CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:56\n"
     "CUDA Error: invalid argument at /workspace/csrc/cumem_allocator.cpp:57", "cuda_oom_runtime", "serving", None),
    ('  File "/usr/local/lib/python3.10/dist-packages/vllm/worker/worker.py", line 140, in wake_up\n'
     "    allocator.wake_up()\n"
     "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
     "cuda_oom_runtime", "serving", None),
    # near miss: a torch OOM under start-up's frames stays the start-up's (sleep mode or not)
    ('  File "/x/vllm/worker/worker.py", line 183, in determine_num_available_blocks\n'
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "cuda_oom_weights", "profile_run", None),
    # Triton's FP8 on a GPU without it, in a title's words or the ValueError's (blind20 051, 053)
    ("[Bug]: Qwen3 FP8 on 0.8.5: type fp8e4nv not supported in this architecture.",
     "unsupported_dtype_or_gpu", "init", "Ada/Hopper"),
    # a CUTLASS kernel not compiled for this capability, in a worker's log record (blind20 054)
    ("(VllmWorkerProcess pid=3737) ERROR 10-16 19:44:44 multiproc_worker_utils.py:231] Exception in worker "
     "VllmWorkerProcess while processing method determine_num_available_blocks: Error in calling custom op "
     "cutlass_scaled_mm: No compiled cutlass_scaled_mm for a compute capability less than CUDA device capability: 75",
     "unsupported_dtype_or_gpu", "profile_run", "TORCH_CUDA_ARCH_LIST"),
    # torch's allocator warning, one per rank (blind20 030)
    ("[rank3]:[W804 15:02:21.946926299 CUDACachingAllocator.cpp:3933] memory allocation failed with OOM on device 3 "
     "while trying to allocate 26229080064 bytes (free: 16487546880, total: 191503007744).", "cuda_oom", "unknown", None),
    # HCCL's codes as CANN names them, and an operator's HCCL call (blind20 209, 213)
    ("[PID: 749] 2025-12-29-03:16:15.787.356 Get_Socket_Timeout(EI0006): Getting socket times out. Reason: 1. The "
     "remote does not initiate a connect request.", "nccl_error", "unknown", None),  # a time-out: no phase of its own
    ("Nnopbase fails to invoke the HcclAllocComResourceByTiling function of the hccl module. ret = 9, comm = 0xff.",
     "nccl_error", "init", None),
    # Ray's worker gone without a word (blind20 005, 023)
    ("WARNING worker.py:2074 -- A worker died or was killed while executing a task by an unexpected system error. "
     "To troubleshoot the problem, check the logs for the dead worker.", "lost_rank", "unknown", None),
    # near miss: the cause the log shows wins over Ray's notice
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
     "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file.",
     "cuda_oom", "unknown", None),
    # a parallel layout by its abbreviation in a refusal (blind20 058); lower case words are no abbreviation
    ("ValueError: BitAndBytes quantization with TP or PP is not supported yet.", "config_rejected", "init", None),
    ("ValueError: the tp of this checkpoint is not supported yet.", "unknown", "init", None),
    # a request's length check quoted inside a sentence: no exception line, still a request's (blind20 103, 114)
    ("设置了以下config没有生效: ValueError: Prompt length of 5016 is longer than the maximum model length of 4096.",
     "unknown", "serving", None),
    # Intel GPUs' Unified Runtime out of resources (blind20 117, blind14 104)
    ("RuntimeError: level_zero backend failed with error: 40 (UR_RESULT_ERROR_OUT_OF_RESOURCES)", "cuda_oom", "unknown",
     None),
])
def test_round20_wordings(log, category, phase, word):
    _diagnosed_as(log, category, phase, word)
