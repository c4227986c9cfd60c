"""Diagnosis of every log of the twenty blind hold-outs, round 1 (tests/fixtures/vllm-failures-blind), round 2
(tests/fixtures/vllm-failures-blind2), round 3 (tests/fixtures/vllm-failures-blind3), round 4
(tests/fixtures/vllm-failures-blind4), round 5 (tests/fixtures/vllm-failures-blind5), round 6
(tests/fixtures/vllm-failures-blind6), round 7 (tests/fixtures/vllm-failures-blind7), round 8
(tests/fixtures/vllm-failures-blind8), round 9 (tests/fixtures/vllm-failures-blind9), round 10
(tests/fixtures/vllm-failures-blind10), round 11 (tests/fixtures/vllm-failures-blind11), round 12
(tests/fixtures/vllm-failures-blind12), round 13 (tests/fixtures/vllm-failures-blind13), round 14
(tests/fixtures/vllm-failures-blind14), round 15 (tests/fixtures/vllm-failures-blind15), round 16
(tests/fixtures/vllm-failures-blind16), round 17 (tests/fixtures/vllm-failures-blind17), round 18
(tests/fixtures/vllm-failures-blind18), round 19 (tests/fixtures/vllm-failures-blind19) and round 20
(tests/fixtures/vllm-failures-blind20), each under the rule of its
PROTOCOL.md. Until a round's
final measurement only its development two-thirds were here (sorted by file name, index i % 3 != 2); the
blind third joined after it was measured once (rounds 1-3 on 2026-12-02, rounds 4 and 5 on 2026-12-03, rounds 6 to 16 on 2026-12-04, rounds 17 to 20 on 2026-12-05, with rules
never tuned on them; PROTOCOL.md), as the protocol says.
The expected category and phase are the collector's, from each .meta.yaml.

Logs the classifier still gets wrong are KNOWN_MISSES, strict xfails: a fix turns one into a failure
that asks for the list to shrink, and a regression elsewhere fails. A blind third's figure is the one of
its measurement (its PROTOCOL.md); misses that general rules fixed after it have left this list."""

from __future__ import annotations

import re

import pytest
import yaml

from conftest import REPO, failure_logs
from vllm_deploy.diagnose import CATEGORIES, PHASES, diagnose
from vllm_deploy.ladder import ACTIONS

FIXTURES = REPO / "tests" / "fixtures"
# folder: logs collected
ROUNDS = {"vllm-failures-blind": 61, "vllm-failures-blind2": 46, "vllm-failures-blind3": 60, "vllm-failures-blind4": 40,
          "vllm-failures-blind5": 70, "vllm-failures-blind6": 32, "vllm-failures-blind7": 30,
          "vllm-failures-blind8": 36, "vllm-failures-blind9": 41, "vllm-failures-blind10": 25,
          "vllm-failures-blind11": 30, "vllm-failures-blind12": 30,
          "vllm-failures-blind13": 49, "vllm-failures-blind14": 37, "vllm-failures-blind15": 40,
          "vllm-failures-blind16": 63, "vllm-failures-blind17": 24,
          "vllm-failures-blind18": 15, "vllm-failures-blind19": 16,
          "vllm-failures-blind20": 131}


LOGS = {folder: failure_logs(FIXTURES / folder, size, "PROTOCOL.md") for folder, size in ROUNDS.items()}
DEV = {folder: [n for i, n in enumerate(names) if i % 3 != 2] for folder, names in LOGS.items()}
HELD = {folder: [n for i, n in enumerate(names) if i % 3 == 2] for folder, names in LOGS.items()}
# Round 5's reasons, as its one measurement found them (the logs were not studied for finer reasons: no tuning on them)
_OOM_NO_STEP = "an out-of-memory error whose step no frame or milestone in the excerpt shows: generic cuda_oom"
_NO_PHASE = "no frame, milestone or serving line the rules read places it: phase unknown"
# A KeyError naming a checkpoint tensor in the weight loader: rounds 6 and 12's collectors filed seven such logs unknown (a
# checkpoint saved or converted with other names), rounds 13-15's nine model_not_supported (this vLLM cannot load the
# variant). Since round 15 the rules take the majority's side (model_not_supported, medium); a shape assert with no
# words of its own stays unknown.
_SPLIT_LOADER = ("an error inside the weight loader (a shape assert) with no words of its own: unknown, as rounds 6 and "
                 "12 filed seven KeyErrors; this thread: the variant vLLM cannot load (model_not_supported)")
_LOADER_KEY_UNKNOWN = ("a KeyError naming a checkpoint tensor: read as a variant this vLLM does not load "
                       "(model_not_supported, as nine of the sixteen such threads concluded); this thread: a checkpoint "
                       "saved or converted with other names (unknown)")
KNOWN_MISSES = {
    # folder: {(log, what): why the classifier cannot see what the collector found}
    "vllm-failures-blind": {
        ("013-cuda-oom-inference-qwen3-vl-3090-v011.log", "category"):
            "two lines of a torch OOM; 'while inference' is only in the thread's title",
        ("013-cuda-oom-inference-qwen3-vl-3090-v011.log", "phase"): "no frame, milestone or serving line",
        ("040-no-kernel-image-rtx5090d-gpustack-v1.log", "category"):
            "the excerpt ends before the RuntimeError (in the title); its phase, init, is found",
        ("044-free-memory-below-request-ray-v1-ci-no-message-line.log", "category"):
            "a Ray worker's ValueError without its message (the message is in the title)",
        # The blind third's misses at its final measurement (PROTOCOL.md), left as measured:
        ("012-cuda-oom-serving-v1-engine-dead-3090.log", "category"):
            "the excerpt ends inside the EngineCore traceback before the OOM line (in the title)",
    },
    "vllm-failures-blind2": {
        ("005-cuda-oom-cuda-init-torch211-rtx4090.log", "category"):
            "two lines of a torch OOM: generic cuda_oom; 'during CUDA initialization' is only in the title",
        ("005-cuda-oom-cuda-init-torch211-rtx4090.log", "phase"): "no frame, milestone or serving line",
        ("016-model-not-supported-llamamodel-notebook-cut.log", "category"):
            "the notebook excerpt ends inside get_model before the ValueError (in the title); its phase is found",
        ("017-model-not-supported-seqcls-offsetbias-notebook.log", "category"):
            "the notebook excerpt ends inside load_model before the ValueError (in the title); its phase is found",
        ("026-cuda-oom-serving-v0-concurrent-requests-cut.log", "category"):
            "the API server's request traceback ends before the OOM line (in the title); its phase is found",
        ("029-tp-not-divisible-internvl2-26b-vit-25-heads.log", "category"):
            "the excerpt ends in the LLM() traceback before the AssertionError (in the title)",
        ("034-unknown-worker-died-unexpectedly-art-2xa100.log", "category"):
            "a worker process that died with no error of its own: lost_rank since rounds 9 and 11 (three collectors "
            "filed the same words so); this round's collector: unknown",
        ("034-unknown-worker-died-unexpectedly-art-2xa100.log", "phase"):
            "a worker dies with no error of its own; that it was on a training step, serving, is only in the thread",
        # The blind third's misses at its final measurement (PROTOCOL.md), left as measured:
        ("024-config-rejected-limit-mm-per-prompt-llamafactory-v053.log", "category"):
            "the excerpt ends inside LLaMA-Factory's ChatModel frame before the TypeError (in the title)",
        ("024-config-rejected-limit-mm-per-prompt-llamafactory-v053.log", "phase"):
            "only LLaMA-Factory frames, cut before any of vLLM's",
    },
    "vllm-failures-blind3": {
        ("008-nccl-watchdog-heartbeat-kserve-serving.log", "phase"):
            "a watchdog timeout with no sequence number or milestone: that KServe was serving is only in the thread",
        ("050-nccl-watchdog-broadcast-naive-all2all-multinode.log", "phase"):
            "the collective's SeqNum (5730) is below the mark above which a collective counts as serving",
        # The blind third's misses at its final measurement (PROTOCOL.md), left as measured:
        ("024-cuda-oom-profile-run-minicpmv-3090.log", "category"):
            "V0's 'Error in model execution' OOM under LLM(): generic cuda_oom; the thread places it in the profile run",
        ("024-cuda-oom-profile-run-minicpmv-3090.log", "phase"):
            "the posted constructor call is the only sign of start-up: no frame or milestone",
    },
    # Round 4 was measured once with the rules tuned on rounds 1-3 (PROTOCOL.md): its misses then are listed there.
    # After it, general rules (test_diagnose.py's tables) fixed three development and all three blind category misses.
    "vllm-failures-blind4": {
        ("019-oom-runtime-omni-minicpmo-continuous-requests.log", "category"):
            "an OOM in vllm-omni's stage engine process: that requests were being served is only in the title",
        ("019-oom-runtime-omni-minicpmo-continuous-requests.log", "phase"):
            "stage_engine_core_proc.py's error lines are no serving evidence the rules read",
    },
    # Round 5 was measured once with the rules tuned on rounds 1-4 (PROTOCOL.md lists its misses then). After it,
    # general rules (test_diagnose.py's round-5 tables) fixed five development and one blind category miss and eight
    # phase misses; what is left:
    "vllm-failures-blind5": {
        ("012-npu-oom-ascend-deepseek-r1-w8a8-ray.log", "category"):
            "the OOM's innermost frame is torch's device context (torch/utils/_device.py), which vLLM's loader opens to "
            "build the model: a weights OOM (since round 11); the collector kept the plain device OOM (cuda_oom)",
        ("016-cuda-oom-weights-h20-qwen25-72b-fp8.log", "category"): _OOM_NO_STEP + " (the thread: weight loading)",
        ("016-cuda-oom-weights-h20-qwen25-72b-fp8.log", "phase"): _NO_PHASE,
        ("133-engineargs-model-hf-config-time-r1-verl.log", "category"):
            "read as config_rejected; the collector found no category that fits the thread's conclusion (unknown)",
        # the blind third's:
        ("126-oom-sampler-warmup-skyrl-colocated-l4.log", "category"): _OOM_NO_STEP + " (the thread: sampler warm-up)",
        ("126-oom-sampler-warmup-skyrl-colocated-l4.log", "phase"): _NO_PHASE,
        ("129-oom-weights-qwen1-5-72b-no-tp-8xa800.log", "category"): _OOM_NO_STEP + " (the thread: weight loading)",
        ("129-oom-weights-qwen1-5-72b-no-tp-8xa800.log", "phase"): _NO_PHASE,
    },
    # Round 6 was measured once with the rules tuned on rounds 1-5 (PROTOCOL.md lists its misses then). After it,
    # general rules (test_diagnose.py's round-6 table) fixed five development and two blind category misses and six
    # development and one blind phase misses; what is left:
    "vllm-failures-blind6": {
        ("017-keyerror-gate-up-proj-bnb-mistral-large-tp2.log", "category"): _LOADER_KEY_UNKNOWN,
        ("018-keyerror-down-proj-bnb4bit-llama33-load-weights.log", "category"): _LOADER_KEY_UNKNOWN,
        ("014-oom-injection-qwen3-omni-serving-exit.log", "category"): _OOM_NO_STEP + " (the thread: serving)",
        ("014-oom-injection-qwen3-omni-serving-exit.log", "phase"):
            "a model forward frame under vllm-omni's stage engine process: start-up's profiling run or a request alike",
        ("019-invalid-device-ordinal-ray-visible-devices-v017.log", "category"):
            "one line, 'invalid device ordinal', read as too few GPUs for the tensor-parallel size (its usual cause); "
            "the thread found a device-index mismatch under Ray (unknown)",
        ("105-oom-logprobs-serving-lm-eval-72b.log", "category"): _OOM_NO_STEP + " (the thread: serving, after KV)",
        ("105-oom-logprobs-serving-lm-eval-72b.log", "phase"):
            "one sampler frame (get_logprobs), which V0's profiling run also passes through",
    },
    # Round 7 was measured once with the rules tuned on rounds 1-6 (PROTOCOL.md lists its misses then). After it,
    # general rules (test_diagnose.py's round-7 table) fixed five development and two blind category misses and seven
    # development and five blind phase misses; what is left:
    "vllm-failures-blind7": {
        ("013-arch-not-supported-eagle-qwen2-drafter-v1.log", "phase"):
            "the registry's refusal, read at start-up; the thread: the EAGLE drafter's class, looked up as it loads",
        ("106-weights-not-initialized-gemma4-swift-sft-checkpoint.log", "category"):
            "the loader's 'Following weights were not initialized from checkpoint' read as checkpoint and class not "
            "matching (model_not_supported, as round 12's 106 by its thread); this thread: a checkpoint saved without "
            "those weights (unknown)",
    },
    # Round 8 was measured once with the rules tuned on rounds 1-7 (PROTOCOL.md lists its misses then). After it,
    # general rules (test_diagnose.py's round-8 table) fixed eight development and one blind category misses and five
    # development phase misses; what is left:
    "vllm-failures-blind8": {
        ("005-no-weights-load-format-safetensors-vicuna.log", "category"):
            "'Cannot find any model weights' read as no weights at the path; the thread: --load-format safetensors "
            "against a .bin checkpoint (config_rejected)",
        ("017-cuda-oom-deepgemm-warmup-qwen3-coder-480b-h20.log", "category"): _OOM_NO_STEP + " (the thread: DeepGEMM's "
            "warm-up before graph capture)",
        ("017-cuda-oom-deepgemm-warmup-qwen3-coder-480b-h20.log", "phase"): _NO_PHASE,
        ("112-glm41v-limit-mm-not-multimodal.log", "category"):
            "'limit_mm_per_prompt is only supported for multimodal models' read as a refused flag; the thread: this "
            "vLLM did not know the model as multimodal (model_not_supported)",
        ("115-qwen3-omni-flash-attn-headdim-multiple-of-32.log", "category"):
            "read as an OOM during profiling; the collector found no category for the thread's head-size limit (unknown)",
        # the blind third's, at its one measurement:
        ("105-dynamo-multinode-tp-larger-than-gpus.log", "category"):
            "'Tensor parallel size (2) cannot be larger than the number of available GPUs (1)' read as too few GPUs "
            "(tp_not_divisible, the deploy's own word for it); the collector: config_rejected",
        ("108-runpod-template-no-module-vllm-driver.log", "category"): "driver_mismatch_or_no_driver -> unknown, as measured",
    },
    # Round 9 was measured once with the rules tuned on rounds 1-8 and the families (PROTOCOL.md lists its misses
    # then). After it, general rules (test_diagnose.py's round-9 table) fixed five development and three blind category
    # misses and four development and two blind phase misses; what is left:
    "vllm-failures-blind9": {
        ("005-npu-oom-serving-attn-mask-ascend.log", "category"):
            _OOM_NO_STEP + " (the thread's title: a request; the excerpt's frames are the attention mask's only)",
        ("005-npu-oom-serving-attn-mask-ascend.log", "phase"): _NO_PHASE,
        ("019-ascend-aria-moe-group-topk-view.log", "category"):
            "a tensor view that fails inside vllm-ascend's grouped top-k: that the model is one it does not support "
            "is only in the thread (model_not_supported)",
        ("020-ascend-qwen-moe-group-topk-none.log", "category"):
            "an operator's argument of the wrong type inside vllm-ascend's grouped top-k: that the model is one it "
            "does not support is only in the thread (model_not_supported)",
        ("103-gfx906-qwen3-32b-bf16-hip-oom-32gb.log", "category"):
            "read as a weights OOM: Qwen3-32B's ~60 GiB of bf16 weights on a 32 GiB GPU; the collector kept vLLM's "
            "own words, a plain OOM (cuda_oom)",
        ("105-gaudi1-pt-lazy-fatal-after-weights.log", "category"):
            "Habana's PT_LAZY bridge fails after the weights load; that first-generation Gaudi is not supported is "
            "only in the thread (unsupported_dtype_or_gpu)",
        # the blind third's, at its one measurement, that general rules did not fix:
        ("006-omni-npu-unpack-error-execute-model.log", "phase"):
            "the excerpt starts below the execute_model frame the collector read in the thread: placed in init "
            "(no milestone before the error)",
        ("107-tt-n150-llama8b-max-model-len-65536.log", "phase"):
            "the model's own refusal of the context length, one line: read as start-up's check (init); the thread: "
            "the TT model's initialisation (model_loading)",
        ("110-bentovllm-mistral-7b-oom-gpu-util.log", "category"):
            "one OOM line cut mid-sentence: plain cuda_oom; after the KV cache only in the maintainer's explanation",
    },
    # Round 10 was measured once with the rules tuned on rounds 1-9 (PROTOCOL.md lists its misses then). After it,
    # general rules (test_diagnose.py's round-10 table) fixed four development and two blind category misses and both
    # development phase misses; what is left:
    "vllm-failures-blind10": {
        ("104-xinference-tp2-4090-engine-core-init-failed.log", "category"):
            "the log stops after the profiling milestone with only the launcher's 'See root cause above': read as the "
            "profiling run's usual OOM (low); the thread found no cause (unknown)",
        # the blind third's, at its one measurement:
        ("006-npu-oom-kv-alloc-qwen3-next-ascend.log", "category"):
            "an OOM allocating the KV cache tensors is cuda_oom_after_kv by diagnose's categories; the collector kept "
            "the plain device OOM (cuda_oom) with the phase kv_cache_allocation",
    },
    # Round 11 was measured once with the rules tuned on rounds 1-10 (PROTOCOL.md lists its misses then). After it,
    # general rules (test_diagnose.py's round-11 table) fixed three development and one blind category misses and two
    # development and one blind phase misses, and read one development OOM the collector kept plain (005) by its
    # phase; what is left:
    "vllm-failures-blind11": {
        ("004-ascend-hccl-dp-ep-device-id.log", "phase"):
            "an HCCL communicator created as a MoE layer is built: read as the communicators' set-up at worker start "
            "(init); the thread: model loading",
        ("005-qwen25vl-72b-mm-limit-oom-llm-init.log", "category"):
            "an OOM in the model's forward while the engine is constructed: the profiling run, so cuda_oom_weights by "
            "diagnose's categories; the collector kept the plain OOM (cuda_oom) with that phase",
        ("108-lost-rank-verl-vllm-sleep-worker-died.log", "phase"):
            "a Ray actor's death with only verl's frames above it: that the rollout was serving is only in the thread",
        ("113-oom-worker-failed-2x3090-qwen38-flash.log", "category"):
            _OOM_NO_STEP + " (the thread: the first prompt after start-up)",
        ("113-oom-worker-failed-2x3090-qwen38-flash.log", "phase"): _NO_PHASE,
        # the blind third's, at its one measurement, that general rules did not fix:
        ("106-oom-model-execution-gpustack-single-gpu-7b.log", "category"):
            "V0's 'Error in model execution' OOM, one line: the profiling run and a request alike; generic cuda_oom",
        ("106-oom-model-execution-gpustack-single-gpu-7b.log", "phase"): _NO_PHASE,
    },
    # Round 12 was measured once with the rules tuned on rounds 1-11 (PROTOCOL.md lists its misses then). After it,
    # general rules (test_diagnose.py's round-12 table) fixed six development and two blind category misses; what is
    # left:
    "vllm-failures-blind12": {
        ("005-glm45-air-awq-mix-ep-keyerror-load-weights.log", "category"): _LOADER_KEY_UNKNOWN,
        ("006-ascend-w8a8-deepseek-r1-keyerror-weight-offset.log", "category"): _LOADER_KEY_UNKNOWN,
        ("007-ascend-w8a8-quant-description-keyerror-linear-init.log", "category"): _LOADER_KEY_UNKNOWN,
        ("010-ascend-073-w8a8-llama2-keyerror-deq-scale.log", "category"): _LOADER_KEY_UNKNOWN,
        ("011-ascend-glm52-w8a8-keyerror-indexer-weight.log", "category"): _LOADER_KEY_UNKNOWN,
        ("001-dspark-speculator-oom-kernel-warmup.log", "category"):
            _OOM_NO_STEP + " (the thread, elsewhere in the comment: the kernel warm-up after the KV cache was sized)",
        ("001-dspark-speculator-oom-kernel-warmup.log", "phase"): _NO_PHASE,
        # the blind third's, at its one measurement, that general rules did not fix:
        ("003-tpu-qwen3vl-forward-typeerror.log", "category"):
            "a TypeError in the model's forward under JAX: that tpu-inference does not support the model yet is only "
            "in the thread (model_not_supported)",
        ("110-unknown-verl-megatron-merged-decoder-param-names.log", "category"):
            "'There is no module or parameter named' read as checkpoint and class not matching (model_not_supported, "
            "as 107 by its thread); this thread: a Megatron checkpoint merged with its own names (unknown)",
        ("113-oom-profile-video-encoder-qwen25vl-tp2-24gb.log", "category"):
            _OOM_NO_STEP + " (the thread: the vision encoder's dummy input of start-up's profiling run)",
        ("113-oom-profile-video-encoder-qwen25vl-tp2-24gb.log", "phase"): _NO_PHASE,
    },
    # Round 13 was measured once with the rules tuned on rounds 1-12 (PROTOCOL.md lists its misses then). After it,
    # general rules (test_diagnose.py's round-13 table) fixed two development and three blind category misses and
    # two development and one blind phase misses; what is left:
    "vllm-failures-blind13": {
        ("002-gguf-minicpmv-vocab-embedding-assert.log", "category"): _SPLIT_LOADER,
        ("015-mlpspeculator-num-spec-tokens-too-high.log", "category"):
            "a refusal naming speculative_model and num_speculative_tokens, arguments of older vLLMs that the pinned "
            "vLLM's argument dump no longer has (config_rejected by the thread)",
        ("104-nccl-watchdog-broadcast-swift-infer-tp4.log", "phase"):
            "the collective's SeqNum (1410) is below the mark above which a collective counts as serving",
        ("108-gfx906-fork-wna16-moe-init-typeerror.log", "phase"):
            "the loader's frames are in a part of the post the excerpt left out: no milestone before the error (init)",
        ("115-oom-serving-qwen25vl32b-4x4090-images.log", "category"): _OOM_NO_STEP + " (the thread: serving images)",
        ("115-oom-serving-qwen25vl32b-4x4090-images.log", "phase"): _NO_PHASE,
        ("204-ascend-ray-multimachine-tcpstore-1of8-clients.log", "category"):
            "torch's TCPStore waiting for the other ranks' clients is the ranks' rendezvous (nccl_error, README); the "
            "thread: a multi-node Ray layout set up wrong (config_rejected)",
        ("206-ascend-bge-m3-flashattention-ez1001-serving.log", "phase"):
            "only the executor's get_response frames: that the worker was serving a request is only in the thread",
        ("208-ascend-910b-w8a8-fp16-quant-scale-profile.log", "phase"):
            "the operator's error with no frame or milestone: placed in init; the thread: the profiling run",
        # the blind third's, at its one measurement, that general rules did not fix:
        ("106-lmcache-flashattention-only-t4-xformers.log", "category"):
            "LMCache's 'Only FlashAttention backend is supported' on a request; that the T4 cannot run FlashAttention is "
            "only in an INFO line at start-up (unsupported_dtype_or_gpu by the thread)",
        ("201-tpu-qwen35-vit-vmem-oom-serving.log", "category"):
            "XLA's vmem exhausted on a TPU: a kernel's own limit, unknown since round 8's collector filed it so; this "
            "thread: an OOM while serving (cuda_oom_runtime)",
        ("201-tpu-qwen35-vit-vmem-oom-serving.log", "phase"): "no frame of a request's path the rules read: init",
    },
    # Round 14 was measured once with the rules tuned on rounds 1-13 (PROTOCOL.md lists its misses then). After it,
    # general rules (test_diagnose.py's round-14 table) fixed five development and two blind category misses; left:
    "vllm-failures-blind14": {
        ("003-cpu-otlp-v0-fallback-cpu-only-v1.log", "category"):
            "the CPU backend's refusal of the V0 engine ('CPU backend only supports V1.'), a wording no rule reads "
            "(config_rejected by the thread)",
        ("003-cpu-otlp-v0-fallback-cpu-only-v1.log", "phase"): "no milestone before the error: init",
        ("005-awq-qwen05b-marlin-min-thread-k-tp.log", "category"):
            "Marlin's tile refusal with no sign of more than one rank in the excerpt: read as the layer's "
            "(model_not_supported, as blind13 003 on one GPU); the collector: the message's tensor-parallel advice",
        ("011-mtp-spec-decode-pp4-supportspp-draft.log", "category"):
            "'Pipeline parallelism is not supported for this model': the model's (model_not_supported, as earlier "
            "rounds file it); the thread: the speculative layout with a draft model refused (config_rejected)",
        ("012-mllama-11b-tp4-oom-determine-blocks.log", "category"):
            "an OOM whose figures the rules read as weights that do not fit; the thread: the profiling run (cuda_oom)",
        ("013-bloom3b-prefix-caching-head-size-assert.log", "category"):
            "a bare assert on the head size in the attention kernel: no words the rules read (model_not_supported by "
            "the thread: prefix caching with this model)",
        ("013-bloom3b-prefix-caching-head-size-assert.log", "phase"): _NO_PHASE,
        ("015-ernie45-vl-remote-code-module-not-found.log", "category"):
            "a ModuleNotFoundError inside the model's remote code, its lines run together in one paste "
            "(trust_remote_code_required by the thread)",
        ("105-minicpmv45-modelconfig-json-expecting-value.log", "category"):
            "pydantic's ModelConfig error around a JSON decode error: read as a refused config; the thread: a "
            "broken or missing config file of the model (model_not_found_or_auth)",
        ("211-omni-npu-qwen3-tts-base-weight-on-cpu-request.log", "category"):
            "a device-placement error worded like an unsupported device; the thread found no cause that fits a "
            "category (unknown)",
        ("211-omni-npu-qwen3-tts-base-weight-on-cpu-request.log", "phase"):
            "no frame of a request's path the rules read: init (serving by the thread)",
        ("213-ascend-310p-triton-bishengir-no-target-profile-run.log", "category"):
            "the Ascend Triton compiler (bishengir) finding no target for the 310P: no words the rules read "
            "(unsupported_dtype_or_gpu by the thread)",
    },
    "vllm-failures-blind15": {
        ("005-gemma-lora-unsupported.log", "category"):
            "'Model GemmaForCausalLM does not support LoRA': the model class's refusal (model_not_supported); the "
            "collector, from the error text: --enable-lora refused (config_rejected)",
        ("005-gemma-lora-unsupported.log", "phase"):
            "a model-class refusal read at start-up (init); the collector: as the model loads",
        ("013-qwen25vl-seqcls-no-vllm-impl.log", "phase"):
            "'has no vLLM implementation' read as the architecture's check at start-up (init); the collector: as the "
            "model loads",
        ("014-phi3-small-blocksparse-chunked-prefill.log", "category"):
            "a bare assert in the block-sparse attention backend ('Does not support prefix-enabled attention'): no "
            "engine argument it names (config_rejected by the thread: chunked prefill on by default)",
        ("015-spec-decode-pp-drafter-missing.log", "phase"):
            "no frame of a request's path the rules read: init (serving by the thread)",
        ("108-oom-mtp-head-weights-rtx5090m-nvfp4.log", "category"):
            "an out-of-memory error whose step no frame or milestone in the excerpt shows: generic cuda_oom (the "
            "thread: the MTP head's weights)",
        ("108-oom-mtp-head-weights-rtx5090m-nvfp4.log", "phase"): _NO_PHASE,
        ("112-hip-oom-strix-halo-gtt-512mb-bios.log", "category"):
            "a HIP OOM whose figures the rules read as weights that do not fit (cuda_oom_weights); the collector kept "
            "the plain OOM (cuda_oom): the BIOS gave the iGPU 512 MB",
        ("201-ascend-310p-engine-kv-init-alloc-fail.log", "category"):
            "an OOM allocating the KV cache tensors is cuda_oom_after_kv by diagnose's categories; the collector kept "
            "the plain device OOM (cuda_oom) with the phase",
        ("204-ascend-aclgraph-capture-alloc-sq-cq-fail.log", "category"):
            "ACL's 'Failed to apply for memory' in graph capture read as an OOM there (cuda_oom_after_kv); the thread: a "
            "vllm-ascend bug since fixed (unknown)",
        ("210-tpu-gemma4-mm-accelerator-meminfo-jax-serving.log", "phase"):
            "a model's image path (_process_image_input) is the profiling run's as much as a request's: init",
    },
    "vllm-failures-blind16": {
        ("004-lora-modules-to-save-lm-head-unsupported.log", "phase"):
            "an adapter's modules are read at start (--lora-modules) or when a request names it: no frame says which "
            "(serving by the collector)",
        ("008-guidance-backend-llguidance-version-typeerror.log", "phase"):
            "a structured-output backend's TypeError with no frame of a request's path the rules read: init (serving "
            "by the thread)",
        ("014-ray-killed-rayworkervllm-host-oom.log", "phase"):
            "Ray's memory monitor killing a worker says nothing of the step (a worker's __init__ in the message; "
            "serving by the collector): phase unknown",
        ("015-raylet-workers-killed-memory-pressure-tp4.log", "phase"): _NO_PHASE,
        ("017-prefix-caching-baichuan2-t4-triton-shared-memory.log", "phase"): _NO_PHASE,
        ("020-qwen2-bnb-not-supported-v063.log", "phase"):
            "'does not support BitsAndBytes quantization' read as the model class's check at start (init); the "
            "thread: as the model loads",
        ("021-spec-decode-r1-distill-qwen-vocab-assert.log", "category"):
            "a bare AssertionError on the draft and target models' vocab sizes: no engine argument it names "
            "(config_rejected by the error text: a draft model that does not match)",
        ("021-spec-decode-r1-distill-qwen-vocab-assert.log", "phase"):
            "placed after the weights loaded (profile_run); the collector: as the models load",
        ("026-v1-ray-deepseekv3-16xh20-host-oom-worker-killed.log", "phase"): _NO_PHASE,
        ("107-qwen2-72b-w4a16-marlin-tp2-min-thread-k.log", "category"):
            "Marlin's tile refusal with no sign in the excerpt of more than one rank: the layer's (model_not_supported), "
            "as for one GPU since round 14; the collector, from the message's 'Consider reducing tensor_parallel_size': "
            "tp_not_divisible",
        ("108-agent-r1-rollout-oom-step54-activation.log", "category"):
            "an out-of-memory error in the model's forward with no frame or line of the rollout the rules read: "
            "generic cuda_oom (the thread: generating, cuda_oom_runtime)",
        ("108-agent-r1-rollout-oom-step54-activation.log", "phase"): _NO_PHASE,
        ("201-omni-npu-oom-diffusion-benchmark-rpc.log", "category"):
            "an NPU OOM in vllm-omni's worker RPC: that a benchmark was being served is only in the thread "
            "(cuda_oom_runtime)",
        ("201-omni-npu-oom-diffusion-benchmark-rpc.log", "phase"): _NO_PHASE,
        ("203-tpu-v7x-vmem-oom-rpa-precompile-qwen3vl.log", "category"):
            "XLA out of a kernel's vmem is a kernel's tiling limit, not the device's memory (round 8's thread: a "
            "kernel bug, unknown); this thread: precompilation out of memory (cuda_oom_after_kv)",
        ("203-tpu-v7x-vmem-oom-rpa-precompile-qwen3vl.log", "phase"):
            "no frame of tpu-inference's precompilation the rules read: init (graph_capture by the thread)",
        ("204-ascend-eagle3-long-prompt-vector-core-507035.log", "phase"):
            "no frame of a request's path the rules read: init (serving by the collector)",
        ("207-ascend-910a-swiglu-opp-kernel-unsupported-device.log", "category"):
            "the excerpt ends in the engine's frames before the operator's error; the thread: SwiGLU has no kernel "
            "for the 910A (unsupported_dtype_or_gpu)",
        ("216-gguf-plugin-deepseek-v4-unknown-gguf-model-type.log", "phase"):
            "'Unknown gguf model_type' read as the architecture's check at start (init); the thread: as the GGUF "
            "weights load",
    },
    # Round 17 was measured once with the rules after round 16 and the families (PROTOCOL.md: blind third 2/8); then
    # opened, and general rules written (an NPU's initialisation failing is the driver's, HCCL's EI codes a collective's,
    # a KeyError naming a tensor's suffix, a model class not in a registry). These stay:
    "vllm-failures-blind17": {
        ("003-vlm-pp-unsupported.log", "category"):
            "'Pipeline parallelism is only supported for the following architectures' read as the model class's limit "
            "(model_not_supported, as round 16's collector filed the same words); this collector: the layout asked "
            "for (config_rejected)",
        ("006-gemma3-awq-bf16-refused.log", "category"):
            "'torch.bfloat16 is not supported for quantization method awq' read as a dtype refused "
            "(unsupported_dtype_or_gpu, as earlier rounds' collectors filed it); this collector: the --dtype refused "
            "(config_rejected)",
        ("007-minicpmv45-modelconfig-json.log", "category"):
            "pydantic's ModelConfig refusing a config that is not JSON ('Expecting value') read as the configuration "
            "refused (config_rejected); round 14's collector filed the same words model_not_found_or_auth, this one "
            "unknown",
        ("009-specdec-ray-backend-refused.log", "category"):
            "the error is only inline code in the author's prose after the command line: prose is not read (as a code "
            "span in the middle of any line)",
        ("009-specdec-ray-backend-refused.log", "phase"): _NO_PHASE,
        ("205-ascend-qwen3-next-acl-stream-sync-507035.log", "phase"):
            "'Worker failed with error ... ACL stream synchronize failed' through collective_rpc: no frame of a "
            "request's path the rules read (serving by the thread)",
    },
    # Round 18 was measured once with the rules after round 17 (PROTOCOL.md: blind third 4/5); then opened, and one
    # general rule written (the engine-core process dying with no cause shown is lost_rank). These stay:
    "vllm-failures-blind18": {
        ("006-enginecore-died-end-of-pooling-script.log", "phase"):
            "one client line saying the engine-core process died; that the script had finished its requests is only "
            "in the author's sentence (serving by the collector)",
        ("201-ascend-serving-sampler-aclnnrmsnorm-inner-error.log", "phase"):
            "an NPU operator's inner error surfacing in vllm-ascend's top-k/top-p sampler: the sampler's warm-up runs "
            "those frames too, so they do not place it (serving by the thread)",
        ("202-ascend-dsv3-w8a8-quant-matmul-out-dtype-int32.log", "category"):
            "an NPU quantized matmul refusing its output dtype read as a dtype the accelerator lacks "
            "(unsupported_dtype_or_gpu); the collector: a bug in the plugin's quantization path (unknown)",
    },
    # Round 19 was measured once with the rules after round 18 (PROTOCOL.md: blind third 4/5); then opened, and two
    # general rules written (Ray's "required GPUs exceeds ... in the cluster" without its ValueError is the layout Ray
    # cannot place; a FlashAttention-3 kernel's CUDA error is the GPU's). These stay:
    "vllm-failures-blind19": {
        ("101-lighteval-vllm-v1-prompt-logprobs-none.log", "phase"):
            "a client library's TypeError reading the outputs vLLM returned; no engine frame or serving line places "
            "it (serving by the thread)",
        ("111-torch211-ci-rmsnormgated-activation-profile-run.log", "phase"):
            "'Worker failed with error ... has no attribute' through collective_rpc; the profiling frames are in "
            "another part of the post (profile_run by the thread)",
    },
    # Round 20 (131 logs) was measured once with the rules after round 19 (PROTOCOL.md: blind third 33/43); then opened,
    # and general rules written (sleep mode's cumem OOM on wake-up, Triton's fp8e4nv, CUTLASS kernels not compiled for
    # the GPU, torch's allocator OOM warning, HCCL's named error codes, Ray's dead-worker wordings, TP/PP by their
    # abbreviations). These stay, each a wording seen once, a conclusion only the thread holds, or a paste that cut
    # the error line:
    "vllm-failures-blind20": {
        ("004-mpt-30b-one-a10g-oom-loading.log", "category"):
            "read as cuda_oom; the collector, from the thread: cuda_oom_weights",
        ("004-mpt-30b-one-a10g-oom-loading.log", "phase"):
            "no frame, milestone or serving line the rules read places it; the collector, from the thread: model_loading",
        ("005-ray-worker-killed-host-oom-codellama34b-awq-2xa10.log", "phase"):
            "no frame, milestone or serving line the rules read places it; the collector, from the thread: model_loading",
        ("020-dsv32-b200-cutlass-mla-backend-invalid-pr.log", "category"):
            "read as config_rejected; the collector, from the thread: unknown",
        ("023-llama70b-4xa100-40g-ray-worker-died-loading.log", "phase"):
            "placed in init by what the log shows; the collector, from the error text: model_loading",
        ("037-awq-capability-70-qwen15-32b-v040-title.log", "phase"):
            "placed in init by what the log shows; the collector, from the error text: model_loading",
        ("038-awq-capability-75-needs-80-llama2-7b-v020.log", "phase"):
            "placed in init by what the log shows; the collector, from the error text: model_loading",
        ("043-t4-triton-shared-memory-nemotron-4b-first-request.log", "phase"):
            "no frame, milestone or serving line the rules read places it; the collector, from the error text: serving",
        ("044-triton-shared-memory-w8a8-block-fp8-v0-startup.log", "phase"):
            "no frame, milestone or serving line the rules read places it; the collector, from the error text: profile_run",
        ("045-illegal-memory-access-v1-serving-chat-stream.log", "phase"):
            "no frame, milestone or serving line the rules read places it; the collector, from the error text: serving",
        ("049-spec-decode-not-supported-v1-quoted.log", "category"):
            "read as unknown; the collector, from the error text: config_rejected",
        ("049-spec-decode-not-supported-v1-quoted.log", "phase"):
            "no frame, milestone or serving line the rules read places it; the collector, from the error text: init",
        ("050-pr-v1-flashattn-fp8-kv-cache-rejected.log", "category"):
            "read as unknown; the collector, from the thread: config_rejected",
        ("050-pr-v1-flashattn-fp8-kv-cache-rejected.log", "phase"):
            "placed in init by what the log shows; the collector, from the thread: model_loading",
        ("055-qwen35-fp8-gb10-cutlass-error-internal-profile-run.log", "category"):
            "read as unknown; the collector, from the error text: unsupported_dtype_or_gpu",
        ("055-qwen35-fp8-gb10-cutlass-error-internal-profile-run.log", "phase"):
            "no frame, milestone or serving line the rules read places it; the collector, from the error text: profile_run",
        ("056-awq-marlin-min-thread-k-deepseek-v2-lite-tp1.log", "category"):
            "read as model_not_supported; the collector, from the error text: tp_not_divisible",
        ("057-awq-moe-size-k-block-size-k-tp8-first-request.log", "category"):
            "read as unknown; the collector, from the error text: tp_not_divisible",
        ("057-awq-moe-size-k-block-size-k-tp8-first-request.log", "phase"):
            "no frame, milestone or serving line the rules read places it; the collector, from the error text: serving",
        ("059-prequant-bnb-tp-load-weights-cut.log", "category"):
            "read as unknown; the collector, from the error text: config_rejected",
        ("060-nvfp4-no-compressed-tensors-scheme-v1.log", "category"):
            "read as model_not_supported; the collector, from the error text: unsupported_dtype_or_gpu",
        ("063-awq-checkpoint-no-weights-without-quantization-flag.log", "category"):
            "read as model_not_found_or_auth; the collector, from the thread: config_rejected",
        ("068-mamba-cache-blocks-below-max-num-seqs-h100.log", "phase"):
            "placed in graph_capture by what the log shows; the collector, from the thread: kv_cache_allocation",
        ("105-open-r1-grpo-nccl-watchdog-broadcast-timeout.log", "category"):
            "read as unknown; the collector, from the error text: nccl_error",
        ("107-ray-serve-example-list-no-max-model-len.log", "phase"):
            "placed in init by what the log shows; the collector, from the thread: serving",
        ("109-minicpmo-audio-unpack-valueerror-serving.log", "phase"):
            "placed in init by what the log shows; the collector, from the error text: serving",
        ("111-open-instruct-qlora-merged-keyerror-down-proj.log", "category"):
            "read as model_not_supported; the collector, from the thread: unknown",
        ("117-intel-b70-qwen36-fp8-level-zero-out-of-resources.log", "phase"):
            "no frame, milestone or serving line the rules read places it; the collector, from the error text: profile_run",
        ("118-ipex-llm-a770-qwen2-7b-xpu-oom-low-bit-linear.log", "category"):
            "read as cuda_oom; the collector, from the thread: cuda_oom_runtime",
        ("118-ipex-llm-a770-qwen2-7b-xpu-oom-low-bit-linear.log", "phase"):
            "no frame, milestone or serving line the rules read places it; the collector, from the thread: serving",
        ("205-ascend-qwen3vl-aclgraph-insufficient-streams-capture.log", "phase"):
            "no frame, milestone or serving line the rules read places it; the collector, from the error text: graph_capture",
        ("216-ascend-quantized-vision-layers-engine-dead-serving.log", "category"):
            "read as unknown; the collector, from the thread: unsupported_dtype_or_gpu",
        ("217-ascend-faq-topk-topp-sort-kernel-aivec-error-serving.log", "phase"):
            "no frame, milestone or serving line the rules read places it; the collector, from the error text: serving",
        ("220-ascend-deepseek-v4-pro-mtp-aicpu-kernel-param-invalid.log", "phase"):
            "no frame, milestone or serving line the rules read places it; the collector, from the thread: serving",
        ("221-ascend-glm53-flash-topkv2-vec-param-invalid-under-load.log", "phase"):
            "no frame, milestone or serving line the rules read places it; the collector, from the thread: serving",
        ("225-ascend-qwen3-235b-rl-full-graph-allreduce-notify-timeout.log", "phase"):
            "no frame, milestone or serving line the rules read places it; the collector, from the thread: graph_capture",
        ("228-ascend-300i-duo-w8a8-quant-matmul-platform-transpose-unsupported.log", "category"):
            "read as unknown; the collector, from the error text: unsupported_dtype_or_gpu",
        ("228-ascend-300i-duo-w8a8-quant-matmul-platform-transpose-unsupported.log", "phase"):
            "placed in init by what the log shows; the collector, from the error text: profile_run",
        ("229-ascend-qwen36-35b-causal-conv1d-tiling-failed-serving.log", "phase"):
            "placed in init by what the log shows; the collector, from the error text: serving",
        ("234-ascend-grpo-server-mode-hccl-transport-init-ei0009.log", "phase"):
            "placed in init by what the log shows; the collector, from the error text: serving",
        ("236-ascend-310p-qwen3-4b-start-dma-error-el0004.log", "category"):
            "read as cuda_oom; the collector, from the error text: unknown",
        ("240-ascend-moe-gating-topk-expert-count-128-only-256.log", "category"):
            "read as unknown; the collector, from the error text: model_not_supported",
        ("240-ascend-moe-gating-topk-expert-count-128-only-256.log", "phase"):
            "no frame, milestone or serving line the rules read places it; the collector, from the error text: profile_run",
    },
}


def _path(folder: str, name: str):
    return FIXTURES / folder / name


def _meta(folder: str, name: str) -> dict:
    return yaml.safe_load(_path(folder, name.replace(".log", ".meta.yaml")).read_text())


def _case(folder: str, name: str, what: str = ""):
    reason = KNOWN_MISSES[folder].get((name, what))
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(folder, name, marks=marks, id=f"{folder}/{name}")


CASES = [(folder, name) for folder, names in LOGS.items() for name in names]


@pytest.mark.parametrize("folder", ROUNDS)
def test_the_set_and_its_thirds(folder):
    size = ROUNDS[folder]
    assert (len(LOGS[folder]), len(DEV[folder]), len(HELD[folder])) == (size, size - size // 3, size // 3)


@pytest.mark.parametrize(("folder", "name"), [_case(f, n, "category") for f, n in CASES])
def test_category(folder, name):
    assert _meta(folder, name)["category"] in CATEGORIES
    assert diagnose(_path(folder, name).read_bytes()).category == _meta(folder, name)["category"]


@pytest.mark.parametrize(
    ("folder", "name"), [_case(f, n, "phase") for f, n in CASES if _meta(f, n)["phase"] != "unknown"]
)
def test_phase(folder, name):
    assert _meta(folder, name)["phase"] in PHASES
    result = diagnose(_path(folder, name).read_bytes())
    assert result.phase == _meta(folder, name)["phase"]
    assert result.phase_confidence in ("high", "medium", "low") and result.phase_evidence


@pytest.mark.parametrize(("folder", "name"), [_case(f, n) for f, n in CASES])
def test_every_diagnosis_names_an_action_and_a_fix(folder, name):
    result = diagnose(_path(folder, name).read_bytes())
    assert result.action == ACTIONS[result.category]
    assert result.fix and result.summary and "\n" not in result.summary
    if result.phase == "unknown":
        assert result.phase_confidence == "none"


@pytest.mark.parametrize("folder", ROUNDS)
def test_known_misses_are_logs_of_the_set(folder):
    assert {name for name, _ in KNOWN_MISSES[folder]} <= set(LOGS[folder])


def test_the_bench_scores_the_remedy_apart_from_the_category():
    """make bench-diagnose-blindN's "action": a diagnosis with the thread's remedy (ladder, refuse, rollback) counts
    there even when its category is another; one that sends a config error up the degrade ladder does not."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_blind", REPO / "scripts" / "bench_diagnose_blind.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = [{"expected": "cuda_oom", "got": "cuda_oom_weights", "expected_phase": "unknown", "phase": None},
            {"expected": "config_rejected", "got": "cuda_oom", "expected_phase": "init", "phase": "init"},
            {"expected": "nccl_error", "got": "unknown", "expected_phase": "unknown", "phase": None}]
    assert bench.share(rows) == "category 0/3 = 0.0%; phase 1/1 = 100.0%; action 2/3 = 66.7%"


def test_bench_diagnose_reads_each_rounds_one_measurement_from_its_protocol():
    """make bench-diagnose prints the blind figures beside the in-sample ones: each round's as its PROTOCOL.md recorded
    the one measurement (round 1's table row "final, once", round 15's line "- blind third (13): ..."), and a round
    still being collected as not measured."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_diagnose", REPO / "scripts" / "bench_diagnose.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.recorded(str(FIXTURES / "vllm-failures-blind")) == (17, 20, 15, 18)
    assert bench.recorded(str(FIXTURES / "vllm-failures-blind5")) == (20, 23, 14, 19)
    assert bench.recorded(str(FIXTURES / "vllm-failures-blind15")) == (9, 13, 8, 9)
    figures = [bench.recorded(str(FIXTURES / folder)) for folder in list(ROUNDS)[:15]]
    assert sum(f[0] for f in figures) == 153 and sum(f[1] for f in figures) == 205  # rounds 1-15, docs/benchmarks.md


def test_bench_diagnose_reads_the_families_alone_and_puts_the_rules_back(capsys):
    """make bench-diagnose's last line: every rule off, what a wording no rule knows gets. A log a rule names (high
    confidence) falls to its family (low), and the rules are back after the line is printed."""
    import importlib.util

    import vllm_deploy.diagnose as module

    spec = importlib.util.spec_from_file_location("bench_diagnose", REPO / "scripts" / "bench_diagnose.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rules = module.RULES
    bench.print_families([str(FIXTURES / "vllm-failures-public")])
    line = capsys.readouterr().out
    assert module.RULES is rules and len(rules) > 100
    assert line.startswith("the families alone (every rule off), on those 51 logs: category ")
    fired, right = (int(x) for x in re.search(r"name a category on (\d+), right on (\d+)", line).groups())
    assert 0 < right <= fired < 51
    log = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert (diagnose(log).category, diagnose(log).confidence) == ("cuda_oom", "high")
