"""Diagnose why a vLLM server died, from its log (a unit's journal, a container log, a pasted excerpt).

diagnose(text) → Diagnosis: category, summary, figures, fix, and where the engine was when it failed
(phase), with the deploy's action for the category. The rules match vLLM's own error wordings (V0 and V1
engines; read from vLLM's source and from real logs in public issues: tests/fixtures/calibration/vllm-failures
and tests/fixtures/vllm-failures-public, scored by scripts/bench_diagnose.py), never file names.

1. The log is normalised: ANSI colours, journal / docker-compose / CI / log-viewer prefixes, vLLM's
   `INFO 11-18 18:07:28 [file.py:12]` header and `(EngineCore_DP0 pid=…)` tags are stripped.
   Hard-wrapped messages still match: patterns allow any whitespace, newlines included, between words.
2. The earliest *fatal* message wins (tier 2): tracebacks print the first exception before the
   wrappers ("Engine core initialization failed", "MQLLMEngine is already dead"), which match nothing.
   An NCCL error whose own detail names /dev/shm is a /dev/shm problem.
3. Without one, weaker evidence decides (tier 1: a traceback frame such as
   `_check_if_gpu_supports_dtype`, "No platform detected"), then the phase the log stopped in.
4. The phase comes from evidence, strongest first, and `phase_confidence` says which:
   high   — vLLM's message names it (sampler warm-up, the KV-cache check) or the error's traceback frames do
            (load_model, profile_run, KV-cache allocation, capture_model, _dummy_sampler_run, execute_model);
   medium — the last start-up milestone the log reached before the error (weights loaded, memory
            profiled, KV cache sized, CUDA graphs being captured, serving requests);
   low    — only a guess between neighbouring phases (after the KV cache was sized, after graph capture, after
            only the engine's config line or its distributed set-up: init), or a category's usual phase (an NCCL
            error, or NCCL's /dev/shm segment, with no frame or milestone: its communicators are set up at init; a
            watchdog timeout of a collective numbered past start-up's: serving); none — no evidence.
   A log cut inside a traceback before its error line takes its phase from those frames (medium); one that stops
   in CUDA graph capture, or without any error line in the profiling run, is read as that phase's OOM (low).
   An out-of-memory error is named by that phase: cuda_oom_weights (GPU init, weights, profiling run),
   cuda_oom_after_kv (KV-cache allocation, graph capture, sampler warm-up), cuda_oom_runtime (serving),
   and plain cuda_oom when the log does not say: the phase is never guessed.
"""

from __future__ import annotations

import math
import functools
import re
from dataclasses import asdict, dataclass, field

from vllm_deploy.ladder import action_for

CATEGORIES = (
    "kv_cache_too_small", "no_kv_memory", "free_memory_below_request", "cuda_oom_weights",
    "cuda_oom_after_kv", "cuda_oom_runtime", "cuda_oom", "tp_not_divisible", "max_len_over_model_limit",
    "driver_mismatch_or_no_driver", "nccl_error", "shm_too_small", "port_in_use",
    "model_not_found_or_auth", "trust_remote_code_required", "unsupported_dtype_or_gpu", "model_not_supported",
    "lost_rank", "config_rejected", "unknown",
)
# Where the engine was when it failed, in start-up order; "unknown" when the log does not say.
PHASES = ("init", "model_loading", "profile_run", "kv_cache_allocation", "graph_capture", "sampler_warmup",
          "serving", "unknown")


@dataclass
class Diagnosis:
    category: str
    summary: str
    figures: dict = field(default_factory=dict)
    fix: str = ""
    evidence: str | None = None      # the log line(s) the category was read from
    confidence: str = "high"         # high: vLLM's own error text; medium: frame/marker; low: inferred
    phase: str = "unknown"           # one of PHASES: where the engine was when it failed
    phase_confidence: str = "none"   # high: message or traceback frame; medium: milestones; low: a guess; none
    phase_evidence: str | None = None  # the frame, message or milestone line the phase was read from
    phase_reached: str = "none"      # the last start-up milestone the log shows before the error
    action: str = "rollback"         # what the deploy does: ladder / refuse / rollback (vllm_deploy.ladder)
    action_text: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


# --- normalisation -----------------------------------------------------------------------------
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_PREFIX_RES = [
    # journald short: "Nov 29 10:00:01 host python[123]: "; short-iso: "2024-11-29T10:00:01+0000 host unit[1]: "
    re.compile(r"^[A-Z][a-z]{2}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}\s+\S+\s+[^\s:]+?(?:\[\d+\])?:\s?"),
    re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[+-]\d{2}:?\d{2}|Z)?\s+\S+\s+[^\s:]+?\[\d+\]:\s?"),
    # docker compose: "vllm-1  | "
    re.compile(r"^[\w.-]+\s+\|\s?"),
    # docker --timestamps / CI: "2024-02-08T08:40:56.016480879Z ", "[2025-12-13T19:54:35Z] "
    # (one blank after it: the blanks past it are the line's own, a traceback's indentation)
    re.compile(r"^\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?[ \t]?(?:\|[ \t]?)?"),
    # fastchat/loguru style: "| ERROR | stderr | "
    re.compile(r"^\|?\s*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s*\|\s*[\w.]+\s*\|\s?"),
    # vLLM process tags: "(EngineCore_DP0 pid=79) ", "(VllmWorker rank=3 pid=1090) ", "(RayWorkerWrapper pid=1, ip=10.0.0.1) ",
    # a Ray Serve replica's "(ServeReplica:default:VLLMDeployment pid=1328933) "
    re.compile(r"^\s*\((?:[\w:.-]+(?:\s+\w+=\d+)*\s+)?pid=\d+(?:,\s*ip=[\w.:]+)?\)\s*"),
    # vLLM logger header: "ERROR 11-18 18:07:28 engine.py:366] ", "INFO 08-02 02:39:50 [__init__.py:248] "
    re.compile(r"^(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}(?:\.\d+)?\s+"
               r"(?:\[[^\]]*\]|[\w./-]+:\d+\])\s?"),
    # a custom vLLM formatter: "2024-12-19 21:40:35 ERROR 56542 [async_llm_engine.py:64] "
    re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d+\s+\[[\w./-]+:\d+\]\s?"),
    # CI and Kubernetes log viewers: "  | ", "│ "; torch's "[rank0]: " and C++ "[E ProcessGroupNCCL.cpp:475] "
    re.compile(r"^\s*[|│]\s?"),
    # a markdown quote ("> ") around a log pasted into an issue or a chat, and the backticks of a code span or fence
    # opening on the line ("`vllm: error: ...`", "```ValueError: ...")
    re.compile(r"^>[ \t]"),
    re.compile(r"^`{1,3}(?=[^`\s])"),
    re.compile(r"^\[rank\d+\]:\s?"),
    re.compile(r"^\[[EWI](?:\d{3,4}\s+[\d:.]+)?\s+[\w.]+:\d+\]\s?"),
]
# Colour codes whose escape byte was lost in a paste ("[36m(RayWorkerVllm pid=5) [0m"), a terminal's
# "^M" for a carriage return, and a log viewer's right frame ("   │").
_LOST_ESCAPE_RE = re.compile(r"\[\d{1,3}(?:;\d{1,3})*m")
# (and a code span's closing backticks)
_LINE_TAIL_RE = re.compile(r"(?:\^M)+$|(?<!\s)\s+│$|(?<=[^`\s])`{1,3}$")  # (?<!\s): one try per run of blanks


def normalise(text) -> str:
    """Log text with prefixes, colours and carriage returns removed, one log line per line."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    text = _ANSI_RE.sub("", str(text or "")).replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    text = _LOST_ESCAPE_RE.sub("", text)
    out = []
    for line in text.split("\n"):
        line = _LINE_TAIL_RE.sub("", line.rstrip())
        for _ in range(8):
            before = line
            for prefix in _PREFIX_RES:
                line = prefix.sub("", line, count=1)
            if line == before:
                break
        out.append(line.rstrip())
    return "\n".join(out)


# --- rules -------------------------------------------------------------------------------------
W = r"\s+"  # between words: any whitespace, so hard-wrapped and truncated lines still match


def _p(*words: str) -> str:
    return W.join(words)


@dataclass
class _Rule:
    category: str
    pattern: re.Pattern
    tier: int = 2
    kind: str = ""


def _rule(category: str, regex: str, tier: int = 2, kind: str = "") -> _Rule:
    return _Rule(category, re.compile(regex, re.I), tier, kind)


# The last start-up step of V1, after graph capture: a dummy batch through the sampler (or a pooling model's pooler)
_WARMING_UP = r"warming\s+up\s+(?:the\s+)?(?:sampler|pooler)"


# V0's count of KV-cache blocks on the device: "# GPU blocks: N" until 0.6.2, then the platform's device name
# (executor_base.py: "# %s blocks: %d, # CPU blocks: %d" % (current_platform.device_name, ...)): "# cuda blocks",
# "# CUDA blocks", "# rocm blocks", "# npu blocks" (Ascend); "# CPU blocks" is the swap space, not the cache.
_BLOCKS = r"(?:GPU|CUDA|ROCm|NPU|XPU|HPU|TPU|neuron)\s+blocks:"  # searched, so no anchor: a leading "#?\\s*" was quadratic on blank lines


# between the pieces of an exception raised with several string arguments, printed as a tuple ("for ', 'the")
_TUPLE_GAP = r"\s*(?:['\"],\s*['\"])?\s*"


RULES: list[_Rule] = [
    # KV cache smaller than one max-length request (V1, both "model's" and the older "models's").
    # Tails are optional so that an excerpt cut mid-line still classifies (figures then missing).
    _rule("kv_cache_too_small",
          r"To\s+serve\s+at\s+least\s+one\s+request\s+with\s+the\s+models?(?:'s|'|s's)?\s+max\s+seq\s+len\s*"
          r"\((?P<max_model_len>\d+)\)(?:,?\s*\(?(?P<kv_needed_gib>\d+(?:\.\d+)?)\s*GiB\s+KV\s+cache\s+is\s+needed"
          r"(?:,?\s+which\s+is\s+larger\s+than\s+the\s+available\s+KV\s+cache\s+memory\s*"
          r"\((?P<kv_available_gib>-?\d+(?:\.\d+)?)\s*GiB\)"
          r"(?:\.\s*Based\s+on\s+the\s+available\s+memory,?\s+the\s+estimated\s+maximum\s+model\s+length\s+is\s+"
          r"(?P<estimated_max_model_len>\d+))?)?)?", kind="v1"),
    _rule("kv_cache_too_small",
          r"The\s+model'?s\s+max\s+seq\s+len\s*\((?P<max_model_len>\d+)\)\s*is\s+larger\s+than\s+the\s+maximum\s+"
          r"number\s+of\s+tokens(?:\s+that\s+can\s+be\s+stored\s+in\s+KV\s+cache\s*\((?P<kv_tokens>\d+)\))?", kind="v0"),
    # A hybrid (Mamba) model's state cache holds fewer sequences than max_num_seqs asks for: each decode sequence needs
    # one Mamba block, checked before the CUDA graphs are captured ("ValueError: max_num_seqs (1024) exceeds available
    # Mamba cache blocks (856). ... so CUDA graph capture cannot proceed.")
    _rule("kv_cache_too_small", r"max_num_seqs\s*\((?P<max_num_seqs>\d+)\)\s*exceeds\s+available\s+Mamba\s+cache\s+blocks\s*"
                                r"\((?P<mamba_blocks>\d+)\)", kind="mamba"),
    _rule("no_kv_memory", _p("No", "available", "memory", "for", "the", "cache", "blocks")),
    _rule("no_kv_memory", _p("Cannot", "auto-fit", "max_model_len")),
    # V0 printed the block count before (or instead of) failing: "# GPU blocks: 0, # CPU blocks: 512" / "-1".
    _rule("no_kv_memory", _BLOCKS + r"\s*(?P<gpu_blocks>0|-\d+)\b|"
                          r"(?<!Overriding )num_gpu_blocks\s*=\s*(?P<num_gpu_blocks>0)\b|"
                          r"Insufficient\s+GPU\s+memory\s+for\s+KV\s+cache", kind="blocks"),
    _rule("no_kv_memory", r"Available\s+KV\s+cache\s+memory:\s*(?P<kv_available_gib>-[\d.]+)\s*GiB", tier=1),
    # another platform's plugin sizing its cache (vllm-metal's paged attention: "ValueError: Paged attention: not enough
    # Metal memory for KV cache. metal_limit=26.80GB, ... kv_budget=-12.05GB")
    _rule("no_kv_memory", r"not\s+enough\s+(?:[\w-]+\s+){0,2}memory\s+for\s+(?:the\s+)?KV\s+cache|\bkv_budget\s*=\s*-\d",
          kind="blocks"),
    _rule("free_memory_below_request",
          r"Free\s+memory\s+on\s+device(?:\s+[\w:]+)?\s*(?:\((?P<free_gib>\d+(?:\.\d+)?)\s*/\s*"
          r"(?P<total_gib>\d+(?:\.\d+)?)\s*GiB\)\s*)?on\s+startup\s+is\s+less\s+than\s+desired"  # (a line may be cut here)
          r"(?:\s+GPU\s+memory\s+utilization(?:\s*\((?P<gpu_memory_utilization>\d+(?:\.\d+)?),\s*"
          r"(?P<requested_gib>\d+(?:\.\d+)?)\s*GiB\))?)?"),
    _rule("free_memory_below_request",
          r"Error\s+in\s+memory\s+profiling\.?\s*Initial\s+free\s+memory\s+(?P<initial_free_gib>[\d.]+)"
          r"(?:\s*GiB)?,\s*current\s+free\s+memory\s+(?P<free_gib>[\d.]+)"),
    # OOM: specific wordings first (ties at one position go to the earlier rule).
    # V1's warm-up of the sampler, or of the pooler for a pooling model ("... pooler (task='embed') with N dummy
    # requests"; "NPU out of memory ..." on vllm-ascend)
    _rule("cuda_oom", r"(?:CUDA|NPU|XPU)\s+out\s+of\s+memory\s+occurred\s+when\s+" + _WARMING_UP
                      + r"(?:\s*\([^)\n]{0,60}\))?\s+with\s+(?P<dummy_requests>\d+)\s+dummy\s+requests", kind="sampler"),
    # sleep mode's allocator (vllm/device_allocator/cumem.py) mapping memory back as the engine wakes up: "CUDA Error:
    # out of memory at /workspace/csrc/cumem_allocator.cpp:62", alone or under wake_up's frames (blind4 111, blind20
    # 021, 022): an engine put to sleep had started and served; what woke it finds the memory taken meanwhile
    _rule("cuda_oom", r"CUDA\s+Error:\s*out\s+of\s+memory\s+at\s+\S*cumem_allocator\.cpp", kind="cumem"),
    _rule("cuda_oom", r"CUDA\s+out\s+of\s+memory\.\s*Tried\s+to\s+allocate\s+(?P<tried>[\d.]+)\s*(?P<tried_unit>[KMG]iB)"),
    # (Ray's own ray.exceptions.OutOfMemoryError is the node's host memory, not the GPU's; Ascend's ACL runtime says
    # "Failed to apply for memory." when the NPU's memory is exhausted, e.g. as its graph capture allocates)
    _rule("cuda_oom", r"CUDA\s+out\s+of\s+memory|CUDA\s+(?:driver\s+)?error:\s*out\s+of\s+memory|(?<!ray\.exceptions\.)OutOfMemoryError|(?:HIP|NPU|XPU)\s+out\s+of\s+memory|"
                      r"hipErrorOutOfMemory|CUDA_ERROR_OUT_OF_MEMORY|"
                      # torch's caching allocator's warning, one per rank, when an allocation fails (blind20 030:
                      # "CUDACachingAllocator.cpp:3933] memory allocation failed with OOM on device 3 while trying to
                      # allocate 26229080064 bytes (free: ...)")
                      r"memory\s+allocation\s+failed\s+with\s+OOM\s+on\s+device|"
                      # Intel GPUs' Unified Runtime (Level Zero) out of device memory, or of the resources an
                      # allocation needs: "level_zero backend failed with error: 40 (UR_RESULT_ERROR_OUT_OF_RESOURCES)"
                      # (blind20 117)
                      r"UR_RESULT_ERROR_OUT_OF_(?:DEVICE_MEMORY|RESOURCES)|"
                      r"cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED|\bout\s+of\s+memory\s+error\s+occurred|"
                      r"\[Error\]:\s*Failed\s+to\s+apply\s+for\s+memory|"
                      # Apple's Metal (vllm-metal, MLX): "[METAL] Command buffer execution failed: Insufficient Memory
                      # (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)"
                      r"kIOGPUCommandBufferCallbackErrorOutOfMemory|\[METAL\][^\n]{0,80}Insufficient\s+Memory|"
                      # XLA on a TPU: its HBM ("RESOURCE_EXHAUSTED: Error loading program: Attempting to reserve 1.04G
                      # at the bottom of memory", "Error allocating device buffer: Attempting to allocate 832.0K. That
                      # was not possible", "... Ran out of memory in memory space hbm") or the scalar memory a
                      # graph compiled for a long sequence needs (smem). Not a kernel's own vmem limit (a kernel's
                      # tiling, fixed in the kernel: no memory flag helps)
                      r"RESOURCE_EXHAUSTED:[^\n]{0,200}?(?:Attempting\s+to\s+(?:reserve|allocate)|Ran\s+out\s+of\s+memory\s+in\s+"
                      r"memory\s+space\s+(?:hbm|smem))"),
    # The rest of torch's OOM message when an excerpt lost its first line (CUDACachingAllocator.cpp): its detail
    # since torch 2.1 and before it; words no other message has.
    _rule("cuda_oom", r"GPU\s*\d+\s+has\s+a\s+total\s+capac(?:i)?ty\s+of\s+[\d.]+\s*[KMG]iB\s+of\s+which|"
                      r"of\s+the\s+allocated\s+memory\s+[\d.]+\s*[KMG]iB\s+is\s+allocated\s+by\s+PyTorch|"
                      r"[KMG]iB\s+reserved\s+in\s+total\s+by\s+PyTorch\)"),
    # V1's model runner wrapping an OOM as the weights load (gpu_model_runner.py load_model: "Failed to load model -
    # not enough GPU memory. Try lowering --gpu-memory-utilization to free memory for weights, ...")
    _rule("cuda_oom", r"Failed\s+to\s+load\s+model\s+-\s+not\s+enough\s+GPU\s+memory", kind="load_model"),
    _rule("tp_not_divisible",
          r"Total\s+number\s+of\s+(?:attention\s+)?heads\s*\((?P<num_heads>\d+)\)\s*must\s+be\s+divisible\s+by\s+"
          r"tensor\s+parallel\s+size\s*\((?P<tp_size>\d+)\)"),
    _rule("tp_not_divisible",
          r"Total\s+number\s+of\s+(?:key[-_ /]value|kv|KV)\s+heads\s*\((?P<num_kv_heads>\d+)\)\s*must\s+be\s+"
          r"divisible\s+by\s+tensor\s+parallel\s+size\s*\((?P<tp_size>\d+)\)"),
    _rule("tp_not_divisible", r"must\s+be\s+divisible\s+by\s+(?:ep_size|expert\s+parallel\s+size)\s*[=(]?\s*(?P<ep_size>\d+)"),
    # distributed/utils.py ensure_divisibility, called through divide() by the parallel layers (vocabulary embedding,
    # linear layers, attention heads) as the model's layers are built: model loading, not the config check
    _rule("tp_not_divisible", r"AssertionError:\s*(?P<divided>\d+)\s+is\s+not\s+divisible\s+by\s+(?P<tp_size>\d+)",
          kind="divide"),
    # a model's own assert on its heads, shown by the traceback as the failing line above a bare AssertionError
    # (models/chatglm.py "assert self.total_num_kv_heads % tp_size == 0"; the same in other model files)
    _rule("tp_not_divisible",
          r"assert\s+(?:self\.)?(?:total_)?num_(?P<assert_kv>kv_|key_value_)?heads\s*%\s*\w*(?:tp|tensor|world)\w*\s*==\s*0"
          r"\s*\n\s*AssertionError\b", kind="assert_heads"),
    _rule("tp_not_divisible",
          r"(?:tensor[_ ]parallel[_ ]size|world[_ ]size)[^\n]{0,60}?(?:greater|larger)\s+than[^\n]{0,60}?(?:GPUs|devices)|"
          # a rank asks CUDA for a device past the visible ones (CUDA's cudaErrorInvalidDevice; torch's lazy-init
          # assert), as when --tensor-parallel-size exceeds CUDA_VISIBLE_DEVICES
          r"CUDA\s+error:\s*invalid\s+device\s+ordinal|device\s*>=\s*0\s*&&\s*device\s*<\s*num_gpus",
          kind="too_few_gpus"),
    # JAX on a TPU: a tensor's dimension does not split over the mesh's model axis (the TP size): "ValueError: One of
    # device_put args was given the sharding of NamedSharding(mesh=Mesh('data': 1, 'model': 8, ...), ...), which
    # implies that the global size of its dimension 0 should be divisible by 8, but it is equal to 4"
    _rule("tp_not_divisible", r"device_put\s+args\s+was\s+given\s+the\s+sharding[^\n]{0,600}?should\s+be\s+divisible\s+by\s+"
                              r"(?P<tp_size>\d+)", kind="jax_sharding"),
    # A quantized layer's slice per rank is not a whole number of its quantization groups (vLLM's AWQ, GPTQ and
    # bitsandbytes create_weights: "ValueError: The input size is not aligned with the quantized weight shape. This
    # can be caused by too large tensor parallel size."; "The output size is not aligned ..."), as the layers are built
    _rule("tp_not_divisible", r"(?:input|output)\s+size\s+is\s+not\s+aligned\s+with\s+the\s+quantized\s+weight\s+shape|"
                              # FP8 block quantization: a rank's slice is no whole number of blocks (fp8_utils.py
                              # validate_fp8_block_shape: "Weight input_size_per_partition = 192 is not divisible by
                              # weight quantization block_k = 128.")
                              r"(?:input|output)_size_per_partition\s*=\s*\d+\s+is\s+not\s+divisible\s+by\s+weight\s+"
                              r"quantization\s+block_[kn]\s*=\s*\d+",
          kind="quant_shape"),
    _rule("max_len_over_model_limit",
          r"User-specified\s+max_model_len\s*\((?P<max_model_len>\d+)\)\s*is\s+greater\s+than\s+the\s+derived\s+"
          r"max_model_len\s*\((?:[\w.]+\s*=\s*)?(?P<derived_max_model_len>[\d.]+)"),
    _rule("driver_mismatch_or_no_driver",
          r"Driver/library\s+version\s+mismatch|couldn'?t\s+communicate\s+with\s+the\s+NVIDIA\s+driver|"
          r"Found\s+no\s+NVIDIA\s+driver\s+on\s+your\s+system|"
          r"CUDA\s+driver\s+version\s+is\s+insufficient\s+for\s+CUDA\s+runtime\s+version|"
          r"NVIDIA\s+driver\s+on\s+your\s+system\s+is\s+too\s+old(?:\s*\(found\s+version\s+(?P<driver_cuda>\d+)\))?|"
          r"unsupported\s+display\s+driver\s*/\s*cuda\s+driver\s+combination|cudaErrorInsufficientDriver|"
          r"forward\s+compatibility\s+was\s+attempted\s+on\s+non\s+supported\s+HW|"
          r"No\s+CUDA\s+GPUs\s+are\s+available|libcuda\.so[.\d]*:\s*cannot\s+open\s+shared\s+object|"
          # Ascend's driver library, libcuda's counterpart (a container run without the host's driver mounted)
          r"libascend_hal\.so[.\d]*:\s*cannot\s+open\s+shared\s+object|"
          r"libnvidia-ml\.so[.\d]*:\s*cannot\s+open|NVML\s+Shared\s+Library\s+Not\s+Found|"
          r"Failed\s+to\s+initialize\s+NVML|Failed\s+to\s+infer\s+device\s+type|Device\s+string\s+must\s+not\s+be\s+empty|"
          r"the\s+provided\s+PTX\s+was\s+compiled\s+with\s+an\s+unsupported\s+toolchain|"
          r"CUDA\s+error:\s*(?:CUDA\s+driver\s+version\s+is\s+insufficient|no\s+CUDA-capable\s+device|"
          r"system\s+has\s+unsupported\s+display\s+driver)|RuntimeError:\s*CUDA\s+unknown\s+error|"
          # torch's and Docker's words for the same: no usable driver, no NVIDIA runtime, an image needing a newer
          # CUDA than the driver ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.9")
          r"CUDA\s+driver\s+initialization\s+failed|could\s+not\s+select\s+device\s+driver\s+\"[^\"\n]*\"\s+with\s+"
          r"capabilities:\s*\[\[gpu\]\]|nvidia-container-cli:\s*requirement\s+error:\s*unsatisfied\s+condition:\s*"
          r"cuda\s*>=\s*(?P<image_cuda>\d+\.\d+)"),
    # NVSwitch systems (HGX, DGX) whose fabric manager is not running: CUDA 802 / cudaErrorSystemNotReady
    _rule("driver_mismatch_or_no_driver", r"Error\s+802:\s*system\s+not\s+yet\s+initialized|cudaErrorSystemNotReady",
          kind="fabric"),
    # torch cannot count the GPUs at all (c10/cuda: "Unexpected error from cudaGetDeviceCount(). ... Error 804:
    # forward compatibility was attempted on non supported HW", 802 without a fabric manager, 803 a driver/runtime
    # mismatch): a driver the CUDA runtime cannot use, whichever code a long line still shows (the codes above win)
    _rule("driver_mismatch_or_no_driver", r"Unexpected\s+error\s+from\s+cudaGetDeviceCount\(\)", tier=1),
    # torch_npu failing to bring up the NPU itself, as the device is initialised (torch_npu's "Initialize:... NPU
    # function error: c10_npu::SetDevice", "SetPrecisionMode:... AclSetCompileopt(ACL_PRECISION_MODE...)", "GetDevice:...
    # aclrtGetCurrentContext"): the driver, firmware and CANN below it do not match, or are not mounted in the container
    _rule("driver_mismatch_or_no_driver",
          r"\b(?:Initialize|SetPrecisionMode|GetDevice|SetDevice|npu_init):[^\n]{0,160}?NPU\s+function\s+error:\s*"
          r"(?:c10_npu::SetDevice|at_npu::native::AclSetCompileopt|aclrtGetCurrentContext|aclrtSetDevice|aclInit)\b",
          kind="npu_init"),
    # the CUDA runtime library vLLM was built against is not on the node (a wheel for CUDA 12 beside a CUDA 11 stack:
    # "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory")
    _rule("driver_mismatch_or_no_driver", r"libcudart\.so(?:\.(?P<cuda_runtime>\d+))?[.\d]*:\s*cannot\s+open\s+shared\s+object",
          kind="cudart"),
    _rule("driver_mismatch_or_no_driver", r"No\s+platform\s+detected,?\s+vLLM\s+is\s+running\s+on\s+UnspecifiedPlatform",
          tier=1, kind="no_platform"),
    # vLLM 0.3-0.4's DeviceConfig when torch sees no CUDA device and no other platform (config.py: raise
    # RuntimeError("No supported device detected.")), as in a Ray actor scheduled without a GPU; later versions say
    # "Failed to infer device type" (above). Other programs print the same words: only vLLM's RuntimeError counts.
    _rule("driver_mismatch_or_no_driver", r"RuntimeError[:(]\s*['\"]?No\s+supported\s+device\s+detected",
          kind="no_platform"),
    # vLLM's triton_utils/importing.py at import: no Triton backend's driver is active (torch sees no CUDA device, e.g.
    # libcuda.so.1 missing in the container). A CPU or TPU build says the same: weak, and not on those platforms.
    _rule("driver_mismatch_or_no_driver", r"Triton\s+is\s+installed\s+but\s+0\s+active\s+driver", tier=1,
          kind="triton"),
    _rule("shm_too_small",
          r"Insufficient\s+space\s+in\s+/dev/shm(?::?\s*(?P<shm_required_mib>\d+)\s*MiB\s+required"
          r"(?:,\s*(?P<shm_free_mib>\d+)\s*MiB\s+free)?)?"),
    # NCCL's own shared-memory transport (its segments are /dev/shm/nccl-*), set up with the communicators (a log pasted
    # into a web page may show the path as a link: "[/dev/shm/nccl-EoOvZr](https://...)")
    _rule("shm_too_small",
          r"failed\s+to\s+extend\s+/dev/shm|creating\s+shared\s+memory\s+segment\s+\[?(?:/dev/shm|nccl-)|"
          r"posix_fallocate\s+failed\s*:\s*No\s+space\s+left", kind="nccl"),
    # Ray's object store (raylet, store_runner.cc) wants more /dev/shm than the container has, before any engine
    _rule("shm_too_small", r"System\s+memory\s+request\s+exceeds\s+memory\s+available\s+in\s+/dev/shm", kind="ray"),
    _rule("shm_too_small",
          r"No\s+space\s+left\s+on\s+device[^\n]{0,200}/dev/shm|/dev/shm[^\n]{0,200}No\s+space\s+left\s+on\s+device|"
          r"unable\s+to\s+(?:write\s+to\s+file|open\s+shared\s+memory\s+object)\s+</torch_[^>]*>|insufficient\s+shared\s+memory\s*\(shm\)|\bBus\s+error\b"),
    # A peer rank of a multi-node instance went away (Gloo's own words, seen on the CPU build when the
    # headless rank was killed: tests/fixtures/calibration/vllm-failures/37-*): before NCCL's rules.
    _rule("lost_rank", r"Connection\s+closed\s+by\s+peer\s+\[(?P<peer>[0-9A-Fa-f.:]+)\]:\d+"),
    _rule("lost_rank", r"Read\s+error\s+\[(?P<peer>[0-9A-Fa-f.:]+)\]:\d+:\s+Connection\s+reset\s+by\s+peer"),
    # a worker process of the engine died (V1's multiproc executor: "Worker proc VllmWorker-3 died unexpectedly,
    # shutting down executor."; Ray's "The actor died unexpectedly before finishing this task" for a RayWorker): a rank
    # is gone. Weak: the cause it died of, where the log shows one (an OOM, NCCL), wins.
    # V1's executor told a worker died, and the worker's own traceback cut by the kernel's SIGKILL ("Killed": the host's
    # OOM killer, a container limit): the rank is gone with no error of its own
    _rule("lost_rank", r"fatal\s+signal\s+from\s+worker\s+processes[\s\S]{0,3000}?(?m:^)\s*Killed\s*$", kind="killed"),
    # Ray's memory monitor killed a worker because the node's host memory ran low (ray.exceptions.OutOfMemoryError:
    # "Task was killed due to the node running low on memory. Memory on the node (IP: ...) where the task (actor ID:
    # ..., name=RayWorkerWrapper.__init__ ...) was running was 12.49GB / 13.15GB (0.95), which exceeds the memory usage
    # threshold"; the raylet: "2 Workers (tasks / actors) killed due to memory pressure (OOM)"): host RAM, not the GPU's
    _rule("lost_rank", r"Task\s+was\s+killed\s+due\s+to\s+the\s+node\s+running\s+low\s+on\s+memory|"
                       r"Memory\s+on\s+the\s+node\s+\(IP:[^)\n]{0,200}\)\s+where\s+the\s+task\s+\(actor\s+ID|"
                       r"Workers?\s+\(tasks\s*/\s*actors\)\s+killed\s+due\s+to\s+memory\s+pressure", kind="host_oom"),
    _rule("lost_rank", r"Worker\s+proc\s+\S+\s+died\s+unexpectedly|The\s+actor\s+died\s+unexpectedly\s+before\s+finishing|"
                       r"The\s+actor\s+is\s+dead\s+because\s+its\s+worker\s+process\s+has\s+died|"
                       # Ray's raylet on a worker gone without a word (killed by the host's OOM killer, a segfault):
                       # "A worker died or was killed while executing a task by an unexpected system error", "Worker
                       # unexpectedly exits with a connection error code 2" (blind20 005, 023)
                       r"A\s+worker\s+died\s+or\s+was\s+killed\s+while\s+executing\s+a\s+task|"
                       r"Worker\s+unexpectedly\s+exits\s+with\s+a\s+connection\s+error", tier=1, kind="worker"),
    # the API server's client saw the engine-core process itself die (V1: "Engine core proc EngineCore_DP0 died
    # unexpectedly, shutting down client."): the engine is gone with no error of its own in the log (blind18 006).
    # Weak, as the worker's: a cause the log shows wins
    _rule("lost_rank", r"Engine\s+core\s+proc\s+\S+\s+died\s+unexpectedly(?!,\s*killed\s+by\s+signal)", tier=1, kind="engine_core"),
    _rule("nccl_error",
          r"NCCL\s+error|ncclInternalError|ncclUnhandledCudaError|ncclSystemError|ncclInvalidUsage|ncclRemoteError|"
          r"ncclInvalidArgument|DistBackendError|Watchdog\s+caught\s+collective\s+operation\s+timeout|"
          r"NCCL\s+communicator\s+was\s+aborted|ProcessGroupNCCL[^\n]{0,120}(?:timed?\s*out|Timeout)|"
          # torch's watchdog taking the process down after a failed or hung collective (ProcessGroupNCCL.cpp)
          r"Some\s+NCCL\s+operations\s+have\s+failed\s+or\s+timed\s+out|"
          # its heartbeat monitor, when the watchdog thread itself hangs in a NCCL/CUDA call (torch 2.2+: "Heartbeat
          # monitor timed out! Process will be terminated after dumping debug info.", "ProcessGroupNCCL's watchdog got
          # stuck for 600 seconds without making progress in monitoring enqueued collectives.")
          r"Heartbeat\s+monitor\s+timed\s+out!?\s+Process\s+will\s+be\s+terminated|"
          r"ProcessGroupNCCL's\s+watchdog\s+got\s+stuck\s+for\s+\d+\s+seconds|"
          # Intel XPU's collective library, NCCL's counterpart there ("RuntimeError: oneCCL: ze_fd_manager.cpp:214 ...")
          r"\boneCCL:\s*\w+\.cpp:\d+|"
          # Kunlun XPU's collective library (XCCL, BKCL before it) refusing to build a communicator
          r"\[(?:XCCL|BKCL)\]\[[\w.]+:\d+\][^\n]{0,200}?\bfailed\b|/new_xccl/\w+\.hpp"),
    # vLLM's pynccl cannot load libnccl (device_communicators/pynccl_wrapper.py, every version's wording)
    _rule("nccl_error", r"Failed\s+to\s+load\s+NCCL\s+library\s+from", kind="library"),
    # NCCL's and vLLM's own CUDA-IPC failures between GPUs (P2P, custom all-reduce)
    # (CUDA's own cudaErrorPeerAccessUnsupported through torch: "CUDA error: peer access is not supported between these
    # two devices", as vLLM's custom all-reduce opens the other GPUs' buffers)
    _rule("nccl_error", r"Cuda\s+failure\s+'?peer\s+access\s+is\s+not\s+supported|custom_all_reduce\.cuh:\d+\s+'[^'\n]+'|"
                        r"CUDA\s+error:\s*peer\s+access\s+is\s+not\s+supported\s+between\s+these\s+two\s+devices"),
    # The process group cannot be formed: the ranks do not reach each other (Gloo's and torch's rendezvous words,
    # e.g. across Ray nodes on an unroutable interface); filed with NCCL's as multi-GPU communication failures.
    # (DistNetworkError: the one message naming it, a line may be cut; not when its own line says the TCPStore's
    # port is taken: "The server socket has failed to listen on any local network address. ... EADDRINUSE", port_in_use)
    _rule("nccl_error", r"Gloo\s+connectFullMesh\b|DistNetworkError(?![^\n]*(?:EADDRINUS|address\s+already\s+in\s+use|code:\s*-98\b))|"
                        r"client\s+socket\s+has\s+timed\s+out\s+after\s+\d+\w*\s+while\s+trying\s+to\s+connect|"
          # torch's TCPStore, where the ranks meet to exchange NCCL's id: its server gave up on the others ("Timed
          # out after 601 seconds waiting for clients. 1/4 clients joined.", TCPStore.cpp) or a wait for a key did
          r"DistStoreError|Timed\s+out\s+after\s+\d+\s+seconds\s+waiting\s+for\s+clients",
          kind="connect"),
    # Ascend's collective library (HCCL) through torch_npu, vLLM-Ascend's communicators: "OPS function error:
    # HcclAllreduce, error code is 6", "HCCL function error: HcclGetRootInfo(&hcclID), error code is 7", its own error
    # codes ("ERR02200 DIST call hccl api failed") and a peer rank that never sent ("Getting socket times out. Reason:
    # Remote Rank did not send the data in time"). Filed with NCCL's as multi-device communication failures.
    # (torch_npu's own code for a distributed call, "ERR02200 DIST", names it when a stored copy cuts "hccl api failed")
    _rule("nccl_error", r"OPS\s+function\s+error:\s*Hccl\w+|HCCL\s+function\s+error|call\s+hccl\s+api\s+failed|"
                        r"\bERR022\d\d\s+DIST\b|"
                        r"Remote\s+Rank\s+did\s+not\s+send\s+the\s+data\s+in\s+time|"
                        # HCCL's own error codes (CANN's EI class: "EI0002 ... The wait execution of the Notify
                        # register times out", "EI0006 Getting socket times out", "EI0007 Failed to allocate
                        # resource[qp] ... Transport init error"), below whichever torch_npu call surfaced them
                        r"\bEI\d{4}:\s*\[PID:|Transport\s+init\s+error\.?\s+Reason:|"
                        # the same codes as CANN's error names give them ("Get_Socket_Timeout(EI0006): Getting socket
                        # times out."), and an operator's own HCCL call failing ("Nnopbase fails to invoke the
                        # HcclAllocComResourceByTiling function of the hccl module") (blind20 209, 213)
                        r"\b[A-Z]\w*\(EI\d{4}\):|fails\s+to\s+invoke\s+the\s+Hccl\w+\s+function\s+of\s+the\s+hccl\s+module"),
    _rule("nccl_error", r"NCCL\s+WARN", tier=1),
    # NCCL refusing to be captured in a CUDA graph (an NCCL built for CUDA < 11.3 or a driver < R465), as the graphs
    # are captured: "NCCL WARN NCCL cannot be captured in a graph if either it wasn't built with CUDA runtime >= 11.3
    # or if the installed CUDA driver < R465."
    _rule("nccl_error", r"NCCL\s+cannot\s+be\s+captured\s+in\s+a\s+graph", kind="graph"),
    # rdma-core's mlx5 provider: an InfiniBand work request failed (NCCL's IB transport between GPUs or nodes)
    _rule("nccl_error", r"mlx5:\s*[\w.-]+:\s*got\s+completion\s+with\s+error", kind="ib"),
    _rule("port_in_use",
          r"\[Errno\s+98\][^\n]*|Address\s+already\s+in\s+use[^\n]*|EADDRINUSE[^\n]*|"
          r"error\s+while\s+attempting\s+to\s+bind\s+on\s+address[^\n]*"),
    # HCCL's own words (Ascend, EJ0003), below the collective's "HCCL function error": "Failed to bind the IP port.
    # Reason: The IP address and port have been bound already." then "host nic listen start failed, port[60000]"
    _rule("port_in_use", r"Failed\s+to\s+bind\s+the\s+IP\s+port\.?\s+Reason:\s+The\s+IP\s+address\s+and\s+port\s+have"
                         r"\s+been\s+bound\s+already[^\n]*(?:(?:\n[^\n]*){0,2}?\n[^\n]*?listen\s+start\s+failed,\s+"
                         r"port\[\d+\])?", kind="hccl"),
    # torch's TCPStore could not listen on its port, the errno cut off or elsewhere (c10d socket.cpp); usually the
    # port is taken (a race for a free port between processes): weak, a stronger reading elsewhere wins
    _rule("port_in_use", r"The\s+server\s+socket\s+has\s+failed\s+to\s+listen\s+on\s+any\s+local\s+network\s+address\.?"
                         r"\s+port:\s*(?P<port>\d+)", tier=1),
    _rule("model_not_found_or_auth",
          r"is\s+not\s+a\s+local\s+folder\s+and\s+is\s+not\s+a\s+valid\s+model\s+identifier|Repository\s+Not\s+Found|"
          # (transformers' OSError as a long line cuts it: "<id> is not a local fold"; the Hub's 404 for the repo's files)
          r"\bOSError:\s*\S+\s+is\s+not\s+a\s+local\s+fold|404\s+Client\s+Error:\s*Not\s+Found\s+for\s+url:\s*"
          r"https?://(?:huggingface\.co|hf-mirror\.com)/|"
          r"RepositoryNotFoundError|EntryNotFoundError|GatedRepoError|Cannot\s+access\s+gated\s+repo|You\s+are\s+trying\s+to\s+access\s+a\s+gated\s+repo|"
          r"Access\s+to\s+model\s+\S+\s+is\s+restricted|\b40[13]\s+Client\s+Error|Invalid\s+user\s+token|"
          r"Invalid\s+repository\s+ID\s+or\s+local\s+directory|LocalEntryNotFoundError|HFValidationError|"
          r"RevisionNotFoundError|does\s+not\s+appear\s+to\s+have\s+a\s+file\s+named\s+[\w.-]+\.json|"
          r"No\s+such\s+file\s+or\s+directory:\s*'[^'\n]*config\.json'|"
          # vLLM's get_config finds neither config.json nor params.json (transformers_utils/config.py: 0.6-0.7 "No
          # supported config format found in <model>", 0.7.3+ "Could not detect config format for no config file found")
          r"No\s+supported\s+config\s+format\s+found\s+in|Could\s+not\s+detect\s+config\s+format\s+for\s+no\s+config\s+file|"
          r"We\s+couldn'?t\s+connect\s+to\s+'https://huggingface\.co'|"
          # requests' own words when the Hub cannot be reached (no network, a proxy): the model cannot be fetched
          # (inside a repr the quotes come escaped: host=\'huggingface.co\')
          r"HTTPSConnectionPool\(host=\\?'(?:huggingface\.co|hf-mirror\.com|[\w.-]*\.hf\.co)\\?',\s*port=\d+\):\s*Max\s+retries|"
          r"Cannot\s+find\s+the\s+requested\s+files\s+in\s+the\s+(?:local\s+|disk\s+)?cache|"
          r"Can'?t\s+load\s+the\s+(?:configuration|config|tokenizer)\s+(?:of|for)\s+'|"
          r"Cannot\s+find\s+an\s+appropriate\s+cached\s+snapshot\s+folder|"
          r"OfflineModeIsEnabled|Cannot\s+reach\s+https://huggingface\.co\S*:\s+offline\s+mode\s+is\s+enabled|"
          r"Repo\s+model\s+\S+\s+is\s+gated|"
          # httpx's wording of the Hub's refusal (huggingface_hub 1.x, and tools that download through httpx):
          # "Client error '403 Forbidden' for url 'https://huggingface.co/...'" (the URL may be on the next line)
          r"Client\s+error\s+'40[13][^'\n]*'\s+for\s+url\s+'?https?://huggingface\.co"),
    # huggingface_hub's CacheNotFound: the cache the hub was told to read from (HF_HOME, HF_HUB_CACHE, cache_dir) is not
    # there ("Cache directory not found: /data/.cache/huggingface. Please use `cache_dir` argument or set
    # `HF_HUB_CACHE` environment variable.")
    _rule("model_not_found_or_auth", r"Cache\s+directory\s+not\s+found:\s*\S+\.\s*Please\s+use\s+`?cache_dir",
          kind="hub_cache"),
    # the model loader lists the weight files (DefaultModelLoader._prepare_weights) as it loads the model: a directory or
    # repository with a config but no weights in a format it reads (.safetensors, .bin, .pt)
    _rule("model_not_found_or_auth", r"Cannot\s+find\s+any\s+model\s+weights", kind="no_weights"),
    # ModelScope's hub (VLLM_USE_MODELSCOPE=True): "modelscope.hub.errors.NotExistError: The model: Qwen/X has no
    # revision: main !", at whichever step first fetches a file of the model (its config at start-up, a multimodal
    # processor in the profiling run)
    _rule("model_not_found_or_auth", r"The\s+model:\s*(?P<config>\S+)\s+has\s+no\s+revision:\s*(?P<argument>[\w./-]+)|"
                                     r"modelscope\.hub\.errors\.NotExistError", kind="modelscope"),
    # the Run:ai model streamer (--load-format runai_streamer) cannot read a weight file from its path or bucket
    _rule("model_not_found_or_auth", r"Could\s+not\s+send\s+runai_request\s+to\s+libstreamer\s+due\s+to:\s*b?['\"]?"
                                     r"File\s+access\s+error", kind="streamer"),
    # a LoRA adapter's path or name with no adapter in it (lora/worker_manager.py _load_adapter)
    _rule("model_not_found_or_auth", r"No\s+adapter\s+found\s+for", kind="lora"),
    _rule("model_not_supported",
          r"Model\s+architectures?\s+\[[^\]]*\]\s+(?:are|is)\s+not\s+supported|"
          r"Error\s+in\s+inspecting\s+model\s+architecture|"
          # transformers' AutoConfig (backticks in its source; quoted or bare where a log was retyped)
          r"model\s+type\s+[`'\"]?(?P<model_type>[\w.-]+)[`'\"]?\s+but\s+Transformers\s+does\s+not\s+recognize\b|"
          # (a stored copy may cut the line before or inside "this architecture")
          r"Tokenizer\s+class\s+\S+\s+does\s+not\s+exist\s+or\s+is\s+not\s+currently\s+imported|"
          r"Unrecognized\s+configuration\s+class|"
          # vLLM's registry could not import the model's class (its subprocess error is logged above)
          r"Model\s+architectures?\s+\[[^\]]*\]\s+failed\s+to\s+be\s+inspected|"
          # no vLLM model and the Transformers fallback cannot run it (model_loader/utils.py)
          r"has\s+no\s+vLLM\s+implementation\s+and\s+the\s+Transformers\s+implementation\s+is\s+not\s+compatible|"
          # the registry's Transformers fallback finds no class either, or one vLLM cannot run
          # (model_executor/models/registry.py, _try_resolve_transformers)
          r"Cannot\s+find\s+model\s+module\.?\s+'?\w+'?\s+is\s+not\s+a\s+registered\s+model|"
          r"The\s+Transformers\s+implementation\s+of\s+'?\w+'?\s+is\s+not\s+compatible\s+with\s+vLLM"),
    # a model class that runs only some generations of its family's checkpoints (models/minicpmv.py MiniCPMV.__new__:
    # "Currently, MiniCPMV only supports versions 2.0, 2.5, 2.6, 4.0. Got version: (4, 5)"), raised as the model is built
    _rule("model_not_supported", r"ValueError:\s*Currently,?\s+(?P<model_type>\w+)\s+only\s+supports\s+versions?\s+\d",
          kind="version"),
    # a compressed-tensors checkpoint whose quantization scheme this vLLM has no kernels for (compressed_tensors.py
    # _get_scheme: "No compressed-tensors compatible scheme was found."), e.g. asymmetric W4A16 before vLLM added it
    _rule("model_not_supported", r"No\s+compressed-tensors\s+compatible\s+scheme\s+was\s+found|"
                                 # the same for a MoE layer's experts (compressed_tensors_moe.py get_moe_method)
                                 r"Unsupported\s+FusedMoe\s+scheme", kind="quant_scheme"),
    # ModelConfig finds no `architectures` in the model's config.json, so no model class to pick (pydantic's wrapper
    # "validation error for ModelConfig" is weak: this, strong, wins): a directory that is no complete checkpoint, or a
    # plugin's model served by plain vLLM
    _rule("model_not_supported", r"No\s+model\s+architectures\s+are\s+specified", kind="no_arch"),
    # a quantized layer whose shape the Marlin kernels cannot take (marlin_utils.py verify_marlin_supports_shape:
    # "Weight output_size_per_partition = 4304 is not divisible by min_thread_n = 64. Consider reducing
    # tensor_parallel_size or running with --quantization gptq."), e.g. a vision tower quantized with the text layers
    _rule("model_not_supported", r"Weight\s+(?P<dim>output|input)_size_per_partition\s*=\s*(?P<size>\d+)\s+is\s+not\s+"
                                 r"divisible\s+by\s+min_thread_[nk]\s*=\s*(?P<min_thread>\d+)", kind="kernel_shape"),
    # the checkpoint's weights and the class vLLM built for it do not match, as the weights load (models/utils.py
    # AutoWeightsLoader: "There is no module or parameter named 'embed_tokens' in Qwen3ForCausalLM"; the default
    # loader: "Following weights were not initialized from checkpoint: {'lm_head.weight'}"): a variant this vLLM
    # builds as another (an embedding checkpoint as the generative model), or a checkpoint saved with other names
    _rule("model_not_supported", r"There\s+is\s+no\s+module\s+or\s+parameter\s+named\s+'(?P<weight>[^'\n]{1,120})'\s+in\s+"
                                 r"(?P<model_class>\w+)|Following\s+weights\s+were\s+not\s+initialized\s+from\s+checkpoint",
          kind="weights"),
    # a table of kernels keyed by platform with no entry for this one (quantization/kernels/scaled_mm:
    # "_POSSIBLE_KERNELS[current_platform._enum]" -> "KeyError: <PlatformEnum.HPU: 4>"): no kernel for this accelerator
    _rule("unsupported_dtype_or_gpu", r"KeyError:\s*<PlatformEnum\.\w+", kind="platform_kernel"),
    # a bare KeyError naming a checkpoint tensor ('model.layers.3.mlp.gate.qweight', '...weight_scale_inv'), raised as
    # the loader looks it up among the model's parameters (params_dict[name]): this vLLM does not load the checkpoint's
    # variant (a quantization of a layer, an MoE or vision part it names otherwise). Nine of the sixteen such threads
    # the blind rounds drew concluded so (model_not_supported), seven that the checkpoint was saved with other names
    # (unknown). Weak: a stronger reading elsewhere in the log wins.
    _rule("model_not_supported", r"KeyError:\s*['\"](?P<weight>(?:[\w-]*\.)+\w*?(?:weight|bias|qweight|qzeros|scales?|g_idx|"
                                 r"zero_point|weight_packed|weight_shape)\w*)['\"]", tier=1, kind="weight_key"),
    # a model class looked up in a registry of the classes this build serves and not there (vllm-omni's "Model class X
    # not found in diffusion model registry"): the class is not supported, the model's files were found
    _rule("model_not_supported", r"\b(?:Model\s+class|architecture|model)\s+\S+\s+(?:is\s+)?not\s+found\s+in\s+(?:the\s+)?"
                                 r"(?:[\w-]+\s+){0,3}registry", kind="class_registry"),
    # the model's class cannot be split into pipeline stages (vLLM's list of PP-capable architectures)
    _rule("model_not_supported", r"Pipeline\s+parallelism\s+is\s+only\s+supported\s+for\s+the\s+following\s+architectures",
          kind="pp"),
    # transformers' GGUF reader (modeling_gguf_pytorch_utils.py) has no mapping for the file's architecture
    _rule("model_not_supported", r"ValueError:\s*(?:GGUF\s+model\s+with\s+)?[Aa]rchitecture\s+[`'\"]?(?P<model_type>[\w.-]+)"
                                 r"[`'\"]?\s+(?:is\s+)?not\s+supported"),
    # an architecture this vLLM dropped (registry.py, _raise_for_unsupported): an older vLLM runs it
    _rule("model_not_supported", r"Model\s+architecture\s+\w+\s+was\s+supported\s+in\s+vLLM\s+until\s+"
                                 r"v?(?P<last_version>\d+(?:\.\d+)*)", kind="dropped"),
    # a GGUF checkpoint this vLLM cannot read: its parameters not mapped onto the model's ("RuntimeError: Failed to map
    # GGUF parameters (356):"), or a .gguf file read as a config by a vLLM without GGUF support ("It looks like the
    # config file at '.../x.Q4_0.gguf' is not a valid JSON file.")
    _rule("model_not_supported", r"Failed\s+to\s+map\s+GGUF\s+parameters", kind="gguf_weights"),
    _rule("model_not_supported", r"config\s+file\s+at\s+'[^'\n]*\.gguf'\s+is\s+not\s+a\s+valid\s+JSON\s+file", kind="gguf"),
    # a LoRA adapter with a module this vLLM cannot load into (lora/utils.py parse_fine_tuned_lora_name:
    # "ValueError: base_model.model.lm_head.weight is unsupported LoRA weight")
    _rule("model_not_supported", r"is\s+unsupported\s+LoRA\s+weight", kind="lora_module"),
    # the model's config class lacks a field this vLLM reads from it (a model family newer than this vLLM, or a
    # multimodal config whose text fields sit in a sub-config: "AttributeError: 'Qwen2_5OmniConfig' object has no
    # attribute 'num_attention_heads'"). Medium: a bug can say the same
    _rule("model_not_supported", r"AttributeError:\s*'(?P<config>\w+Config)'\s+object\s+has\s+no\s+attribute\s+"
                                 r"'(?P<attribute>\w+)'", tier=1, kind="config_attr"),
    # a transformers too old for the model type: CONFIG_MAPPING[model_type] raises KeyError('<type>')
    _rule("model_not_supported",
          r"configuration_auto\.py\",?\s+line\s+\d+,\s+in\s+__getitem__[\s\S]{0,300}?KeyError:\s*'(?P<model_type>[\w.-]+)'"),
    _rule("trust_remote_code_required",
          r"contains\s+custom\s+code\s+which\s+must\s+be\s+executed|"
          r"(?:Please\s+pass|passing)\s+the\s+argument\s+[`'‘]?trust_remote_code=True|"
          # transformers names the auto class's file: configuration, modeling, tokenizer, feature extractor, image
          # processor, processor ("Loading X requires you to execute the ... file in that repo")
          r"requires\s+you\s+to\s+execute\s+the\s+[a-z\s]{1,40}?file\b|"
          r"requires\s+you\s+to\s+execute\s+(?:execute\s+)?some\s+code\s+in\s+that\s+repo|"
          # vLLM's own wrapper of the transformers error (transformers_utils/config.py)
          r"consider\s+setting\s+[`'‘]?trust_remote_code=True|"
          r"set\s+the\s+option\s+[`'‘]?trust_remote_code=True|"
          # the ValueError transformers raises there, its message cut (dynamic_module_utils.py)
          r"in\s+resolve_trust_remote_code\s[\s\S]{0,300}?\bValueError:"),
    _rule("unsupported_dtype_or_gpu",
          r"Bfloat16\s+is\s+only\s+supported\s+on\s+GPUs\s+with\s+compute\s+capability\s+of\s+at\s+least\s+8\.0"
          r"(?:\.\s*Your\s+(?P<gpu_name>[^\n]+?)\s+GPU\s+has\s+compute\s+capability\s+(?P<compute_capability>[\d.]+))?"),
    # A quantization method or scheme that needs a newer GPU: ModelConfig's check of the method ("The quantization
    # method awq is not supported for the current GPU. Minimum capability: 75. Current capability: 70.") and the
    # compressed-tensors / quark configs' check of a layer's scheme (_check_scheme_supported), raised with three
    # arguments and so printed as a tuple: "('Quantization scheme is not supported for ', 'the current GPU. Min
    # capability: 80. ', 'Current capability: 75.')"
    _rule("unsupported_dtype_or_gpu",
          r"(?:The\s+quantization\s+method\s+(?P<quantization>\S+)|Quantization\s+scheme)\s+is\s+not\s+supported\s+for"
          + _TUPLE_GAP + r"the\s+current\s+GPU\.?(?:" + _TUPLE_GAP + r"Min(?:imum)?\s+capability:\s*(?P<min_capability>\d+)\.?"
          + _TUPLE_GAP + r"Current\s+capability:\s*(?P<compute_capability>\d+))?"),
    # a kernel built only for newer GPUs, at its first call: vLLM's Marlin and AllSpark GEMMs (csrc, "marlin_gemm(..)
    # requires CUDA_ARCH >= 8.0"), torch's FP8 matmuls ("torch._scaled_mm is only supported on CUDA devices with
    # compute capability >= 9.0 or 8.9, or ROCm MI300+", "torch._scaled_grouped_mm ... = [9.0, 10.0]")
    _rule("unsupported_dtype_or_gpu",
          r"\w+\(\.\.\)\s+requires\s+CUDA_ARCH\s*>=\s*(?P<min_arch>\d+(?:\.\d+)?)|"
          r"is\s+only\s+supported\s+on\s+CUDA\s+devices\s+with\s+compute\s+capability\s*"
          r"(?:>=\s*[\d.]+\s+or\s+|=\s*\[?)(?P<min_arch2>\d+(?:\.\d+)?)", kind="arch"),  # (">= 9.0 or 8.9": the lower)
    # torchao's FP8 quantization of the weights as they load: "Float8 dynamic activation quantization is only supported
    # on CUDA>=8.9 and MI300+"
    _rule("unsupported_dtype_or_gpu", r"quantization\s+is\s+only\s+supported\s+on\s+CUDA\s*>=\s*(?P<min_arch>\d+\.\d+)",
          kind="torchao"),
    # Triton's compiler asserting an Ampere MMA layout on an older GPU (Allocation.cpp getCvtOrder), as it compiles a
    # kernel at its first launch (start-up's profiling run or a later request alike: no phase of its own)
    _rule("unsupported_dtype_or_gpu", r"Assertion\s+[`'][^\n]{0,300}?\bisAmpere\(\)", kind="triton_mma"),
    # Ascend's operator library has no kernel of an operator for this chip or dtype (CANN: "Cannot find binary for op
    # PromptFlashAttention", "call aclnnMoeGatingTopKSoftmax failed ... Check nnopExecutor != nullptr failed": the op's
    # executor was not built), or vllm-ascend does not know the chip ("Can not support soc_version: 104")
    _rule("unsupported_dtype_or_gpu",
          r"Cannot\s+find\s+bin(?:ary)?\s+(?:of|for)\s+op\s+(?P<op>\w+)|"
          r"call\s+aclnn(?P<op2>\w+)\s+failed[\s\S]{0,600}?Check\s+nnopExecutor\s*!=\s*nullptr\s+failed|"
          r"Can\s*not\s+support\s+soc_version:\s*(?P<soc_version>\w+)|"
          # an aclnn operator refusing a tensor's dtype ("AclNN_Parameter_Error(EZ1001): Bias dtype should be INT32,
          # actual dtype is DT_FLOAT16", "Tensor scale not implemented for DT_FLOAT16, should be in dtype support list")
          r"AclNN_Parameter_Error\(EZ1001\):\s*[^\n]{0,120}?(?:dtype|DT_[A-Z0-9]+)[^\n]{0,120}?(?:should\s+be|"
          r"not\s+implemented|not\s+support|support\s+list)|"
          r"AclNN_Parameter_Error\(EZ1001\):\s*\n?[^\n]{0,120}?\bnot\s+implemented\s+for\s+DT_[A-Z0-9]+", kind="ascend"),
    _rule("unsupported_dtype_or_gpu",
          r"FlashAttention\s+only\s+supports\s+Ampere\s+GPUs\s+or\s+newer|"

          r"no\s+kernel\s+image\s+is\s+available\s+for\s+execution\s+on\s+the\s+device|"
          r"sm_(?P<sm>\d+)\s+is\s+not\s+compatible\s+with\s+the\s+current\s+PyTorch\s+installation|"
          r"\b\w+\s+is\s+not\s+supported\s+for\s+quantization\s+method|"
          r"(?:dtype|data\s+type)\s+\S+\s+is\s+not\s+supported\s+(?:on|by|for)\s+(?:this|the\s+current)\s+(?:GPU|device|platform)"),
    # a GPU older than vLLM runs on at all (its platform check: "GPUs with compute capability below 7.0 are not
    # supported.") or than Triton compiles for, at the first compiled kernel ("Found Tesla P40 which is too old to be
    # supported by the triton GPU compiler ... CUDA Capability >= 7.0, but your device is of CUDA capability 6.1")
    _rule("unsupported_dtype_or_gpu",
          r"GPUs\s+with\s+compute\s+capability\s+(?:less\s+than|below)\s+(?P<min_gpu>\d+(?:\.\d+)?)\s+are\s+not\s+supported",
          kind="too_old"),
    _rule("unsupported_dtype_or_gpu",
          r"Found\s+(?P<gpu_name>[^\n]{1,60}?)\s+which\s+is\s+too\s+old\s+to\s+be\s+supported\s+by\s+the\s+triton\s+GPU\s+"
          r"compiler(?:[^\n]*?Capability\s*>=\s*(?P<min_gpu>\d+(?:\.\d+)?)[^\n]*?capability\s+(?P<compute_capability>\d+(?:\.\d+)?))?",
          kind="triton_old"),
    _rule("unsupported_dtype_or_gpu", r"_check_if_gpu_supports_dtype|check_if_supports_dtype", tier=1, kind="frame"),
    # a Triton kernel's block needs more shared memory than this GPU has (triton's OutOfResources), at its first
    # launch: "out of resource: shared memory, Required: 102400, Hardware limit: 101376"
    _rule("unsupported_dtype_or_gpu", r"out\s+of\s+resource:\s*shared\s+memory,\s*Required:\s*(?P<smem_required>\d+),?"
                                      r"\s*Hardware\s+limit:\s*(?P<smem_limit>\d+)", kind="smem"),
    # a kernel with no code for this GPU's architecture (HIP's and CUDA's hipErrorInvalidDeviceFunction /
    # cudaErrorInvalidDeviceFunction: "RuntimeError: HIP error: invalid device function", a wheel built for other gfx
    # or sm targets), and Ascend's operator package built for another SoC ("the socversion Ascend910B1 of bin package
    # does not match the current device socverison Ascend310P3")
    _rule("unsupported_dtype_or_gpu", r"(?:HIP|CUDA)\s+error:\s*invalid\s+device\s+function|"
                                      r"socver\w*\s+\S+\s+of\s+bin\s+package\s+does\s+not\s+match\s+the\s+current\s+device"),
    # a FlashAttention-3 kernel (the "hopper" sources: built for sm_90 only) failing at its launch on another GPU:
    # "CUDA error (/__w/xformers/xformers/third_party/flash-attention/hopper/flash_fwd_launch_template.h:188):
    # invalid argument", as xformers' or vLLM's bundled copy picks it for a vision encoder or the decoder
    _rule("unsupported_dtype_or_gpu", r"CUDA\s+error\s+\([^)\n]{0,300}flash[-_]attention/hopper/[^)\n]{0,200}\):\s*"
                                      r"[^\n]{1,100}", kind="fa3"),
    # Triton compiling an FP8 kernel (an FP8 checkpoint's block-scaled matmul, an FP8 MoE) for a GPU without FP8
    # (e4m3 needs compute capability 8.9): "ValueError("type fp8e4nv not supported in this architecture. The supported
    # fp8 dtypes are ('fp8e4b15', 'fp8e5')")", at the kernel's first launch (blind20 051, 053; blind10 109)
    _rule("unsupported_dtype_or_gpu", r"type\s+fp8e4nv\s+not\s+supported\s+in\s+this\s+architecture", kind="triton_fp8"),
    # one of vLLM's CUTLASS kernels not built for this GPU's capability, at its first call ("Error in calling custom op
    # cutlass_scaled_mm: No compiled cutlass_scaled_mm for a compute capability less than CUDA device capability: 75")
    _rule("unsupported_dtype_or_gpu", r"No\s+compiled\s+(?P<op>\w+)\s+for\s+a\s+compute\s+capability\s+less\s+than\s+CUDA\s+"
                                      r"device\s+capability:\s*(?P<compute_capability>\d+)", kind="cutlass"),
    # the attention-backend selector's reason when the GPU itself is the limit (platforms/cuda.py)
    _rule("unsupported_dtype_or_gpu", r"(?:is\s+not\s+valid\s+for\s+this\s+configuration|No\s+valid\s+attention\s+"
                                      r"backend\s+found)[^\n]{0,400}?compute\s+capability\s+not\s+supported"),
    # A combination of arguments one of vLLM's config classes refuses at start, in pydantic's words
    # ("1 validation error for SchedulerConfig / Value error, max_num_batched_tokens (4) must be greater
    # than or equal to max_num_seqs (8)."), or as a bare ValueError from the same check. Weak: a
    # category above that names the same refusal more precisely (max_len_over_model_limit) wins.
    _rule("config_rejected",
          r"validation\s+error\s+for\s+(?P<config>\w*Config)\s+(?:[\w.]+\s+)?Value\s+error,\s*(?P<message>[^\n\[]+)", tier=1),
    # an attention backend name this vLLM does not have (VLLM_ATTENTION_BACKEND or --attention-backend: "ValueError:
    # Unknown attention backend: 'ASCEND'. Valid options are: FLASH_ATTN, ...")
    _rule("config_rejected", r"(?P<message>Unknown\s+attention\s+backend:\s*'?[\w.-]+'?)\.?\s+Valid\s+options\s+are",
          kind="backend_name"),
    # more data-parallel ranks on a node than it has devices (multiproc_executor: "AssertionError: DP adjusted local
    # rank 3 is out of bounds for 1 devices.")
    _rule("config_rejected", r"(?P<message>local\s+rank\s+\d+\s+is\s+out\s+of\s+bounds\s+for\s+\d+\s+devices?)",
          kind="ranks"),
    # vLLM's argument parser (argparse: "vllm: error: unrecognized arguments: --temperature 0.8", "vllm serve: error:
    # argument --dtype: invalid choice: ...", "api_server.py: error: the following arguments are required: ...")
    _rule("config_rejected", r"(?m)^(?:vllm(?:\s+serve)?|api_server\.py|[\w.-]{1,40}\.py):\s+error:\s+(?P<message>"
                             r"(?:unrecognized\s+arguments|argument\s|the\s+following\s+arguments)[^\n]{0,300})",
          kind="argparse"),
    _rule("config_rejected",
          r"ValueError:\s*(?P<message>(?:max_num_batched_tokens|max_num_seqs|max_num_active_seqs)\s*\(\d+\)[^\n]+)", tier=1),
    # An engine argument the installed vLLM does not have (removed, renamed, or newer than it), passed by a caller
    # written for another version (OpenRLHF, LLaMA-Factory, verl...): EngineArgs is a dataclass, and LLM() passes its
    # **kwargs on to it, so Python itself refuses the keyword: "TypeError: EngineArgs.__init__() got an unexpected
    # keyword argument 'worker_use_ray'" (Python 3.10+ names the class; 3.8/3.9 print a bare "__init__()", placed by
    # the traceback's `EngineArgs(` line just above it). Other classes' refusals (a model's, transformers') are not this.
    _rule("config_rejected",
          r"\b(?P<config>(?:Async)?EngineArgs|(?:Async)?LLMEngine|AsyncLLM|LLM)\.__init__\(\)\s+got\s+an\s+"
          r"unexpected\s+keyword\s+argument\s+'(?P<argument>\w+)'|"
          r"\b(?P<config2>(?:Async)?EngineArgs)\([^\n]{0,200}\n(?:[^\n]{0,300}\n){0,3}?[ \t]*TypeError:\s*__init__\(\)\s+"
          r"got\s+an\s+unexpected\s+keyword\s+argument\s+'(?P<argument2>\w+)'", kind="kwarg"),
    # V1's attention-backend selector (platforms/cuda.py) refuses a forced backend, or finds none, for this model
    # and its flags: "Selected backend AttentionBackendEnum.FLASHINFER is not valid for this configuration.
    # Reason: ['kv_cache_dtype not supported']"; "No valid attention backend found for cuda with ... Reasons: {...}"
    _rule("config_rejected", r"Selected\s+backend\s+(?P<config>[\w.]+)\s+is\s+not\s+valid\s+for\s+this\s+"
                             r"configuration\.\s*Reason:\s*(?P<message>\[[^\]\n]{1,300}\])|"
                             r"No\s+valid\s+attention\s+backend\s+found", tier=1, kind="backend"),
    # Ray cannot place the parallel layout vLLM asks for (executor/ray_utils.py initialize_ray_cluster and
    # _verify_bundles, the Ray executors' _init_workers_ray): a placement group of the caller's own without enough
    # GPU bundles, a cluster whose GPUs Ray does not see or another placement group holds, a driver on a node without
    # a GPU of the group. The GPUs may well be there (the planner counted them): Ray's view is what refuses, so this
    # is no tensor-parallel size the heads do not divide. The words name the device ("GPU", "TPU", "NPU").
    _rule("config_rejected",
          r"ValueError:\s*The\s+number\s+of\s+required\s+\w+\s+exceeds\s+the\s+total\s+number\s+of\s+available\s+\w+\s+"
          r"in\s+the\s+(?:placement\s+group|cluster)|"  # (0.2-0.3: "... in the cluster", Ray's view of all nodes)
          r"Cannot\s+provide\s+a\s+placement\s+group\s+(?:of|requiring)|Ray\s+does\s+not\s+allocate\s+any\s+\w+\s+on\s+the\s+driver\s+node|"
          r"Current\s+node\s+has\s+no\s+\w+\s+available\.|driver\s+node\s+id\s+\w+\s+is\s+not\s+included\s+in\s+a\s+placement\s+group|"
          r"Placement\s+group\s+bundle\s+cannot\s+have\s+more\s+than\s+1\s+\w+|"
          # a bundle index past the placement group's bundles (a caller's group smaller than the layout)
          r"placement\s+group\s+bundle\s+index\s+\d+\s+is\s+invalid", kind="ray"),
    # the same words without the ValueError: newer vLLM logs them as a warning, then waits for the placement group;
    # and Ray's autoscaler, while the engine waits for its GPU workers (warnings: an error elsewhere wins)
    _rule("config_rejected",
          r"The\s+number\s+of\s+required\s+\w+\s+exceeds\s+the\s+total\s+number\s+of\s+available\s+\w+\s+in\s+the\s+"
          r"(?:placement\s+group|cluster)|The\s+following\s+resource\s+request\s+cannot\s+be\s+scheduled\s+right\s+now:\s*"
          r"\{[^}\n]{0,200}'GPU'|"
          # the autoscaler's words for the same bundle while the engine waits for its placement group
          r"No\s+available\s+node\s+types\s+can\s+fulfill\s+resource\s+request\s*\{[^}\n]{0,200}'GPU'", tier=1, kind="ray"),
    # A LoRA adapter of a higher rank than the engine was started for (LoRAConfig / the adapter's check: "ValueError: LoRA
    # rank 64 is greater than max_lora_rank 16.")
    _rule("config_rejected", r"(?P<message>LoRA\s+rank\s+(?P<lora_rank>\d+)\s+is\s+greater\s+than\s+max_lora_rank\s+"
                             r"(?P<max_lora_rank>\d+))", kind="lora_rank"),
    # no CUDA-graph sizes satisfy both speculative decoding's and sequence parallelism's multiples
    _rule("config_rejected", r"(?P<message>Can'?t\s+determine\s+cudagraph\s+shapes\s+that\s+are\s+both\s+a\s+multiple\s+of"
                             r"[^\n]{0,200})"),
    # The model's own rope_scaling in a shape this stack cannot read, as its config loads: an older transformers'
    # validation ("`rope_scaling` must be a dictionary with two fields, `type` and `factor`, got {... 'rope_type':
    # 'llama3'}": Llama 3.1 before transformers 4.43) or an older vLLM's assert on the config (config.py
    # _get_and_verify_max_len: `assert "factor" in rope_scaling`, Qwen2-VL's mrope before vLLM 0.6.2)
    _rule("model_not_supported", r"`?rope_scaling`?\s+must\s+be\s+a\s+dictionary\s+with\s+two\s+fields|"
                                 r"assert\s+[\"']factor[\"']\s+in\s+rope_scaling\s*\n\s*AssertionError", kind="rope_config"),
    # A rope_scaling type this vLLM's rotary-embedding factory does not know (--rope-scaling / hf_overrides, or a
    # config.json of a newer model): "ValueError: Unknown RoPE scaling type extended"
    _rule("config_rejected", r"(?P<message>Unknown\s+RoPE\s+scaling\s+type\s+[\"'`]?[\w.-]+)", kind="rope"),
    # A launcher started another number of processes than the parallel layout (parallel_state.py
    # initialize_model_parallel: "world_size (8) is not equal to tensor_model_parallel_size (1) x
    # pipeline_model_parallel_size (1)"), as when torchrun starts one process per GPU for an engine that spawns its own
    _rule("config_rejected",
          r"world_size\s*\((?P<world_size>\d+)\)\s*is\s+not\s+equal\s+to\s+tensor_model_parallel_size\s*"
          r"\((?P<tp_size>\d+)\)\s*x\s*pipeline_model_parallel_size\s*\((?P<pp_size>\d+)\)", kind="world_size"),
    # The checkpoint's (or --quantization's) method is not one this vLLM has (ModelConfig._verify_quantization, every
    # version: "Unknown quantization method: gptq. Must be one of ['awq', 'squeezellm']."; an empty name when the
    # checkpoint's quantization_config has no quant_method), or the two disagree ("Quantization method specified in
    # the model config (gptq) does not match the quantization method specified in the `quantization` argument (awq).")
    _rule("config_rejected",
          r"Unknown\s+quantization\s+method:\s*(?P<quantization>[\w-]*)\.?\s+Must\s+be\s+one\s+of|"
          r"Quantization\s+method\s+specified\s+in\s+the\s+model\s+config\s*\((?P<config>[\w.-]*)\)\s*does\s+not\s+match\s+"
          r"the\s+quantization\s+method\s+specified\s+in\s+the\s+`?quantization`?\s+argument", kind="quantization"),
]


def _now(util) -> str:
    """The " (now 0.9)" a fix adds after --gpu-memory-utilization, when the log named it."""
    return f" (now {_fmt(util)})" if util is not None else ""


def _fix_kv_cache_too_small(f: dict, where: str, kind: str) -> tuple[str, str]:
    """The KV cache holds less than one request at max_model_len: a shorter context, more memory or fp8 KV."""
    if kind == "mamba":
        n, blocks = f.get("max_num_seqs"), f.get("mamba_blocks")
        return (f"The model's Mamba state cache holds {blocks} sequences but max_num_seqs is {n}",
                f"Set --max-num-seqs {blocks} or lower (each decoding sequence needs one Mamba cache block), or raise "
                f"--gpu-memory-utilization{_now(f.get('gpu_memory_utilization'))} so the cache has more blocks.")
    util, mml = f.get("gpu_memory_utilization"), f.get("max_model_len")
    util_txt = _now(util)
    est = f.get("estimated_max_model_len") or f.get("kv_tokens")
    summary = f"KV cache too small for one request at max_model_len {mml}"
    if "kv_needed_gib" in f:
        summary += f": {_fmt(f['kv_needed_gib'])} GiB needed"
        if "kv_available_gib" in f:
            summary += f", {_fmt(f['kv_available_gib'])} GiB available"
    elif "kv_tokens" in f:
        summary += f": the cache holds only {f['kv_tokens']} tokens"
    fix = (f"set --max-model-len {est} or lower" if est else "lower --max-model-len")
    fix += f", or raise --gpu-memory-utilization{util_txt}"
    if "kv_needed_gib" in f and "kv_available_gib" in f and f.get("total_gib") and util is not None:
        need = math.ceil((float(util) + (f["kv_needed_gib"] - f["kv_available_gib"]) / f["total_gib"]) * 100) / 100
        fix += f" to about {need:.2f} if the GPU has that much free"
    fix += ", or use --kv-cache-dtype fp8 (half the KV bytes per token), or spread the model over more GPUs (-tp)."
    return summary, fix


def _fix_no_kv_memory(f: dict, where: str, kind: str) -> tuple[str, str]:
    """Weights and the profiling run left nothing for the KV cache."""
    util = f.get("gpu_memory_utilization")
    util_txt = _now(util)
    summary = "No memory left for the KV cache after weights and the profiling run"
    if f.get("weights_gib") is not None:
        summary += f" (weights take {_fmt(f['weights_gib'])} GiB)"
    fix = (f"Raise --gpu-memory-utilization{util_txt} (it is a share of TOTAL GPU memory, per instance), "
           "lower --max-num-batched-tokens / --max-num-seqs, or use a quantized model or more GPUs (-tp).")
    return summary, fix


def _fix_free_memory_below_request(f: dict, where: str, kind: str) -> tuple[str, str]:
    """Less GPU memory free at start than gpu_memory_utilization asks for: the share that fits."""
    util = f.get("gpu_memory_utilization")
    free, total = f.get("free_gib"), f.get("total_gib")
    if free is not None and total:
        summary = (f"Only {_fmt(free)} of {_fmt(total)} GiB free at startup, below the requested "
                   f"{_fmt(f.get('requested_gib', '?'))} GiB (gpu_memory_utilization {_fmt(util)})")
        suggestion = math.floor(free / total * 100) / 100
        if suggestion * total >= free:
            suggestion -= 0.01
        fix = (f"Set --gpu-memory-utilization {suggestion:.2f} or lower (free/total = {free / total:.3f}), "
               "or stop the other processes holding this GPU (nvidia-smi shows them; another vLLM instance "
               "on the same GPU counts too).")
    else:
        summary = "GPU memory changed under vLLM during startup (another process uses this GPU)"
        fix = "Give vLLM a GPU no other process uses, or lower --gpu-memory-utilization."
    return summary, fix


def _fix_cuda_oom_weights(f: dict, where: str, kind: str) -> tuple[str, str]:
    """Out of memory loading the weights or in the profiling run."""
    summary = f"CUDA out of memory during {where or 'model loading'}"
    if f.get("tried_to_allocate_gib") is not None:
        summary += f" (tried to allocate {_fmt(f['tried_to_allocate_gib'])} GiB)"
    if f.get("weights_share_gib") is not None:
        summary += (f"; the model's name says {_fmt(f['model_params_b'])}B parameters, about "
                    f"{_fmt(f['weights_share_gib'])} GiB of weights per GPU")
    if "profiling" in where:
        fix = ("The weights loaded but the profiling forward pass did not fit: lower --max-num-batched-tokens "
               "(and --max-model-len on V0), or use more GPUs (-tp) or a quantized model.")
    else:
        fix = ("The weights do not fit: use more GPUs (-tp N), a quantized checkpoint (AWQ/GPTQ/FP8), a smaller "
               "model or --cpu-offload-gb; check nothing else holds GPU memory.")
    return summary, fix


def _fix_cuda_oom_after_kv(f: dict, where: str, kind: str) -> tuple[str, str]:
    """Out of memory after the KV cache was sized (graph capture, sampler warm-up)."""
    util = f.get("gpu_memory_utilization")
    util_txt = _now(util)
    summary = f"CUDA out of memory after the KV cache was sized, during {where}"
    if f.get("dummy_requests"):
        summary += f" with {f['dummy_requests']} dummy requests"
    parts = []
    if "sampler" in where:
        seqs = f.get("dummy_requests") or f.get("max_num_seqs")
        parts.append(f"lower --max-num-seqs (the warm-up used {seqs} dummy requests; try {max(1, int(seqs) // 2)})" if seqs
                     else "lower --max-num-seqs")
    else:
        parts.append("add --enforce-eager (no CUDA graphs) or lower --max-num-seqs / the CUDA graph capture sizes")
    low = _lower_util(util)
    parts.append(f"lower --gpu-memory-utilization{util_txt}" + (f" to {low:.2f}" if low else "")
                 + " so the memory outside the budget (graphs, sampler buffers, CUDA context) fits")
    return summary, "; or ".join(parts) + "."


def _fix_cuda_oom_runtime(f: dict, where: str, kind: str) -> tuple[str, str]:
    """Out of memory while serving: headroom for activations."""
    util, mml = f.get("gpu_memory_utilization"), f.get("max_model_len")
    util_txt = _now(util)
    summary = "CUDA out of memory while serving requests"
    if f.get("tried_to_allocate_gib") is not None:
        summary += f" (tried to allocate {_fmt(f['tried_to_allocate_gib'])} GiB"
        summary += f", {_fmt(f['free_gib'])} GiB free of {_fmt(f['total_gib'])})" if f.get("free_gib") is not None else ")"
    low = _lower_util(util)
    fix = (f"Lower --gpu-memory-utilization{util_txt}" + (f" to {low:.2f}" if low else "")
           + " to leave headroom for activations, and/or lower --max-num-batched-tokens / --max-num-seqs"
           + (f" / --max-model-len (now {mml})" if mml else "")
           + "; if much memory is reserved but unallocated, set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.")
    return summary, fix


def _fix_tp_not_divisible(f: dict, where: str, kind: str) -> tuple[str, str]:
    """A parallel size the GPUs, heads or experts do not divide."""
    if kind == "jax_sharding":
        shards = f" {f['tp_size']}" if f.get("tp_size") else ""
        return (f"A tensor's dimension does not split over the TPU mesh's{shards} model shards (the tensor parallel size)",
                "Use a --tensor-parallel-size that divides the model's heads and KV heads (and the dimension the "
                "message names), or fewer TPU chips for this model.")
    if kind == "too_few_gpus":
        return ("Tensor/pipeline parallel size asks for more GPUs than the node has",
                "Set --tensor-parallel-size × --pipeline-parallel-size to at most the number of visible GPUs "
                "(check CUDA_VISIBLE_DEVICES / the container's device list); with Ray, `ray status` must show that "
                "many GPUs and the driver must run on a node with a GPU.")
    if kind == "marlin_shape":
        tp = f" {f['tp_size']}" if f.get("tp_size") else ""
        return (f"Tensor parallel size{tp} cuts a quantized layer's {f.get('dim', 'output')} size to {f.get('size')} per "
                f"GPU, no multiple of the Marlin kernel's tile ({f.get('min_thread')})",
                "Use a smaller --tensor-parallel-size (each GPU's slice must be a multiple of the tile), or "
                "--pipeline-parallel-size for the rest of the GPUs, or another kernel (--quantization awq / gptq "
                "instead of the *_marlin one).")
    if kind == "quant_shape":
        tp = f" {f['tp_size']}" if f.get("tp_size") else ""
        return (f"Tensor parallel size{tp} splits a quantized layer into slices that are not a whole number of its "
                "quantization groups",
                "Use a smaller --tensor-parallel-size (each rank's slice of every quantized layer must hold whole "
                "groups, e.g. group_size 128), or --pipeline-parallel-size instead, or a checkpoint quantized with a "
                "smaller group size (or unquantized).")
    if kind == "assert_heads":
        what, keys = (("KV heads", "num_key_value_heads / multi_query_group_num") if f.get("assert_kv")
                      else ("attention heads", "num_attention_heads"))
        return (f"Tensor parallel size does not divide the model's {what} (an assert in the model's code)",
                f"Use a --tensor-parallel-size that divides the model's {what} (config.json: {keys}), and "
                "--pipeline-parallel-size for the rest of the GPUs.")
    n = f.get("num_heads") or f.get("num_kv_heads") or f.get("divided")
    tp = f.get("tp_size")
    if f.get("ep_size") is not None:
        return (f"Experts cannot be split over expert-parallel size {f['ep_size']}",
                "Use a tensor/expert parallel size that divides the number of experts (powers of two usually), "
                "or drop --enable-expert-parallel.")
    what = "attention heads" if f.get("num_heads") else ("KV heads" if f.get("num_kv_heads") else "a model dimension")
    summary = f"Tensor parallel size {tp} does not divide {what} ({n})"
    if n:
        divisors = [d for d in range(1, min(int(n), 16) + 1) if int(n) % d == 0]
        fix = (f"Use a --tensor-parallel-size that divides {n}: {', '.join(map(str, divisors))}; or use "
               f"--pipeline-parallel-size {tp} instead (no head-divisibility constraint).")
    else:
        fix = "Use a --tensor-parallel-size that divides the attention heads, or pipeline parallelism."
    return summary, fix


def _fix_max_len_over_model_limit(f: dict, where: str, kind: str) -> tuple[str, str]:
    """max_model_len beyond the model's own context."""
    mml = f.get("max_model_len")
    derived = f.get("derived_max_model_len")
    d = int(derived) if derived is not None else None
    return (f"--max-model-len {mml} exceeds the model's own limit ({d})",
            f"Set --max-model-len {d} or lower; set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 only if the model really "
            "supports the longer context (rope scaling).")


def _fix_driver_mismatch_or_no_driver(f: dict, where: str, kind: str) -> tuple[str, str]:
    """No GPU visible, or a driver missing, mismatched or too old."""
    if kind == "fabric":
        return ("CUDA cannot start on this NVSwitch system: the fabric manager is not running (Error 802, system "
                "not yet initialized)",
                "Install and start nvidia-fabricmanager at exactly the driver's version (systemctl enable --now "
                "nvidia-fabricmanager), then check `nvidia-smi -q` shows the fabric state Completed.")
    if kind == "triton":
        return ("No CUDA driver is active for this process (Triton found none at vLLM's import): the driver "
                "library (libcuda.so.1) or the GPUs are not visible to it",
                "In a container: run it with the NVIDIA runtime and GPU access (docker run --gpus all; the NVIDIA "
                "container toolkit mounts libcuda.so.1), and do not override LD_LIBRARY_PATH past it; on the host "
                "check `nvidia-smi` and that python -c 'import torch; print(torch.cuda.is_available())' is True.")
    if kind == "npu_init":
        return ("torch_npu could not initialise the NPU (its ACL runtime failed as the device was set up): the "
                "Ascend driver, firmware and CANN toolkit do not match torch_npu, or the container lacks them",
                "Check `npu-smi info` on the host; run the vllm-ascend image built for the CANN the host's driver "
                "supports (the vllm-ascend release notes pair them) and mount the driver into the container "
                "(/usr/local/Ascend/driver, /dev/davinci*, /dev/davinci_manager, /dev/devmm_svm, /dev/hisi_hdc).")
    if kind == "cudart":
        so = f"libcudart.so.{f['cuda_runtime']}" if f.get("cuda_runtime") is not None else "libcudart.so"
        return (f"The CUDA runtime library vLLM was built for ({so}) is not installed on the node",
                "Install the vLLM and torch wheels built for the CUDA the node's driver supports (one pinned set, "
                "e.g. the +cu121 wheels), or the CUDA runtime the wheel needs (the nvidia-cuda-runtime-cu12 package, "
                "or the CUDA toolkit role at that major version); `nvidia-smi` shows the CUDA the driver supports.")
    if kind == "no_platform":
        summary = ("vLLM found no GPU platform (no CUDA device visible to the process: a container without GPUs, a "
                   "Ray actor scheduled without num_gpus, or no driver)")
    else:
        summary = "The NVIDIA driver is missing, not visible, or does not match (driver/library mismatch or too old)"
    if f.get("driver_cuda"):
        v = int(f["driver_cuda"])
        summary += f"; the driver supports CUDA up to {v // 1000}.{(v % 1000) // 10}"
    if f.get("image_cuda"):
        summary += f"; the image needs CUDA >= {_fmt(f['image_cuda'])}"
    return summary, ("In a container: run with GPU access (docker run --gpus all / Compose device reservation, "
                     "NVIDIA container toolkit installed and configured). On the host: check `nvidia-smi`; "
                     "after a driver upgrade reboot (driver/library mismatch); a driver too old for the "
                     "torch wheel's CUDA needs a newer driver branch or a torch build for an older CUDA "
                     "(vllm-deploy's compat gate checks this).")


def _fix_lost_rank(f: dict, where: str, kind: str) -> tuple[str, str]:
    """A peer rank of a multi-node instance went away, or a worker process of the engine died."""
    if kind == "killed":
        return ("A worker process of the engine (one tensor- or pipeline-parallel rank) was killed (SIGKILL), and the "
                "engine stops with it",
                "SIGKILL with no error of its own is almost always the host's OOM killer or the container's memory "
                "limit: read `dmesg` / `journalctl -k` for 'Out of memory: Killed process', then give the node or "
                "container more RAM (or load fewer weights into host memory at once), then restart the instance.")
    if kind == "host_oom":
        return ("Ray killed a worker process of the engine because the node's host memory (RAM, not the GPU's) ran low",
                "Give the node more RAM or load less into it at once (fewer engines or workers per node, no CPU "
                "offload or swap space, --load-format safetensors), or raise RAY_memory_usage_threshold if the limit "
                "is Ray's own; then restart the instance.")
    if kind == "engine_core":
        return ("The engine-core process died (the API server or LLM client saw it go), and the engine stops with it",
                "Find why it died in its own output above or the host's log (the kernel's OOM killer in `dmesg`, a "
                "segfault); in a script using LLM(), shut the engine down before the interpreter exits; then restart "
                "the instance (deploy.yml restarts and gates it).")
    if kind == "worker":
        return ("A worker process of the engine (one tensor- or pipeline-parallel rank) died, and the engine stops with it",
                "Find why it died in the lines above it or the host's log (the kernel's OOM killer in `dmesg`, a "
                "segfault, an NCCL error; with Ray, `ray logs` of that worker), fix that, then restart the instance "
                "(deploy.yml restarts and gates it).")
    peer = f" at {f['peer']}" if f.get("peer") else ""
    return (f"A peer rank of this multi-node instance went away (its connection{peer} closed); rank 0 stays up but "
            "every request hangs",
            "Bring the lost rank's host and unit back, then restart every rank of the instance, rank 0 last (the "
            "ranks meet only at start): vllm-deploy's rank watch on rank 0 does this, or run deploy.yml.")


def _fix_nccl_error(f: dict, where: str, kind: str) -> tuple[str, str]:
    """NCCL failed: peer-to-peer, custom all-reduce, a hang or a system call."""
    summary, first = {
        "p2p": ("NCCL (multi-GPU communication) failed: peer-to-peer access between the GPUs is not supported",
                "set NCCL_P2P_DISABLE=1 (consumer GPUs and some PCIe topologies have no P2P) and add "
                "--disable-custom-all-reduce"),
        "custom_allreduce": ("NCCL / vLLM's custom all-reduce failed ('invalid argument' on the CUDA IPC buffers)",
                             "add --disable-custom-all-reduce (tensor parallelism falls back to NCCL's all-reduce); "
                             "if NCCL itself fails, use an NCCL newer than 2.18 (the torch wheel's nvidia-nccl)"),
        "timeout": ("An NCCL collective hung until the watchdog timed it out",
                    "check every GPU of the group is healthy and not shared (nvidia-smi, dmesg Xid), set "
                    "NCCL_DEBUG=INFO to find the rank that stopped, and upgrade vLLM if the thread of your "
                    "version reports a hang"),
        "connect": ("The ranks could not connect to each other to form the process group (Gloo/NCCL rendezvous)",
                    "make every rank reach the others on one routable interface: set GLOO_SOCKET_IFNAME and "
                    "NCCL_SOCKET_IFNAME to it (and VLLM_HOST_IP per node), open the ports between the nodes "
                    "(firewall, security groups) and check each node resolves its own hostname to that address"),
        "library": ("vLLM could not load the NCCL library (libnccl) for its own communicator (pynccl)",
                    "install the NCCL the torch wheel pins (pip's nvidia-nccl-cu12, in the same venv) or point "
                    "VLLM_NCCL_SO_PATH at a working libnccl.so.2; a library for another CUDA or CPU architecture "
                    "fails the same way"),
        "ib": ("NCCL's InfiniBand transport failed: the mlx5 adapter reported a work completion error",
               "check the IB fabric and ports (ibstat, ibv_devinfo, the switch), NCCL_IB_HCA / NCCL_IB_GID_INDEX "
               "for RoCE, or set NCCL_IB_DISABLE=1 to fall back to sockets while the fabric is fixed"),
        "graph": ("NCCL cannot be captured in a CUDA graph: its build or the driver is too old for graph capture",
                  "install the NCCL the torch wheel pins (nvidia-nccl-cu12; an NCCL built for CUDA >= 11.3) and a "
                  "driver >= R465, or serve with --enforce-eager (no CUDA graphs)"),
        "system": ("NCCL failed in a system call (ncclSystemError / 'unhandled system error')",
                   "in a container this is most often /dev/shm: run it with --ipc=host or a large --shm-size "
                   "(Kubernetes: an emptyDir with medium: Memory on /dev/shm) and clear stale /dev/shm/nccl-* "
                   "files; rerun with NCCL_DEBUG=INFO to see which call failed"),
    }.get(kind, ("NCCL (multi-GPU communication) failed",
                 "rerun with NCCL_DEBUG=INFO to see the cause; give the container --ipc=host or a large shm_size"))
    return summary, (first + "; on consumer GPUs without P2P NCCL_P2P_DISABLE=1 and --disable-custom-all-reduce "
                     "help; check all GPUs are visible and healthy (nvidia-smi, dmesg Xid).")


def _fix_cuda_oom(f: dict, where: str, kind: str) -> tuple[str, str]:
    """Out of memory at a point the log does not show."""
    util = f.get("gpu_memory_utilization")
    util_txt = _now(util)
    summary = "CUDA out of memory; the log does not show where in start-up or serving it happened"
    if f.get("tried_to_allocate_gib") is not None:
        summary += f" (tried to allocate {_fmt(f['tried_to_allocate_gib'])} GiB)"
    low = _lower_util(util)
    return summary, (f"Lower --gpu-memory-utilization{util_txt}" + (f" to {low:.2f}" if low else "")
                     + " and --max-num-seqs / --max-num-batched-tokens, or add --enforce-eager; if the weights "
                     "alone do not fit, use more GPUs (-tp) or a quantized checkpoint. Collect the log from the "
                     "start of the unit to see the phase (journalctl -u UNIT -b).")


# model_not_supported's kinds whose words need no figure: (what, fix)
_MODEL_NOT_SUPPORTED_KINDS = {
    "class_registry": ("This build's registry has no implementation of the model's class (the model's files were "
                       "found; the class is not one this vLLM or its plugin serves)",
                       "Serve the model with a vLLM (or plugin: vllm-omni, vllm-ascend) release whose registry lists "
                       "the class named in the message, or a checkpoint whose architecture this build lists."),
    "gguf": ("This vLLM read a GGUF file as a Hugging Face config: it cannot load the model from GGUF",
             "Use a vLLM with GGUF support (0.5.5 on) and pass the .gguf file itself as --model with the original "
             "model's --tokenizer, or serve the model's Hugging Face checkpoint instead of the GGUF one."),
    "gguf_weights": ("This vLLM cannot map the GGUF file's tensors onto the model it built (an architecture its GGUF "
                     "loader does not know yet)",
                     "Upgrade vLLM (and any GGUF plugin) to a release whose GGUF loader lists the architecture, or serve "
                     "the model's Hugging Face checkpoint instead of the GGUF one."),
    "lora_module": ("A LoRA adapter holds a module this vLLM cannot load into (e.g. a trained lm_head or embeddings)",
                    "Re-train or re-export the adapter without modules_to_save (only the target projections), or "
                    "merge it into the base model and serve the merged model; a newer vLLM may take more of the "
                    "adapter's modules."),
    "config_attr": ("The model's config lacks a field this vLLM reads: this vLLM does not know the model's config layout",
                    "Upgrade vLLM (and the transformers it pins) to a release that lists the model family; a multimodal "
                    "family whose text settings sit in a sub-config needs the release that added it."),
    "rope_config": ("This vLLM / transformers cannot read the model's rope_scaling (a newer model's config.json)",
                    "Upgrade vLLM together with the transformers it pins to a release that knows this model's "
                    "rope_scaling (Llama 3.1's 'llama3' type, Qwen2-VL's mrope), or serve a model of the generations "
                    "this stack knows; no engine argument fixes the config."),
    "quant_scheme": ("This vLLM has no kernels for the checkpoint's compressed-tensors quantization scheme",
                     "Upgrade vLLM (newer releases add schemes, e.g. asymmetric W4A16), or re-export the checkpoint "
                     "with a scheme this vLLM serves (symmetric W4A16/W8A16, W8A8, FP8), or serve the unquantized "
                     "model."),
    "pp": ("This vLLM cannot split the model's architecture into pipeline stages",
           "Drop --pipeline-parallel-size (use tensor parallelism within a node, or more GPUs per node), or use a vLLM "
           "release whose pipeline-parallel list includes the architecture."),
    "no_arch": ("The model's config.json names no architecture, so vLLM has no model class to load it with",
                "Point --model at a complete checkpoint whose config.json lists `architectures`, or name the class "
                "with --hf-overrides '{\"architectures\": [\"...ForCausalLM\"]}'; a plugin's model (vllm-omni's TTS "
                "and omni models) needs the plugin's own server and stage config."),
}


def _fix_model_not_supported(f: dict, where: str, kind: str) -> tuple[str, str]:
    """An architecture this vLLM cannot load."""
    if kind in _MODEL_NOT_SUPPORTED_KINDS:
        return _MODEL_NOT_SUPPORTED_KINDS[kind]
    if kind == "version":
        mt = f" {f['model_type']}" if f.get("model_type") else ""
        return (f"This vLLM's{mt} model class does not support this generation of the model (its config's version)",
                "Upgrade vLLM to a release that lists the model's version (each generation of a family is added in "
                "its own release), or serve a generation this vLLM names in the message.")
    if kind == "kernel_shape":
        return (f"A quantized layer's {f.get('dim', 'output')} size per GPU ({f.get('size')}) is no multiple of the Marlin "
                f"kernel's tile ({f.get('min_thread')}): this vLLM cannot serve that layer quantized",
                "Leave the layers of that shape unquantized in the checkpoint (a vision tower or resampler: "
                "quantization_config modules_to_not_convert), or a --tensor-parallel-size whose split is a multiple of "
                "the tile, or another kernel (--quantization awq / gptq instead of the *_marlin one).")
    if kind == "weight_key":
        tensor = f" {f['weight']!r}" if f.get("weight") else ""
        return (f"The loader found no parameter for the checkpoint's tensor{tensor}",
                "This vLLM does not load this variant of the model (a quantized layer, an MoE or vision part it names "
                "otherwise): upgrade vLLM (support for a quantization of a model family often comes later than the "
                "family), or serve a checkpoint quantized as vLLM's list for the model says; a checkpoint converted or "
                "merged by a training tool may keep its own names: re-export it with Hugging Face's.")
    if kind == "weights":
        cls = f" ({f['model_class']})" if f.get("model_class") else ""
        return (f"The checkpoint's weights do not match the model class vLLM built for it{cls}",
                "For an embedding or reward checkpoint of a generative family, say so (--task embed / --runner "
                "pooling, or --hf-overrides with its architecture); else upgrade vLLM (its class for the variant may "
                "be newer), or re-export the checkpoint with Hugging Face's parameter names (a converted Megatron or "
                "merged checkpoint keeps its own).")
    if kind == "dropped":
        last = f" (the last was v{f['last_version']})" if f.get("last_version") else ""
        return ("This vLLM no longer supports the model's architecture",
                f"Run the model on an older vLLM that still supports it{last}, or move to a model vLLM supports now.")
    mt = f.get("model_type")
    return ((f"This vLLM/transformers cannot load model type '{mt}'" if mt else
             "This vLLM cannot load the model's architecture (not supported, or its model registry failed)"),
            "Upgrade vLLM together with the transformers it pins (a new architecture needs a newer release); "
            "if the architecture is in vLLM's supported list, the install is broken: the registry imports each "
            "model class in a subprocess, so reinstall vLLM and torch from one pinned set in a clean venv and "
            "read the subprocess error above. A tokenizer class transformers lacks can also be the "
            "repository's own code: then --trust-remote-code.")


def _fix_shm_too_small(f: dict, where: str, kind: str) -> tuple[str, str]:
    """/dev/shm too small for the workers."""
    req = f.get("shm_required_mib")
    summary = "Shared memory (/dev/shm) too small" + (f": {req} MiB required" if req else "")
    if f.get("shm_free_mib") is not None:
        summary += f", {f['shm_free_mib']} MiB free"
    return summary, ("Run the container with --ipc=host or --shm-size=2g or more (Compose: shm_size / ipc: host; "
                     "Kubernetes: an emptyDir with medium: Memory on /dev/shm); remove stale files in /dev/shm.")


def _fix_port_in_use(f: dict, where: str, kind: str) -> tuple[str, str]:
    """The listen port is taken."""
    port = f.get("port")
    if kind == "hccl":
        at = f" {port}" if port else ""
        return (f"HCCL's host listen port{at} is already bound: another process on this node holds it",
                (f"Find the holder with `ss -ltnp 'sport = :{port}'`; stop" if port else "Stop")
                + " the other engine or HCCL job on this node (often an earlier vLLM with the same parallel layout), "
                "or give each process its own HCCL ports; the engine's --port is not the one taken.")
    return (f"Port {port} is already in use" if port else "The listen port is already in use",
            (f"Find the owner with `ss -ltnp 'sport = :{port}'`" if port else "Find the owner with `ss -ltnp`")
            + "; stop the other server (often an older vLLM instance) or give this instance another --port.")


def _fix_model_not_found_or_auth(f: dict, where: str, kind: str) -> tuple[str, str]:
    """The model could not be found or downloaded."""
    if kind == "modelscope":
        model = f" {f['config']}" if f.get("config") else ""
        rev = f" '{f['argument']}'" if f.get("argument") else ""
        return (f"ModelScope has no revision{rev} of the model{model}",
                "Pass a revision the model has on ModelScope (--revision master, or the one its page lists), or fetch "
                "the model to a local path and serve that path; VLLM_USE_MODELSCOPE=False serves it from Hugging Face.")
    if kind == "streamer":
        return ("The Run:ai model streamer could not read the model's weight files (File access error)",
                "Check the --model path or object-store URI (s3://bucket/prefix with config.json and the "
                "safetensors) and the service's credentials and endpoint (AWS_* / RUNAI_STREAMER_* environment), "
                "or load from a local copy.")
    if kind == "lora":
        return ("A LoRA adapter could not be found where the request or --lora-modules points",
                "Point --lora-modules (or the load request's lora_path) at a directory holding adapter_config.json and "
                "the adapter's weights, readable by the service user.")
    return ("The model could not be found or downloaded (wrong name/path, gated repo or missing token)",
            "Check the --model name or local path (it must hold config.json); for gated models accept the licence "
            "on huggingface.co and provide HF_TOKEN (from the vault) to the service; with HF_HUB_OFFLINE=1 the "
            "model must already be in HF_HOME.")


def _fix_trust_remote_code_required(f: dict, where: str, kind: str) -> tuple[str, str]:
    """The model's repository ships its own code."""
    return ("The model repository ships custom code and needs trust_remote_code",
            "Add --trust-remote-code (only for repositories you trust; pin --revision), or use a model "
            "that transformers supports natively.")


def _fix_unsupported_dtype_or_gpu(f: dict, where: str, kind: str) -> tuple[str, str]:
    """A dtype or kernel this GPU does not support."""
    if kind == "smem":
        return (f"A Triton kernel needs {f.get('smem_required')} bytes of shared memory per block; this GPU has "
                f"{f.get('smem_limit')}",
                "Avoid that kernel on this GPU: --kv-cache-dtype auto (the fp8 KV kernels ask the most) or another "
                "--attention-backend, or a vLLM whose kernel configs cover this GPU (consumer Blackwell/Ada have "
                "~100 KiB per block).")
    if kind in ("too_old", "triton_old"):
        return _gpu_too_old(f)
    if kind == "triton_fp8":
        return ("Triton cannot compile an FP8 (e4m3) kernel for this GPU: FP8 needs compute capability 8.9 (Ada, "
                "Hopper) or newer",
                "On this GPU serve an unquantized or INT8/INT4 (AWQ, GPTQ) checkpoint instead of the FP8 one, and keep "
                "--kv-cache-dtype auto; or run the FP8 checkpoint on an Ada/Hopper or newer GPU.")
    if kind == "cutlass":
        return (f"vLLM's CUTLASS kernel {f.get('op') or ''} has no build for this GPU (compute capability "
                f"{_capability(f['compute_capability']) if f.get('compute_capability') else 'not shown'})",
                "Serve a checkpoint whose quantization has a kernel for this GPU (unquantized, or AWQ/GPTQ instead of "
                "W8A8 INT8/FP8 scaled matmuls), or a vLLM build whose kernels include this architecture "
                "(TORCH_CUDA_ARCH_LIST when building from source).")
    if kind == "fa3":
        return ("A FlashAttention-3 kernel (built for Hopper, sm_90) failed at its launch on this GPU",
                "Use an attention path built for this GPU: another --attention-backend (for a vision encoder, "
                "--mm-encoder-attn-backend or a vLLM whose ViT attention supports it), or a vLLM build whose kernels "
                "cover this architecture.")
    if kind == "platform_kernel":
        return ("This vLLM has no kernel for the quantization on this accelerator (its kernel table has no entry for "
                "the platform)",
                "Serve a checkpoint whose quantization this platform's vLLM plugin supports (its list of quantization "
                "methods), or upgrade the plugin, or serve the unquantized model.")
    if kind == "ascend":
        what = (f"This Ascend chip (SoC version {f['soc_version']}) is not one this vllm-ascend supports"
                if f.get("soc_version") else
                f"This Ascend chip has no kernel for the operator {f.get('op') or '(not named)'} in this CANN/vllm-ascend")
        return (what,
                "Serve on an Ascend series vllm-ascend supports for the model (Atlas A2/A3 for most MoE and bf16 "
                "kernels; the 300I/310P series needs float16 and fewer operators), or use a CANN and vllm-ascend "
                "release built for this chip.")
    if kind == "triton_mma":
        return ("Triton cannot compile a kernel for this GPU: it asserts an MMA layout only Ampere (compute capability "
                "8.0) and newer have",
                "Run on an Ampere or newer GPU, or avoid the Triton kernel on this one (another --attention-backend, "
                "no fp8/quantized path that compiles it, or a Triton/vLLM release that supports Volta/Turing there).")
    if f.get("min_capability") or f.get("min_arch"):
        return _needs_newer_gpu(f)
    cc = f.get("compute_capability")
    summary = "The GPU does not support the requested dtype/kernel" + (f" (compute capability {cc})" if cc else "")
    return summary, ("For bfloat16 on GPUs below compute capability 8.0 (V100, T4, 20xx) use --dtype half; "
                     "for an unsupported quantization pick one the GPU supports; 'no kernel image' means the "
                     "torch/vLLM build lacks this GPU's architecture (Blackwell needs a CUDA ≥12.8 build).")


def _capability(value) -> str:
    """A compute capability as NVIDIA writes it: vLLM's 80 and CUDA_ARCH's 800 are 8.0; torch's 8.9 stays."""
    v = float(value)
    return f"{v / 100:.1f}" if v >= 100 else (f"{v / 10:.1f}" if v >= 10 else f"{v:.1f}")


def _gpu_too_old(f: dict) -> tuple[str, str]:
    """A GPU older than vLLM (or the Triton compiler it uses) runs on at all."""
    need = _capability(f.get("min_gpu") or 7.0)
    gpu = f" ({f['gpu_name']}, compute capability {_capability(f['compute_capability'])})" \
        if f.get("gpu_name") and f.get("compute_capability") else ""
    return (f"This GPU{gpu} is older than vLLM runs on: compute capability {need}+ is needed",
            f"Serve on GPUs of compute capability {need} or newer (V100, T4 and later); in a node that mixes an older "
            "card with newer ones, pin the instance's gpus: to the newer ones (their indices in `vllm-deploy gpus`).")


def _needs_newer_gpu(f: dict) -> tuple[str, str]:
    """A quantization method, scheme or kernel that needs a newer GPU than this one."""
    need = _capability(f.get("min_capability") or f["min_arch"])
    has = f" (this GPU: {_capability(f['compute_capability'])})" if f.get("compute_capability") else ""
    return (f"The checkpoint's quantization needs a GPU of compute capability {need} or newer{has}",
            f"Serve it on a GPU of compute capability {need}+, or use a checkpoint (or --quantization) whose kernels "
            "this GPU has: e.g. GPTQ/AWQ rather than FP8 or a compressed-tensors scheme below Ampere, FP8 only on "
            "Ada/Hopper; the unquantized model if it fits.")


def _fix_config_rejected(f: dict, where: str, kind: str) -> tuple[str, str]:
    """vLLM refused the combination of flags at start."""
    where = f" ({f['config']})" if f.get("config") else ""
    if kind == "backend":
        return ((f"The attention backend {f['config']} refuses this model and its flags: {f.get('message', '')}"
                 if f.get("config") else "No attention backend of this vLLM accepts the model and its flags"),
                "Drop --attention-backend (or VLLM_ATTENTION_BACKEND) so vLLM picks one, or the flag the reason "
                "names (--kv-cache-dtype auto for 'kv_cache_dtype not supported'); a newer vLLM may add the support.")
    if kind == "kwarg":
        arg = f" '{f['argument']}'" if f.get("argument") else ""
        return (f"This vLLM does not accept the engine argument{arg} ({f.get('config', 'EngineArgs')}): its caller "
                "was written for another vLLM version",
                f"The caller (a framework such as OpenRLHF, verl or LLaMA-Factory, or the deploy's engine args) passes "
                f"an argument{arg} that this vLLM removed or renamed, or that came after it (e.g. worker_use_ray, "
                "removed in 0.7.0: distributed_executor_backend='ray'): pin vLLM to a version the caller supports, "
                "or upgrade the caller, or drop or rename the argument.")
    if kind == "ray":
        return ("Ray cannot place the engine's workers: its placement group, or the node the engine runs on, has "
                "fewer GPUs than the parallel layout asks for (tensor × pipeline parallel size)",
                "Check what Ray sees (`ray status`, `ray list nodes`): start vLLM on a node whose GPUs Ray has (the "
                "driver needs one; VLLM_HOST_IP must be the address Ray knows that node by), connect to the existing "
                "cluster (RAY_ADDRESS) rather than a new local Ray without the GPUs, and do not start it inside a "
                "placement group of your own unless that group has one bundle of one GPU per rank; no other placement "
                "group may hold the GPUs.")
    if kind == "backend_name":
        return (f"vLLM does not have the attention backend asked for: {f.get('message', '')}",
                "Unset VLLM_ATTENTION_BACKEND (or drop --attention-backend) so vLLM picks one, or name one of the "
                "options the message lists; an accelerator plugin's backend needs the plugin installed at the "
                "version that matches this vLLM.")
    if kind == "ranks":
        return (f"More ranks were placed on a node than it has devices: {f.get('message', '')}",
                "Make --data-parallel-size × --tensor-parallel-size × --pipeline-parallel-size on each node at most "
                "the devices visible there (--data-parallel-size-local, CUDA_VISIBLE_DEVICES / the container's "
                "device list).")
    if kind == "lora_rank":
        return (f"A LoRA adapter's rank ({f.get('lora_rank')}) is above the engine's --max-lora-rank "
                f"({f.get('max_lora_rank')})",
                f"Start the engine with --max-lora-rank {f.get('lora_rank')} or more (it sizes the LoRA buffers: more "
                "memory per slot), or serve an adapter trained at a rank the engine allows.")
    if kind == "rope":
        return (f"vLLM does not know the RoPE scaling asked for: {f.get('message', '')}",
                "Drop --rope-scaling (or the rope_scaling of --hf-overrides) and let vLLM read the model's own from "
                "config.json, or give a type this vLLM's rotary embeddings support (linear, dynamic, yarn, llama3, "
                "longrope, ...); a model whose config.json names a newer type needs a newer vLLM.")
    if kind == "world_size":
        return (f"The launcher started {f.get('world_size', 'more')} processes but the parallel layout is tensor "
                f"{f.get('tp_size', '?')} × pipeline {f.get('pp_size', '?')}",
                "Start vLLM as one process (it spawns its own workers) rather than under torchrun / mpirun, or, with "
                "distributed_executor_backend='external_launcher', make --tensor-parallel-size × "
                "--pipeline-parallel-size equal the number of processes the launcher starts.")
    if kind == "quantization":
        q = f.get("quantization")
        what = f"'{q}'" if q else ("an empty name" if q == "" else "")
        return (f"This vLLM does not know the checkpoint's quantization method{(' ' + what) if what else ''}, or it "
                "disagrees with --quantization",
                "Use a vLLM that supports the method (a newer release), or pass the --quantization the checkpoint was "
                "made with (or none, so vLLM reads it from the config); a checkpoint whose quantization_config names no "
                "quant_method needs a re-export that names one.")
    if kind == "argparse":
        return (f"vLLM's command line was refused: {f.get('message', '')}",
                "Drop or correct that flag (`vllm serve --help` lists this version's): a sampling parameter is not "
                "a server flag, and a flag of a newer vLLM or of a plugin not installed at a matching version "
                "(vllm-omni) is refused.")
    return (f"vLLM refused its configuration{where}: {f.get('message', '').rstrip('.')}",
            "Change the flags the message names (vLLM checks this combination at start; the planner does not "
            "model it), e.g. max_num_batched_tokens at least max_num_seqs and, without chunked prefill, "
            "at least max_model_len.")


# The fix of each category, beside the rules that find it: (figures, phase, kind) -> (summary, fix).
_FIXES = {
    "kv_cache_too_small": _fix_kv_cache_too_small,
    "no_kv_memory": _fix_no_kv_memory,
    "free_memory_below_request": _fix_free_memory_below_request,
    "cuda_oom_weights": _fix_cuda_oom_weights,
    "cuda_oom_after_kv": _fix_cuda_oom_after_kv,
    "cuda_oom_runtime": _fix_cuda_oom_runtime,
    "tp_not_divisible": _fix_tp_not_divisible,
    "max_len_over_model_limit": _fix_max_len_over_model_limit,
    "driver_mismatch_or_no_driver": _fix_driver_mismatch_or_no_driver,
    "lost_rank": _fix_lost_rank,
    "nccl_error": _fix_nccl_error,
    "cuda_oom": _fix_cuda_oom,
    "model_not_supported": _fix_model_not_supported,
    "shm_too_small": _fix_shm_too_small,
    "port_in_use": _fix_port_in_use,
    "model_not_found_or_auth": _fix_model_not_found_or_auth,
    "trust_remote_code_required": _fix_trust_remote_code_required,
    "unsupported_dtype_or_gpu": _fix_unsupported_dtype_or_gpu,
    "config_rejected": _fix_config_rejected,
}


# Start-up milestones in the order vLLM reaches them (V0 and V1 wordings): (name the log reached, the phase
# a failure right after it is in, how sure that is). Progress bars count as "in progress" milestones.
_MILESTONES = [
    # The engine's config line and the distributed set-up come before any weight: a failure after them alone is
    # in init (low: very old V0 printed nothing when it started loading the weights).
    ("engine_configured", "init", "low", re.compile(
        r"Initializing\s+an?\s+(?:V1\s+)?LLM\s+engine\s*\(v[^)\n]*\)\s+with\s+config|"
        r"rank\s+\d+\s+in\s+world\s+size\s+\d+\s+is\s+assigned\s+as|"
        # the engine starting Ray for its workers (an offline LLM(..., tensor_parallel_size=2) starts a local one)
        r"Started\s+a\s+local\s+Ray\s+instance", re.I)),
    ("loading_weights", "model_loading", "medium", re.compile(
        r"Starting\s+to\s+load\s+model|Loading\s+(?:safetensors|pt)\s+checkpoint\s+shards|Using\s+model\s+weights\s+format",
        re.I)),
    ("weights_loaded", "profile_run", "medium", re.compile(
        r"Loading\s+model\s+weights\s+took|Model\s+loading\s+took|Loading\s+weights\s+took", re.I)),
    # V1 compiles the model in its profiling run's first forward (compilation/backends.py: "Dynamo bytecode
    # transform time", "Compiling a graph for dynamic shape takes", "torch.compile takes|took ... in total"); from
    # 0.20 it then profiles the CUDA graphs' memory ("Initial profiling/warmup run took", "Profiling CUDA graph
    # memory: PIECEWISE=51, FULL=35")
    ("profiling", "profile_run", "medium", re.compile(
        r"Starting\s+profile\s+run|torch\.compile\s+t(?:akes|ook)|Dynamo\s+bytecode\s+transform\s+time|"
        r"Initial\s+profiling/warmup\s+run\s+took|Profiling\s+CUDA\s+graph\s+memory|"
        # V1's profile_run of a multi-modal model sizes its encoder cache first (gpu_model_runner.py)
        r"Compiling\s+a\s+graph\s+for\s+(?:dynamic|general)\s+shape|Encoder\s+cache\s+will\s+be\s+initialized|"
        # V0's profile_run building its dummy multi-modal data (multimodal/profiling.py)
        r"The\s+sequence\s+length\s+used\s+for\s+profiling", re.I)),
    ("memory_profiled", "kv_cache_allocation", "medium", re.compile(
        r"Memory\s+profiling\s+(?:takes|results)|the\s+current\s+vLLM\s+instance\s+can\s+use|"
        r"the\s+rest\s+of\s+the\s+memory\s+reserved\s+for\s+KV\s+Cache|Available\s+KV\s+cache\s+memory|"
        r"Estimated\s+CUDA\s+graph\s+memory", re.I)),
    # After the cache is sized the next steps are allocation, graph capture and the sampler warm-up: a guess.
    ("kv_cache_allocated", "graph_capture", "low", re.compile(
        _BLOCKS + r"\s*\d|GPU\s+KV\s+cache\s+size:|Maximum\s+concurrency\s+for", re.I)),
    ("capturing_cuda_graphs", "graph_capture", "medium", re.compile(
        r"Capturing\s+(?:the\s+model\s+for\s+)?CUDA\s+graphs?|Capturing\s+cudagraphs|Capturing\s+CUDA\s+graph\s+shapes|"
        r"CUDA\s+graphs\s+can\s+take\s+additional|Registering\s+\d+\s+cuda\s+graph\s+addresses", re.I)),
    # after capture: V0/V1 "Graph capturing finished in", 0.20+ "CUDA graph pool memory: N GiB (actual)" and the
    # worker's "Actual usage is ... GiB for CUDAGraph memory" (gpu_worker.py)
    ("cuda_graphs_captured", "sampler_warmup", "low", re.compile(
        r"Graph\s+capturing\s+finished|CUDA\s+graph\s+pool\s+memory:|GiB\s+for\s+CUDAGraph\s+memory", re.I)),
    ("engine_ready", "serving", "medium", re.compile(
        r"init\s+engine\s+\(profile,\s+create\s+kv\s+cache,\s+warmup\s+model\)\s+took", re.I)),
    ("serving", "serving", "medium", re.compile(
        # the API server starts once the engine is up (uvicorn: "Started server process", then application startup)
        r"Application\s+startup\s+complete|Uvicorn\s+running\s+on|Starting\s+vLLM\s+API\s+server|"
        r"Available\s+routes\s+are|"
        r"Started\s+server\s+process|Waiting\s+for\s+application\s+startup|Added\s+request|Received\s+request|"
        r"\"(?:POST|GET)\s+/v1/|Avg\s+prompt\s+throughput|Processed\s+prompts:\s*\d|"
        # request logs and V0's scheduler stats: requests were being served
        r"Finished\s+request|Aborted\s+request|Running:\s*\d+\s+reqs|\"POST\s+/(?:generate|invocations|pooling|score)\b|"
        # an RL trainer syncing new weights into the running engines between rollouts: OpenRLHF's worker wrap
        # (vllm_worker_wrap.py: print(f"update weight: {name}, dtype: {dtype}, shape: {shape}")) and verl's sharding
        # manager (log_gpu_memory_usage("After sync model weights in sharding manager"))
        r"update\s+weight:\s*\S+,\s*dtype:|sync\s+model\s+weights\s+in\s+sharding\s+manager",
        re.I)),
]
# Traceback frames, most specific first: capture and profiling tracebacks share _dummy_run and model
# forward frames, a profiling run calls execute_model, and V1 wraps all start-up in _initialize_kv_caches.
_FRAME_PHASES = [
    ("sampler_warmup", re.compile(r"_dummy_sampler_run|_dummy_pooler_run|" + _WARMING_UP, re.I)),
    ("graph_capture", re.compile(r"capture_model|_capture_cudagraphs|_warmup_and_capture|capture_end|capture_begin|"
                                 r"torch\.cuda\.graph\(|CUDAGraph", re.I)),
    ("profile_run", re.compile(r"profile_run|determine_available_memory|determine_num_available_blocks|"
                               r"profile_num_available_blocks|"  # V0 0.2-0.3's worker method
                               r"profile_cudagraph_memory", re.I)),
    ("kv_cache_allocation", re.compile(r"initialize_kv_cache|allocate_kv_cache|initialize_cache\b|_init_cache|"
                                       r"init_kv_cache|init_cache_engine|_reshape_kv_cache|bind_kv_cache|get_kv_cache_configs?\b|"
                                       r"check_enough_kv_cache_memory|raise_if_cache_size_invalid|initialize_from_config|"
                                       # V1 groups the layers' KV specs into pages before sizing the cache
                                       r"get_kv_cache_groups|unify_kv_cache_spec",
                                       re.I)),
    # an RL trainer's weight sync into the running engine (its load_weights is no start-up): OpenRLHF's and vLLM's
    # RLHF examples' worker extension update_weight / update_weight_cuda_ipc / update_weights_from_ipc_handles,
    # verl's patched LLM.sync_model_weights; and sleep mode's wake_up (LLM.wake_up, the executor's, the worker's,
    # the cumem allocator's): an engine is put to sleep only after it started, between an RL trainer's steps
    ("serving", re.compile(r"\bupdate_weights?(?:_from_\w+|_cuda_ipc)?\b|\bsync_model_weights\b|\bwake_up\b", re.I)),
    ("model_loading", re.compile(r"\bload_model\b|load_weights|model_loader|weight_loader|initialize_model|"
                                 r"process_weights_after_loading|"
                                 # the model's layers being built, each allocating its weights (a model class's
                                 # __init__ and its layers'; V0 0.1's parallel_utils): the frames an OOM shows when
                                 # the weights do not fit, above the loader frames a cut excerpt leaves out
                                 r"model_executor/models/\w+\.py\",?\s+line\s+\d+,\s+in\s+(?:__init__|<listcomp>)|"
                                 r"(?:model_executor/layers|parallel_utils)/[\w/]+\.py\",?\s+line\s+\d+,\s+in\s+__init__|"
                                 r"\bget_model\b|create_weights|make_layers|safetensors_weights_iterator|"
                                 # a quantized checkpoint's weights repacked for the Marlin/Machete kernels after loading
                                 # (_custom_ops.py gptq_marlin_repack, awq_marlin_repack, their _moe_ forms, machete_prepack_B)
                                 r"\b\w*marlin\w*_repack\b|\bmachete_prepack_B\b|"
                                 # a quantization config picking each layer's scheme as the layer is built
                                 # (compressed-tensors' get_scheme and its capability check)
                                 r"\bget_scheme\b|_check_scheme_supported|\bget_quant_method\b|\bget_moe_method\b|"
                                 # torch moving the built model's tensors to the device (Module.to: _apply, convert),
                                 # or creating them under the loader's `with torch.device(...)` (torch/utils/_device.py)
                                 r"nn/modules/module\.py\",?\s+line\s+\d+,\s+in\s+(?:_apply|convert)\b|"
                                 r"torch/utils/_device\.py\",?\s+line\s+\d+,\s+in\s+__torch_function__", re.I)),
    ("graph_capture", re.compile(r"compile_or_warm_up_model|\b_?warm_up_model\b", re.I)),  # 0.3: warm_up_model
    # (uvicorn's run_asgi and V0 AsyncLLMEngine's generate path handle a request)
    # (the OpenAI server's request handlers: entrypoints/openai/serving_chat.py, serving_engine.py ...)
    ("serving", re.compile(r"run_asgi|async_llm_engine\.py\",?\s+line\s+\d+,\s+in\s+(?:generate|_process_request)|"
                           r"entrypoints/openai/serving_\w+\.py\",?\s+line\s+\d+|"
                           r"execute_model|sample_tokens|execute_dummy_batch|"
                           r"run_busy_loop|engine_step|step_with_batch_queue|_process_input_queue|"
                           r"run_engine_loop|_process_engine_step|start_worker_execution_loop|output_handler|step_async|"
                           # Ray's compiled graph, which the Ray executors build for execute_model only (start-up's
                           # profiling and capture go through collective_rpc): its channels and DAG
                           r"ray/experimental/channel/|ray/dag/compiled_dag_node\.py",
                           re.I)),
    ("init", re.compile(r"\binit_device\b|\binit_model\b|init_worker_distributed_environment|_init_distributed_environment|"
                        r"initialize_model_parallel|init_distributed_environment|ncclCommInitRank|"
                        # vLLM's communicators are built with the process groups, at worker start (V0 0.4's
                        # init_custom_ar; GroupCoordinator's PyNccl/CustomAllreduce/CudaCommunicator.__init__)
                        r"ensure_model_parallel_initialized|init_world_group|init_model_parallel_group|init_custom_ar|"
                        r"device_communicators/\w+\.py\",?\s+line\s+\d+,\s+in\s+__init__|"
                        r"create_engine_config|verify_with_parallel_config|resolve_trust_remote_code|make_arg_parser|"
                        r"\bget_config\b|get_open_port|run_server|temp_socket\.bind|"
                        # the engine's ZMQ sockets (input, output, handshake) are made and bound as it starts
                        r"\bmake_zmq_socket\b", re.I)),
]
# A traceback's frame lines and the indented source lines under them (Python and IPython layouts).
_FRAME_LINE_RE = re.compile(r'^[ \t]*File\s+"[^"\n]*",\s+line\s+\d+,\s+in\s+\S+|^[ \t]{2,}\S[^\n]{0,300}|'
                            r'^-->[^\n]{0,300}|^File\s+~[^\n]{0,300}|'
                            # the worker method a distributed call failed in, in vLLM's own words (V0 and V1
                            # workers: "Error executing method init_device. This might cause deadlock ...",
                            # "Exception in worker VllmWorkerProcess while processing method load_model.")
                            # (quoted since vLLM wrote {method!r}: "Error executing method 'init_device'.")
                            r'(?:Error\s+executing\s+method|while\s+processing\s+method)\s+[\'"]?\w+', re.M)
# Where a category itself says the phase (vLLM raises these at one point of start-up).
# Rule kinds raised as the model's layers are built with their weights (phase model_loading, not the category's own).
_BUILT_WITH_THE_MODEL = ("quant_shape", "assert_heads", "quant_scheme", "version", "divide")
# Rule kinds raised at whichever step reaches them, placed by the frames like an error of no category: V1's
# attention-backend selector (as the model's layers are built, or later), ModelScope's hub lookup (at the first
# step that fetches a file of the model: its config at start-up, a multimodal processor in the profiling run), the
# hub's cache lookup (the same), a LoRA adapter's modules (at start with --lora-modules, or when a request names it).
_PLACED_BY_FRAMES = ("backend", "modelscope", "hub_cache", "lora_module", "class_registry")
# Rule kinds whose words say the phase, unlike the rest of their category: (category, kind) -> (phase, confidence).
_KIND_PHASES = {
    # the model loader lists the weight files as it loads the model, not as the config is read
    ("model_not_found_or_auth", "no_weights"): ("model_loading", "medium"),
    # the Mamba blocks are checked right before the CUDA graphs are captured, for the largest batch to capture
    ("kv_cache_too_small", "mamba"): ("graph_capture", "high"),
    # V1's load_model names its own step
    ("cuda_oom", "load_model"): ("model_loading", "high"),
    # the weight loader's own refusal
    ("model_not_supported", "weights"): ("model_loading", "high"),
    ("model_not_supported", "weight_key"): ("model_loading", "medium"),
    ("model_not_supported", "gguf_weights"): ("model_loading", "high"),
    # the linear layers pick their kernel as they are built with their weights (create_weights)
    ("unsupported_dtype_or_gpu", "platform_kernel"): ("model_loading", "medium"),
    # a quantized kernel's shape check as the layer is built
    ("model_not_supported", "kernel_shape"): ("model_loading", "high"),
    # NCCL refusing CUDA-graph capture says its step
    ("nccl_error", "graph"): ("graph_capture", "high"),
    # a load format streaming the weights from object storage fails to read a file as the weights load
    ("model_not_found_or_auth", "streamer"): ("model_loading", "high"),
}
_CATEGORY_PHASES = {
    "kv_cache_too_small": "kv_cache_allocation", "no_kv_memory": "kv_cache_allocation",
    "tp_not_divisible": "init", "max_len_over_model_limit": "init", "trust_remote_code_required": "init",
    "model_not_found_or_auth": "init", "model_not_supported": "init", "config_rejected": "init",
}
_OOM_CATEGORY = {
    "init": ("cuda_oom_weights", "GPU initialisation, before the weights"),
    "model_loading": ("cuda_oom_weights", "weight loading"),
    "profile_run": ("cuda_oom_weights", "the memory-profiling run after the weights loaded"),
    "kv_cache_allocation": ("cuda_oom_after_kv", "KV cache allocation"),
    "graph_capture": ("cuda_oom_after_kv", "CUDA graph capture"),
    "sampler_warmup": ("cuda_oom_after_kv", "sampler warm-up"),
    "serving": ("cuda_oom_runtime", "serving requests"),
}

# Figures read from the log around the error (last occurrence before it wins).
_CONTEXT_FIGURES = [
    ("weights_gib", re.compile(r"(?:Loading\s+model\s+weights\s+took|Model\s+loading\s+took|Loading\s+weights\s+took)\s+"
                               r"([\d.]+)\s*(?:GiB|GB)", re.I)),
    ("gpu_blocks", re.compile(_BLOCKS + r"\s*(\d+)", re.I)),
    ("kv_tokens", re.compile(r"GPU\s+KV\s+cache\s+size:\s*([\d,]+)\s*tokens", re.I)),
    ("kv_available_gib", re.compile(r"Available\s+KV\s+cache\s+memory:\s*(-?[\d.]+)\s*GiB|kv_cache_size=(-?[\d.]+)\s*GiB|"
                                    r"the\s+rest\s+of\s+the\s+memory\s+reserved\s+for\s+KV\s+Cache\s+is\s+(-?[\d.]+)\s*GiB", re.I)),
    ("max_concurrency", re.compile(r"Maximum\s+concurrency\s+for\s+[\d,]+\s+tokens\s+per\s+request:\s*([\d.]+)x", re.I)),
    ("max_model_len", re.compile(r"Maximum\s+concurrency\s+for\s+([\d,]+)\s+tokens\s+per\s+request|--max-model-len[= ](\d+)|"
                                 r"'max_model_len':\s*(\d+)|\bmax_seq_len=(\d+)", re.I)),
    ("total_gib", re.compile(r"total_gpu_memory\s*=?\s*\(?([\d.]+)\s*GiB", re.I)),
    ("gpu_memory_utilization", re.compile(r"gpu_memory_utilization\s*(?:=|\(|':)\s*([\d.]+)|--gpu-memory-utilization[= ]([\d.]+)", re.I)),
    ("tp_size", re.compile(r"--tensor-parallel-size[= ](\d+)|(?:^|\s)-tp[= ](\d+)|'tensor_parallel_size':\s*(\d+)|"
                           r"\btensor_parallel_size=(\d+)", re.I)),
    ("max_num_seqs", re.compile(r"--max-num-seqs[= ](\d+)|'max_num_seqs':\s*(\d+)|\bmax_num_seqs=(\d+)", re.I)),
    ("max_num_batched_tokens", re.compile(r"--max-num-batched-tokens[= ](\d+)|'max_num_batched_tokens':\s*(\d+)|"
                                          r"\bmax_num_batched_tokens=(\d+)", re.I)),
    ("port", re.compile(r"--port[= ](\d+)|'port':\s*(\d+)", re.I)),
]
_OOM_DETAIL_RES = [
    # torch ≥ 2.1: "GPU 0 has a total capacity of 79.33 GiB of which 109.81 MiB is free."
    re.compile(r"GPU\s*(?P<gpu>\d+)\s+has\s+a\s+total\s+capac(?:i)?ty\s+of\s+(?P<total>[\d.]+)\s*(?P<total_unit>[KMG]iB)\s+of\s+which\s+"
               r"(?P<free>[\d.]+)\s*(?P<free_unit>[KMG]iB)\s+is\s+free", re.I),
    # older torch: "(GPU 0; 23.69 GiB total capacity; 22.34 GiB already allocated; 1.19 MiB free; ...)"
    re.compile(r"\(GPU\s*(?P<gpu>\d+);\s*(?P<total>[\d.]+)\s*(?P<total_unit>[KMG]iB)\s+total\s+capacity;[^;]*;\s*"
               r"(?P<free>[\d.]+)\s*(?P<free_unit>[KMG]iB)\s+free", re.I),
]
# More than one rank in the log: V0's multiprocessing workers, V1's worker ranks, a rank past 0 in torch's prefix.
_MULTI_RANK_RE = re.compile(r"\(VllmWorkerProcess\s+pid=|\(VllmWorker\s+(?:TP|rank=?)\s*[1-9]|\[rank[1-9]\d*\]:", re.I)
_OTHER_PROCESS_RE = re.compile(r"Process\s+(\d+)\s+has\s+([\d.]+)\s*([KMG]iB)\s+memory\s+in\s+use", re.I)
_EXCEPTION_LINE_RE = re.compile(r"^\s*(?:[\w.]+\.)?(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt))\b(?::.*|\(.*)?$|"
                                r"^\s*Exception\s+raised\s+from\s.*$|"
                                r"^\s*(?:Value|Runtime|Assertion|Type|Key|OS|Import|Attribute)\s+error,.*$", re.M)
_WRAPPER_RE = re.compile(r"Engine\s+core\s+initialization\s+failed|Engine\s+process\s+failed\s+to\s+start|"
                         r"EngineDeadError|is\s+already\s+dead|\bdied\b|Worker\s+failed|Traceback|During\s+handling", re.I)


# Figures a rule reads as text, not as a number (a version keeps its dots).
_TEXT_FIGURES = ("gpu_name", "assert_kv", "quantization", "model_type", "peer", "config", "message", "last_version", "argument",
                 "config2", "argument2", "op", "op2", "soc_version", "weight", "model_class", "dim")


def _gib(value: str, unit: str | None) -> float:
    v = float(value)
    return round({"KiB": v / 1024 ** 2, "MiB": v / 1024, "GiB": v}.get(unit or "GiB", v), 3)


def _num(value: str):
    value = value.replace(",", "").rstrip(".")
    try:
        return float(value) if "." in value else int(value)
    except ValueError:
        return None


def _context_figures(text: str, end: int) -> dict:
    figures: dict = {}
    for name, pattern in _CONTEXT_FIGURES:
        last = None
        for m in pattern.finditer(text):
            if m.start() > end and last is not None:
                break
            last = m
            if m.start() > end:  # nothing before the error: a figure printed after still says something
                break
        if last:
            value = next(g for g in last.groups() if g is not None)
            if _num(value) is not None:
                figures[name] = _num(value)
    return figures


def _line_at(text: str, start: int, end: int) -> str:
    a = text.rfind("\n", 0, start) + 1
    b = text.find("\n", end)
    return text[a: b if b != -1 else len(text)].strip()[:500]


# One word each milestone's wording must contain (words, not phrases: a hard-wrapped line still has them),
# so a huge log without any is not scanned by every pattern.
_MILESTONE_HINTS = {
    "engine_configured": ("initializing", "world size", "local ray"),
    "loading_weights": ("load", "shards", "weights"), "weights_loaded": ("took",),
    "profiling": ("profil", "compil", "dynamo", "encoder"),
    "memory_profiled": ("profiling", "instance", "reserved", "available", "estimated"),
    "kv_cache_allocated": ("blocks", "size:", "concurrency"), "capturing_cuda_graphs": ("captur", "graph"),
    "cuda_graphs_captured": ("capturing", "graph pool", "cudagraph memory"), "engine_ready": ("engine",),
    "serving": ("startup", "uvicorn", "server", "routes", "request", "/v1/", "throughput", "prompts", "reqs", "post /",
                "update weight", "sync model weights"),
}


def _milestones(text: str) -> list[tuple[int, str, str, str]]:
    """(position, milestone, phase after it, confidence) for every milestone in text, by position."""
    low = text.lower()
    found = sorted((m.start(), name, phase, confidence)
                   for name, phase, confidence, pattern in _MILESTONES
                   if any(hint in low for hint in _MILESTONE_HINTS[name])
                   for m in pattern.finditer(text) if text[m.start() - 1: m.start()] not in _QUOTES)
    if "across cluster]" not in low:
        return found
    # Ray prints a line the first time one worker logs it and the copies of the other workers later, as one
    # "[repeated 30x across cluster]" line (its log deduplication): such a copy of an earlier step, after a further
    # step was logged, is no step back.
    order = {name: i for i, (name, _, _, _) in enumerate(_MILESTONES)}
    out, furthest = [], -1
    for milestone in found:
        if order[milestone[1]] < furthest and _RAY_REPEATED_RE.search(
                text, milestone[0], min(_line_end(text, milestone[0]), milestone[0] + 4000)):
            continue
        out.append(milestone)
        furthest = max(furthest, order[milestone[1]])
    return out


_RAY_REPEATED_RE = re.compile(r"\[repeated\s+\d+x\s+across\s+cluster\]", re.I)


def _line_end(text: str, pos: int) -> int:
    end = text.find("\n", pos)
    return len(text) if end == -1 else end


# A milestone's words right after a quote are vLLM's source (logger.info("Loading model weights took ...") quoted
# in a notebook's traceback), not its log line.
_QUOTES = ("\"", "'")


def _milestone_before(milestones: list, pos: int) -> tuple[str, str | None, str, int]:
    """(milestone reached, the phase after it, confidence, its position) for the last milestone before pos."""
    before = [m for m in milestones if m[0] < pos]
    if not before:
        return "none", None, "none", -1
    start, name, phase, confidence = before[-1]
    return name, phase, confidence, start


# An error line this near the top of a log has no start-up before it: the start-up lines just after it say where.
_PASTED_FIRST = 500
_PASTED_AFTER = 3000


def _milestone_after(text: str, end: int, milestones: list):
    """The last milestone shortly after an error that heads the log, with no other error line between them."""
    after = [m for m in milestones if end < m[0] < end + _PASTED_AFTER]
    if not after or _EXCEPTION_LINE_RE.search(text, end, after[-1][0]):
        return None
    return after[-1]


# The worker method a distributed call failed in, logged by the worker just before its traceback (logger.exception):
# V0/V1 worker_base.py and V0 0.4's ray_utils.py "Error executing method init_device. This might cause deadlock in
# distributed execution." ({method!r} from 0.6: 'init_device'), multiproc_worker_utils.py "Exception in worker
# VllmWorkerProcess while processing method load_model." The method names the step: init_device, load_model,
# determine_num_available_blocks, initialize_cache, compile_or_warm_up_model, execute_model (_FRAME_PHASES).
_WORKER_METHOD_RE = re.compile(r"(?:Error\s+executing\s+method|while\s+processing\s+method)\s+['\"]?\w+[^\n]{0,200}\n"
                               r"[^\n]{0,40}$")


def _traceback_start(text: str, tb: int) -> int:
    """Where the traceback that starts at text[tb] begins, with the worker-method line logged just above it."""
    if tb <= 0:
        return tb
    line = text.rfind("\n", 0, tb)
    m = _WORKER_METHOD_RE.search(text, text.rfind("\n", 0, line) + 1, tb) if line > 0 else None
    return m.start() if m else tb


def _frames_near(text: str, pos: int, end: int) -> tuple[str | None, str | None, str]:
    """(phase, frame line, confidence) from the traceback frames around an error at text[pos:end].

    The frames above the error line are its own traceback (high); other ranks print theirs after it, and the
    API server logs output_handler only once it serves (medium). Only frame-like lines are read, so an
    INFO line that mentions "load model" is not a frame."""
    tb = _traceback_start(text, text.rfind("Traceback (most recent call last)", 0, pos))
    start = tb if tb != -1 and pos - tb < 30000 else max(0, pos - 6000)
    for window, confidence in ((text[start:pos], "high"), (text[end:end + 4000], "medium")):
        frames = "\n".join(m.group(0) for m in _FRAME_LINE_RE.finditer(window))
        for phase, pattern in _FRAME_PHASES:
            m = pattern.search(frames)
            if m:
                return phase, _line_at(frames, m.start(), m.end()), confidence
    # the error's own words naming the graph-capture call that failed (vllm-ascend: "NPUModelRunner init failed, error
    # is capture_begin: ...", then the ACL runtime's lines): only capture's names, which no other step's message has
    said = _CAPTURE_CALL_RE.search(text, max(0, pos - 600), end)
    if said:
        return "graph_capture", _line_at(text, said.start(), said.end()), "medium"
    return None, None, "none"


_CAPTURE_CALL_RE = re.compile(r"\b(?:capture_begin|capture_end|capture_model|AclmdlRICaptureBegin)\b")


# Eager mode in the engine's config line ("enforce_eager=True"), its non-default args or the command line.
_EAGER_RE = re.compile(r"\benforce_eager\s*=\s*True\b|'enforce_eager':\s*True\b|--enforce-eager\b(?![= ]+(?:False|0)\b)")
# The engine's serving loop died (it runs only after start-up): V0's MQLLMEngine client ("MQEngineDeadError:
# Engine loop is not running"), V0's AsyncLLMEngine background loop (its done-callback _log_task_completion,
# "Engine background task failed", AsyncEngineDeadError) and V1's EngineDeadError ("EngineCore encountered an
# issue"); start-up failures say "Engine process failed to start" / "Engine core initialization failed" instead.
# V1's EngineCore logs "EngineCore encountered a fatal error." when its busy loop fails ("EngineCore failed to
# start." before), after dumping the step it ran (logging_utils/dump_input.py: "Dumping input data for V1 LLM engine",
# "Dumping scheduler output for model execution", "Dumping scheduler stats").
_ENGINE_LOOP_DEAD_RE = re.compile(r"Engine\s+loop\s+is\s+not\s+running|MQEngineDeadError|_log_task_completion|"
                                  # V0 0.2's done-callback of the same loop (async_llm_engine.py)
                                  r"_raise_exception_on_finish|"
                                  r"Engine\s+background\s+task\s+failed|AsyncEngineDeadError|EngineDeadError|"
                                  # V0's run_engine_loop: a step hung past ENGINE_ITERATION_TIMEOUT_S
                                  r"Engine\s+iteration\s+timed\s+out|"
                                  # V0's MQLLMEngine.start() logs its loop's error as repr(e) (start-up errors are
                                  # logged as str(e) by run_mp_engine): the model-execution wrapper's, repr'd
                                  r"(?:Error|Exception)\(['\"]Error\s+in\s+model\s+execution\s+\(input\s+dumped|"
                                  r"EngineCore\s+encountered\s+(?:an\s+issue|a\s+fatal\s+error)|"
                                  r"Dumping\s+(?:input\s+data\s+for\s+V1|scheduler\s+(?:output|stats))", re.I)


def _locate(text: str, pos: int, end: int, category: str, kind: str, milestones: list) -> dict:
    """Where the engine was when the error at text[pos:end] happened: phase, confidence, evidence, reached."""
    reached, after, milestone_confidence, milestone_pos = _milestone_before(milestones, pos)
    out = {"phase_reached": reached, "phase": "unknown", "phase_confidence": "none", "phase_evidence": None}
    placed = (_placed_by_message(text, pos, end, category, kind)
              or _placed_by_evidence(text, pos, end, category, milestones,
                                     (reached, after, milestone_confidence, milestone_pos))
              or _placed_by_kind(text, pos, end, category, kind))
    if placed:
        out.update(phase=placed[0], phase_confidence=placed[1], phase_evidence=placed[2])
    return out


def _placed_by_message(text: str, pos: int, end: int, category: str, kind: str) -> tuple[str, str, str] | None:
    """(phase, confidence, evidence) that the failure's own message fixes, whatever else the log shows."""
    # V1 re-raises a torch OOM in the sampler warm-up as its own message, printed after the torch one
    sampler = re.search(_WARMING_UP, text[pos: pos + 4000], re.I) if category == "cuda_oom" else None
    if kind == "sampler" or sampler:
        a, b = (pos, end) if kind == "sampler" else (pos + sampler.start(), pos + sampler.end())
        return "sampler_warmup", "high", _line_at(text, a, b)
    if category == "free_memory_below_request":
        phase = "profile_run" if re.match(r"Error\s+in\s+memory\s+profiling", text[pos:end], re.I) else "init"
        return phase, "high", _line_at(text, pos, end)
    if (category, kind) in _KIND_PHASES:
        phase, confidence = _KIND_PHASES[category, kind]
        return phase, confidence, _line_at(text, pos, end)
    if category in _CATEGORY_PHASES and kind not in _PLACED_BY_FRAMES and kind not in _BUILT_WITH_THE_MODEL:
        return _CATEGORY_PHASES[category], "high", _line_at(text, pos, end)
    return None


def _placed_by_evidence(text: str, pos: int, end: int, category: str, milestones: list,
                        before: tuple) -> tuple[str, str, str] | None:
    """(phase, confidence, evidence) from the log around the failure: frames, the milestones reached (`before`:
    _milestone_before's answer for pos), the engine's config line, serving lines, the server's shutdown."""
    reached, after, milestone_confidence, milestone_pos = before
    phase, frame, confidence = _frames_near(text, pos, end)
    if phase:
        return phase, confidence, frame
    if forward := _forward_while_constructing(text, pos):
        # the model's forward inside the engine's construction (LLM.__init__, from_engine_args), no capture frame: the
        # one forward start-up runs before the KV cache is sized is the profiling run
        return "profile_run", "low", forward
    if category == "port_in_use" and after == "serving" and not _served_before(text, milestones, pos):
        # uvicorn binds its socket after the app's start-up ("Application startup complete", then the bind error,
        # then "Application shutdown"): a server that never bound never served
        return "init", "medium", _line_at(text, pos, end)
    if engine_loop := _ENGINE_LOOP_DEAD_RE.search(text, max(0, pos - 3000), end + 4000):
        # the engine's serving loop died: it only runs once start-up is over
        return "serving", "medium", _line_at(text, engine_loop.start(), engine_loop.end())
    if after == "graph_capture" and reached == "kv_cache_allocated" and _EAGER_RE.search(text, 0, pos):
        # the engine's config says eager mode: no CUDA graph is captured, the cache allocation comes next
        return "kv_cache_allocation", "low", _line_at(text, milestone_pos, milestone_pos + 1)
    if after:
        return after, milestone_confidence, _line_at(text, milestone_pos, milestone_pos + 1)
    if category == "unknown" and _PROMPT_TOO_LONG_RE.search(text, pos, end):
        # a request's prompt checked against max_model_len as it arrives, whatever start-up lines a paste puts after it
        return "serving", "medium", _line_at(text, pos, end)
    if pos < _PASTED_FIRST and _milestone_after(text, end, milestones):
        # the error line heads the excerpt and start-up lines follow it: pasted first, or Ray printing its workers'
        # deduplicated lines late ("[repeated 7x across cluster]")
        start, _, phase, _ = _milestone_after(text, end, milestones)
        return phase, "low", _line_at(text, start, start + 1)
    if re.search(r"Waiting\s+for\s+application\s+shutdown|Application\s+shutdown\s+complete|"
                   r"output_handler\s+failed", text[end:end + 4000], re.I):
        # the API server only starts (and so only shuts down) after the engine finished starting up
        return "serving", "medium", _line_at(text, end, end + 1)
    if category == "unknown" and (placed := _unknown_placed(text, pos, end)):
        return placed[0], placed[1], _line_at(text, pos, end)
    if category == "unknown" and _IMPORT_ERROR_RE.match(text, pos) and _imported_at_module_level(text, pos):
        # an import that fails at module level (the frames above are all `<module>`): the program stopped while it was
        # being imported, before any engine argument was read
        return "init", "medium", _line_at(text, pos, end)
    return None


# Kinds of unsupported_dtype_or_gpu raised at a kernel's first launch or compile (no kernel image for the GPU, Triton's
# fp8e4nv, a CUTLASS kernel not compiled for its capability): placed by the model's forward frames, else at init.
_FIRST_KERNEL_KINDS = ("kernel", "triton_fp8", "cutlass")


def _placed_by_kind(text: str, pos: int, end: int, category: str, kind: str) -> tuple[str, str, str] | None:
    """(phase, confidence, evidence) where the log shows nothing but the failure: where its kind is raised."""
    if kind in _BUILT_WITH_THE_MODEL:
        # raised as the model's layers are built with their weights: the quantized layers' create_weights, a model
        # class's own assert on its heads or its checkpoint's version, the compressed-tensors config picking each
        # layer's scheme, a parallel layer's divide() of a dimension over the ranks
        return "model_loading", "medium", _line_at(text, pos, end)
    if category == "config_rejected" and kind == "backend":
        # V1 picks the attention backend when the model's attention layers are built (Attention.__init__)
        return "model_loading", "low", _line_at(text, pos, end)
    if category == "cuda_oom" and kind == "cumem":
        # sleep mode's allocator failing to map memory back: the engine had started and slept (see the rule)
        return "serving", "low", _line_at(text, pos, end)
    if category == "nccl_error" and kind == "connect":
        # the ranks meet once, when the process group is formed at worker start
        return "init", "high", _line_at(text, pos, end)
    if category == "nccl_error" and kind == "timeout" and _first_collective(text, pos, end):
        # the group's very first collective never completed: the warm-up all-reduce of a communicator at worker start
        return "init", "low", _line_at(text, pos, end)
    if category == "nccl_error" and kind == "timeout" and _late_collective(text, pos, end):
        # the watchdog names the collective's sequence number: start-up runs some thousands, serving millions
        return "serving", "low", _line_at(text, pos, end)
    if (category == "nccl_error" and kind != "timeout") or (category == "shm_too_small" and kind in ("nccl", "ray")):
        # no frame and no milestone: NCCL's communicators (and their /dev/shm segments) are created and warmed up
        # with a first all-reduce at worker start (init_device), where most NCCL errors surface; a hang comes later
        return "init", "low", _line_at(text, pos, end)
    if category == "unsupported_dtype_or_gpu" and kind == "torchao":
        # torchao quantizes the weights as they are loaded
        return "model_loading", "low", _line_at(text, pos, end)
    if category == "unsupported_dtype_or_gpu" and kind in _FIRST_KERNEL_KINDS:
        if m := _FORWARD_FRAME_RE.search(text, max(0, pos - 6000), pos):
            # the missing kernel was the model's own forward (a layer's apply/forward frame above the error): its
            # first forward pass is the profiling run, before any request could be served
            return "profile_run", "low", _line_at(text, m.start(), m.end())
        # a torch build without this GPU's architecture fails at its first kernel, at device init; a vLLM build
        # without it fails later, at its own first kernel (profiling), where frames or milestones say so
        return "init", "low", _line_at(text, pos, end)
    if category in ("unsupported_dtype_or_gpu", "port_in_use", "driver_mismatch_or_no_driver") and \
            kind not in ("smem", "arch", "triton_old", "triton_mma", "fa3"):
        # raised while the engine is configured, finds its GPUs or binds its port, before any weight is loaded
        return "init", "medium", _line_at(text, pos, end)
    return None


# The engine being constructed: the offline LLM's __init__, an engine's from_engine_args (V0 and V1)
_CONSTRUCTING_RE = re.compile(r'entrypoints/llm\.py",\s+line\s+\d+,\s+in\s+__init__|\bfrom_engine_args\b')


def _forward_while_constructing(text: str, pos: int) -> str | None:
    """A model layer's forward frame in the traceback of an error raised while the engine was being constructed (the
    traceback above the error, or a rank's copy printed just after it)."""
    window = text[max(0, pos - 12000): pos + 12000]
    forward = _FORWARD_FRAME_RE.search(window)
    if not forward or not _CONSTRUCTING_RE.search(window):
        return None
    return _line_at(window, forward.start(), forward.end())


_IMPORT_ERROR_RE = re.compile(r"\s*(?:ImportError|ModuleNotFoundError):")
_FORKED_CUDA_RE = re.compile(r"Cannot\s+re-initialize\s+CUDA\s+in\s+forked\s+subprocess", re.I)
# Ray: a process of another Ray or Python version than the cluster's head
_RAY_VERSION_RE = re.compile(r"Version\s+mismatch:\s+The\s+cluster\s+was\s+started\s+with", re.I)
# vLLM's input check of a request: "Prompt length of 4178 is longer than the maximum model length of 4096."
_PROMPT_TOO_LONG_RE = re.compile(r"(?:Prompt\s+length\s+of\s+\d+|The\s+decoder\s+prompt\s+\(length\s+\d+\))\s+is\s+longer\s+"
                                 r"than\s+the\s+maximum\s+model\s+length", re.I)
# A model layer's forward frame (model_executor/layers/linear.py "in apply", a model class's "in forward", an attention
# backend's, attention/backends/xformers.py "in forward")
_FORWARD_FRAME_RE = re.compile(r'File\s+"[^"\n]*(?:model_executor/(?:layers|models)|attention/backends)/[\w/]+\.py",\s+line\s+'
                               r'\d+,\s+in\s+(?:forward|apply|_forward\w*)\b')
_TARGET_MATCH_RE = re.compile(r"Unable\s+to\s+find\s+matching\s+target\s+for\s+\S+\s+in\s+the\s+compressed-tensors\s+config",
                              re.I)


def _imported_at_module_level(text: str, pos: int) -> bool:
    """Whether the traceback right above text[pos] ends in a module's body (an import at module level)."""
    tb = text.rfind("Traceback (most recent call last)", 0, pos)
    frames = [m.group("func") for m in _FILE_FRAME_RE.finditer(text, tb if tb != -1 else pos, pos)]
    return bool(frames) and frames[-1] == "<module>"


# A request's multimodal items that do not fill its prompt's placeholders (models/utils.py _merge_multimodal_embeddings,
# "Attempted to assign 2816 = 2816 multimodal tokens to 2817 placeholders"): V1 merges the embeddings only for real
# requests (its profiling run feeds the encoder alone), so the error comes as a request runs.
_REQUEST_INPUT_RE = re.compile(r"Attempted\s+to\s+assign\s+[^\n]{0,200}?multimodal\s+tokens\s+to\s+\d+\s+placeholders",
                               re.I)


# Failures no category names, placed by their own words: (words, phase, confidence), the first that matches.
_UNKNOWN_PHASES = (
    # compressed-tensors maps each layer to its scheme's target as the layer is built (find_matched_target)
    (_TARGET_MATCH_RE, "model_loading", "medium"),
    # a worker forked after the parent touched CUDA fails as it sets up its own device, at worker start
    (_FORKED_CUDA_RE, "init", "low"),
    # a process joins the Ray cluster as the engine starts its workers
    (_RAY_VERSION_RE, "init", "low"),
    # a request's multimodal input that does not match its prompt's placeholders: raised as that request runs
    (_REQUEST_INPUT_RE, "serving", "low"),
)


def _unknown_placed(text: str, pos: int, end: int) -> tuple[str, str] | None:
    """(phase, confidence) of an error no rule names, from its own words (_UNKNOWN_PHASES)."""
    return next(((phase, confidence) for words, phase, confidence in _UNKNOWN_PHASES if words.search(text, pos, end)),
                None)


# The API server's own start-up lines (uvicorn's, vLLM's route list and its "Starting vLLM API server"): read as
# serving since the engine is up by then, but logged before uvicorn binds the port and serves any request.
_SERVER_STARTING_RE = re.compile(r"Application\s+startup\s+complete|Started\s+server\s+process|Waiting\s+for\s+"
                                 r"application\s+startup|Starting\s+vLLM\s+API\s+server|Available\s+routes\s+are",
                                 re.I)


def _served_before(text: str, milestones: list, pos: int) -> bool:
    """Whether a serving milestone before pos is more than the API server starting (a request, a weight update)."""
    return any(phase == "serving" and name != "engine_ready" and not _SERVER_STARTING_RE.match(text, start)
               for start, name, phase, _ in milestones if start < pos)


# torch's watchdog: "WorkNCCL(SeqNum=4967570, OpType=ALLREDUCE, ...)". Start-up (profiling run, graph capture of
# every batch size, two all-reduces a layer) stays in the tens of thousands even for deep models at TP 8.
_SEQNUM_RE = re.compile(r"SeqNum=(\d{1,12})\b")
_SERVING_SEQNUM = 100_000


# torch's watchdog on a group none of whose collectives ever completed: "WorkNCCL(SeqNum=1, ...)" (the first), "last
# completed NCCL work: -1" (torch 2.4-2.5), "last completed work: -1" (2.6+)
_FIRST_COLLECTIVE_RE = re.compile(r"SeqNum=1\b|last\s+completed\s+(?:NCCL\s+)?work:\s*-1\b")


def _first_collective(text: str, pos: int, end: int) -> bool:
    return bool(_FIRST_COLLECTIVE_RE.search(text, pos, end + 600))


def _late_collective(text: str, pos: int, end: int) -> bool:
    m = _SEQNUM_RE.search(text, pos, end + 300)
    return bool(m) and int(m.group(1)) >= _SERVING_SEQNUM


def _shared_gpu(summary: str, fix: str, f: dict) -> tuple[str, str]:
    """torch's OOM message lists every process holding the GPU ("Process 4057874 has 20.04 GiB memory in use.
    Process 4060801 has 26.40 GiB ..."): with more than one, another process shares it, which no flag of this
    instance frees."""
    held = f.get("gpu_processes_gib")
    if not held:
        return summary, fix
    return (summary + f"; {len(held)} processes hold this GPU ({' + '.join(_fmt(g) for g in held)} GiB)",
            "another process shares this GPU: stop it or give each instance its own GPU (nvidia-smi names them), "
            "or split the memory with a lower --gpu-memory-utilization per instance; then " + fix[:1].lower() + fix[1:])


# The model the log names where its parallel layout is also printed: the command line (`--model`, `vllm serve M`,
# FastChat's --model-path) or the engine's config line (model='...'), so a tensor-parallel size it does not show is 1.
_MODEL_NAMED_RE = re.compile(r"--model(?:-path)?[= ]+['\"]?(?P<a>[^\s'\"]+)|\bvllm\s+serve\s+['\"]?(?P<b>[\w./~-]+)|"
                             r"\bmodel(?:_path)?\s*=\s*['\"](?P<c>[^'\"\n]{1,200})['\"]", re.I)
# Billions of parameters in a model's name ("Qwen1.5-72B-Chat", "Llama-3.1-8B-Instruct", "gemma-2-9b-it"; a mixture
# of experts "Mixtral-8x7B" counts every expert; "Qwen3-30B-A3B" is 30, its active "A3B" is no size)
_NAME_SIZE_RE = re.compile(r"(?<![A-Za-z0-9.])(?:(?P<experts>\d{1,3})x)?(?P<b>\d{1,4}(?:\.\d{1,2})?)[bB](?![A-Za-z0-9])")
_BYTES_PER_PARAM = ((re.compile(r"awq|gptq|int4|4bit|w4a\d+|bnb|nf4", re.I), 0.5),
                    (re.compile(r"fp8|int8|8bit|w8a\d+", re.I), 1.0))
_PP_RE = re.compile(r"--pipeline-parallel-size[= ](\d+)|(?:^|\s)-pp[= ](\d+)|\bpipeline_parallel_size=(\d+)", re.I)
_PROCESS_ALLOCATED_RE = re.compile(r"this\s+process\s+has\s+([\d.]+)\s*([KMG]iB)\s+memory\s+in\s+use|"
                                   r"([\d.]+)\s*([KMG]iB)\s+already\s+allocated", re.I)


def _weights_too_big(norm: str, figures: dict, tail: str) -> dict:
    """An OOM no frame or milestone places, read against the weights of the model the log names: when one GPU's share
    of them (by the name's parameter count, its quantization and the tensor/pipeline sizes shown) is more than the GPU
    holds, or more than the process had allocated when it failed, the weights were still loading (low confidence)."""
    named = _MODEL_NAMED_RE.search(norm)
    model = next((g for g in named.groups() if g), "") if named else ""
    size = _NAME_SIZE_RE.search(model.rsplit("/", 1)[-1]) or _NAME_SIZE_RE.search(model)
    if not size:
        return {}
    params = float(size.group("b")) * int(size.group("experts") or 1)
    per_param = next((b for pattern, b in _BYTES_PER_PARAM if pattern.search(model)), 2.0)
    pp = _PP_RE.search(norm)
    ranks = int(figures.get("tp_size") or 1) * (int(next(g for g in pp.groups() if g)) if pp else 1)
    share = round(params * 1e9 * per_param / ranks / 1024 ** 3, 1)
    held = _PROCESS_ALLOCATED_RE.search(tail)
    allocated = _gib(*[g for g in held.groups() if g][:2]) if held else None
    total = figures.get("total_gib")
    if not ((total and share > total) or (allocated is not None and allocated < share)):
        return {}
    figures.update(model_params_b=params, weights_share_gib=share)
    against = f"{_fmt(total)} GiB on the GPU" if total and share > total else f"{_fmt(allocated)} GiB allocated"
    return {"phase": "model_loading", "phase_confidence": "low",
            "phase_evidence": f"{_line_at(norm, named.start(), named.end())} (~{_fmt(share)} GiB of weights per GPU "
                              f"at {ranks} rank(s), against {against})"}


def _fmt(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _lower_util(util, step=0.05):
    return None if util is None else max(0.05, round(float(util) - step, 2))


def _fix(category: str, f: dict, where: str = "", kind: str = "") -> tuple[str, str]:
    """(summary, fix) with the figures filled in; nothing for a category without a fix."""
    fix = _FIXES.get(category)
    return fix(f, where, kind) if fix else ("", "")


# vLLM on another platform than CUDA (CPU, TPU, XPU, ROCm builds), where Triton finding no CUDA driver is normal
_NOT_CUDA_RE = re.compile(r"Automatically\s+detected\s+platform\s+(?!cuda\b)\w+|TPU\s+info:|cpu_worker\.py|CPUWorker|"
                          r"doesn't\s+include\s+CPU\s+backend|Pin\s+memory\s+is\s+not\s+supported\s+on\s+CPU", re.I)


def diagnose(text) -> Diagnosis:
    """Read a vLLM log (str or bytes) and name the root cause of its failure. Never raises."""
    try:
        return _diagnose(text)
    except Exception as exc:  # noqa: BLE001 - a diagnosis tool must answer for any input
        return _with_action(Diagnosis("unknown", f"Diagnosis failed on this input ({type(exc).__name__}); read the "
                                      "log by hand", {}, "Read the first traceback in the log.", None, "low"))


def _diagnose(text) -> Diagnosis:
    try:
        norm = normalise(text)
    except Exception:  # noqa: BLE001 - a diagnosis tool must answer for any input
        norm = ""
    if not norm.strip():
        return _with_action(Diagnosis("unknown", "Empty log: nothing to diagnose", {}, "Collect the service log "
                                      "(journalctl -u UNIT or docker logs CONTAINER) from its start.", None, "low"))
    chosen = _first_rule(norm)
    milestones = _milestones(norm)
    if chosen is None:
        raw = _raw(text)  # the lines with their headers, which normalise() strips
        chosen = _registry_error(raw, norm)
        if chosen is None:
            last_raw = raw.rstrip().rsplit("\n", 1)[-1]
            return _no_known_failure(norm, milestones, _LOG_RECORD_RE.search(last_raw) is None)

    tier, pos, _, rule, m = chosen
    figures = _context_figures(norm, pos)
    figures.update({k: _num(v) for k, v in m.groupdict().items()
                    if v is not None and re.fullmatch(r"-?[\d.,]+", v) and _num(v) is not None})
    figures.update({k: v.strip() for k, v in m.groupdict().items() if v is not None and k in _TEXT_FIGURES})
    for key in ("config", "argument", "min_arch", "op"):  # a rule's second wording names its groups key2
        if key + "2" in figures:
            figures[key] = figures.pop(key + "2")
    category, where, kind = rule.category, "", rule.kind
    if category == "unsupported_dtype_or_gpu" and re.search(r"no\s+kernel\s+image", m.group(0), re.I):
        kind = "kernel"
    if category == "nccl_error" and kind not in ("connect", "library", "ib", "graph"):
        kind = _nccl_kind(norm[max(0, pos - 2000): pos + 3000])
    loc = _locate(norm, pos, m.end(), category, kind, milestones)
    if kind == "kernel_shape" and ((figures.get("tp_size") or 1) > 1 or _MULTI_RANK_RE.search(_raw(text))):
        # Marlin's tile refusing a slice that tensor parallelism cut (the message: "Consider reducing
        # tensor_parallel_size"): the split is the cause, found as the layers load; on one GPU the layer itself is
        # (model_not_supported)
        category, kind = "tp_not_divisible", "marlin_shape"
    if loc["phase"] == "unknown":
        loc.update(_endpoint_logged(text, norm))
    if category == "cuda_oom":
        tail = norm[pos: pos + 1500]
        _oom_figures(m, tail, figures)
        if loc["phase"] == "unknown":
            loc.update(_weights_too_big(norm, figures, tail))
        category, where = _OOM_CATEGORY.get(loc["phase"], ("cuda_oom", ""))
    if category == "port_in_use":
        port = (re.search(r"\(\s*'[^']*',\s*(\d+)\)|addr='?tcp://[^'\s]*:(\d+)|port:\s*(\d+)|port\[(\d+)\]|:(\d{2,5})\b",
                          m.group(0)))
        if port:
            figures["port"] = int(next(g for g in port.groups() if g))
    if category == "driver_mismatch_or_no_driver" and kind != "no_platform":
        figures.pop("port", None)
    if category == "free_memory_below_request":
        for key in ("free_gib", "initial_free_gib"):  # old V0 wording printed bytes
            if isinstance(figures.get(key), (int, float)) and figures[key] > 1e6:
                figures[key] = round(figures[key] / 1024 ** 3, 3)
        if figures.get("free_gib") is not None and figures.get("free_gib") == figures.get("initial_free_gib"):
            return _with_action(_profiling_saw_nothing(norm, m, figures, loc))
    summary, fix = _shared_gpu(*_fix(category, figures, where, kind), figures)
    fix = fix[:1].upper() + fix[1:]
    confidence = "high" if tier == 2 else "medium"
    if category == "shm_too_small" and re.match(r"Bus\s+error", m.group(0), re.I):
        summary += " (a bus error: in containers almost always an undersized /dev/shm)"
        confidence = "medium"
    return _with_action(Diagnosis(category, summary, figures, fix, _line_at(norm, m.start(), m.end()), confidence,
                                  **loc))


def _first_rule(norm: str):
    """(tier, position, order, rule, match) of the rule that names the failure, or None: the earliest strong
    (tier 2) match, else the latest weak one; a collective's error yields to a /dev/shm or port detail near it."""
    matches = []
    for order, rule in enumerate(RULES):
        m = rule.pattern.search(norm)
        if m and not (rule.kind == "triton" and _NOT_CUDA_RE.search(norm)):
            matches.append((rule.tier, m.start(), order, rule, m))
    strong = sorted((x for x in matches if x[0] == 2), key=lambda x: (x[1], x[2]))
    weak = sorted((x for x in matches if x[0] == 1), key=lambda x: (-x[1], x[2]))
    chosen = strong[0] if strong else (weak[0] if weak else None)
    if chosen is not None and chosen[3].category == "nccl_error":
        # NCCL reports the failed system call in its own detail ("Last error: ... /dev/shm ..."): that is the cause.
        # So does HCCL (the collective's "function error" first, then why: its port was taken)
        detail = [x for x in strong if x[3].category in ("shm_too_small", "port_in_use") and abs(x[1] - chosen[1]) < 3000]
        chosen = detail[0] if detail else chosen
    return chosen


def _oom_figures(m: re.Match, tail: str, figures: dict) -> None:
    """The figures an out-of-memory message gives: what it tried to allocate, the GPU's total and free memory,
    this process's use and the other processes' on the GPU."""
    if m.groupdict().get("tried") is not None:
        figures["tried_to_allocate_gib"] = _gib(m.group("tried"), m.group("tried_unit"))
        figures.pop("tried", None)
    else:
        t = re.search(r"Tried\s+to\s+allocate\s+([\d.]+)\s*([KMG]iB)", tail, re.I)
        if t:
            figures["tried_to_allocate_gib"] = _gib(t.group(1), t.group(2))
    for detail in _OOM_DETAIL_RES:
        d = detail.search(tail)
        if d:
            figures["total_gib"] = _gib(d.group("total"), d.group("total_unit"))
            figures["free_gib"] = _gib(d.group("free"), d.group("free_unit"))
            figures["gpu_index"] = int(d.group("gpu"))
            break
    other = _OTHER_PROCESS_RE.search(tail)
    if other:
        figures["process_memory_gib"] = _gib(other.group(2), other.group(3))
    shared = [_gib(p.group(2), p.group(3)) for p in _OTHER_PROCESS_RE.finditer(tail)]
    if len(shared) > 1:
        figures["gpu_processes_gib"] = shared


def _profiling_saw_nothing(norm: str, m: re.Match, figures: dict, loc: dict) -> Diagnosis:
    """vLLM's profiling check with as much memory free after its profiling run as before: nothing used any (the
    device's free-memory query does not see the run's allocations, as on Intel XPU reusing the GPU worker), so no
    other process took memory; vLLM's words blame one either way."""
    free = _fmt(figures["free_gib"])
    return Diagnosis("unknown", f"vLLM's memory profiling saw the same free memory before and after its profiling run "
                     f"({free} GiB): the device does not report the memory the run used, no other process took any",
                     figures, "Upgrade vLLM (or the platform plugin) to one that profiles this device, or skip the "
                     "profiling with --kv-cache-memory-bytes set to the KV cache size to use; no "
                     "--gpu-memory-utilization value fixes this.", _line_at(norm, m.start(), m.end()), "medium", **loc)


# An error vLLM's model registry logged (its logger header names registry.py): the registry imports each model
# class in a subprocess and logs that subprocess's traceback when the import fails ("Error in inspecting model
# architecture", then "Model architectures [...] failed to be inspected"). Read from the raw log, as normalise()
# strips the header; weak evidence, used only when no rule matched.
_REGISTRY_LOG_RE = re.compile(r"^[^\n]*?\bERROR\s+\d{2}-\d{2}\s+[\d:.]+\s+\[?registry\.py:\d+\]\s?(?P<rest>[^\n]*)", re.M)
_REGISTRY_RULE = _Rule("model_not_supported", _REGISTRY_LOG_RE, tier=1, kind="registry")


def _raw(text) -> str:
    """The log as written, colours removed but every line's header kept."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    return _LOST_ESCAPE_RE.sub("", _ANSI_RE.sub("", str(text or "")))


# The OpenAI server's request handlers log a request's failure under their own module (entrypoints/openai/
# serving_chat.py, serving_completion.py, serving_embedding.py, serving_responses.py ...: "ERROR 02-11 08:25:49
# serving_chat.py:661] ...", logger.exception("Error in chat completion stream generator.")): those modules only run
# once the engine is up, so an error they log was raised serving a request. Read from the raw log (normalise() strips
# the header); used only where no frame or milestone placed the error.
_ENDPOINT_LOG_RE = re.compile(r"^[^\n]*?\bERROR\s+\d{2}-\d{2}\s+[\d:.]+\s+\[?serving_\w+\.py:\d+\][^\n]*", re.M)
_ENDPOINT_ERROR_RE = re.compile(r"Error\s+in\s+chat\s+completion\s+stream\s+generator|"
                                # an error line naming the request it failed on (its id: the OpenAI server's
                                # cmpl-/chatcmpl- ids, "for request <id>", "request_id=<id>")
                                r"^[^\n]*\b(?:Error|error|failed|Failed)\b[^\n]{0,200}?(?:\bfor\s+request\s+\S*\d|"
                                r"\brequest[_\s]id[=:\s]+\S*\d|\b(?:chat)?cmpl-[0-9a-f]{6,})", re.I | re.M)


def _endpoint_logged(text, norm: str) -> dict:
    """Serving evidence from the API server's request handlers: their ERROR log lines."""
    m = _ENDPOINT_LOG_RE.search(_raw(text)) or _ENDPOINT_ERROR_RE.search(norm)
    if not m:
        return {}
    return {"phase": "serving", "phase_confidence": "medium", "phase_evidence": m.group(0).strip()[:300]}


def _registry_error(raw: str, norm: str):
    """The registry's logged error (in `raw`, the log as _raw() gives it) as a weak rule match in `norm`."""
    m = _REGISTRY_LOG_RE.search(raw)
    if not m:
        return None
    rest = m.group("rest").strip()
    pos = max(0, norm.find(rest)) if rest else 0
    at = re.compile(re.escape(rest) if rest else r"^").search(norm, pos)
    return (1, pos, len(RULES), _REGISTRY_RULE, at) if at else None


# Start-up steps that run the model at its largest shapes, and how a log that stops inside one reads: OOM is the
# usual failure there. CUDA graph capture stopping is enough; the profiling run only without any error line after
# it (a worker that exits, a traceback cut before its error), as its first forward also compiles the model.
_STOPPED_IN = {
    "capturing_cuda_graphs": ("cuda_oom_after_kv", "graph_capture", "during CUDA graph capture, after the KV cache "
                              "was sized", False),
    "profiling": ("cuda_oom_weights", "profile_run", "in the memory-profiling run, after the weights loaded", True),
}


# A process that crashed or was killed rather than raised: no OOM guess from where the log stops (a segfault in
# graph capture or the encoder's profiling, the host's OOM killer).
_CRASH_RE = re.compile(r"Segfault\s+encountered|Segmentation\s+fault|SIGSEGV|SIGKILL|SIGABRT|core\s+dumped|"
                       r"killed\s+by\s+signal|signal\s+-?(?:9|11|6)\b|^\s*Killed\s*$|Fatal\s+Python\s+error",
                       re.I | re.M)


# When no rule knows an error's wording, the words of its message still say which kind of failure it is: vLLM and
# the libraries under it word each kind alike ("... is not supported for the current GPU", "Model architecture X is
# not supported", "max_num_seqs must be ..."). Each family is a subject and a refusal within one exception message;
# the first family whose both words the message has names the category, with low confidence. Request-time errors
# (a prompt longer than max_model_len, a request's multimodal input) are no deploy failure and stay `unknown`.
_REFUSAL = (r"(?:not\s+(?:yet\s+)?(?:supported|implemented|compatible|allowed|valid|recogni[sz]ed|registered)|unsupported|"
            r"incompatible|only\s+supports?|only\s+(?:be\s+)?(?:supported|available|allowed|valid)|does\s+not\s+support|"
            r"(?:isn't|is\s+not|are\s+not|aren't)\s+supported|(?:hasn't|has\s+not|haven't|have\s+not)\s+(?:been\s+)?"
            r"(?:yet\s+)?supported|cannot|can't|can\s+not|must|should|requires?|at\s+least|"
            r"at\s+most|minimum|exceeds?|(?:greater|larger|smaller|less|higher|lower)\s+than|too\s+(?:old|large|small|"
            r"many|few)|invalid|unknown|unrecogni[sz]ed|no\s+(?:vLLM\s+)?implementation|out\s+of\s+range|conflicts?|"
            r"mutually\s+exclusive|(?<!un)expected|is\s+not\s+equal\s+to|does\s+not\s+match|"
            r"(?:does\s+not|doesn't|cannot|could\s+not|can't)\s+recogni[sz]e|failed\s+to\s+be\s+(?:inspected|resolved)|"
            r"\bno\s+[\w-]+(?:\s+[\w-]+){0,3}\s+(?:was\s+)?found|"
            # vLLM's weight loader: the checkpoint has a part the model class lacks (AutoWeightsLoader)
            r"there\s+is\s+no\s+module\s+or\s+parameter\s+named)")
_REFUSAL_RE = re.compile(_REFUSAL, re.I)
_GPU_WORDS = (r"(?:compute\s+capabilit|CUDA\s+capabilit|\bcapability\s*[:=<>(]|\bsm_?\d{2,3}\b|\bSM\s?\d{2,3}\b|"
              r"CUDA_ARCH|\bCUDA\s*>=\s*\d|\b(?:Ampere|Hopper|Volta|Turing|Pascal|Blackwell|Maxwell|Kepler)\b|"
              r"\b(?:V100|T4|P40|P100|K80|A10G?|L4|GTX\s*\d{3,4}|RTX\s*\d{4})\b|"
              r"\b(?:this|current|your)\s+(?:GPU|device)s?\b|\bin\s+this\s+architecture\b|"
              # a GPU architecture by name (ROCm's gfx targets: "One of GPU archs of ['gfx1201'] is ... not supported")
              r"\bGPU\s+archs?\b|\bgfx\d{3,4}[a-z]?\b|"
              # another accelerator or platform as the limit ("... is not supported on XPU", "... for the ROCm platform")
              r"\b(?:on|for|with)\s+(?:the\s+)?(?:current\s+)?(?:NPUs?|XPUs?|HPUs?|TPUs?|ROCm|AMD\s+GPUs?|Ascend|"
              r"Gaudi\d?|MPS|Apple\s+silicon)\b)")
_MODEL_WORDS = (r"(?:\bmodel\s+(?:type|architecture|class|family)|\barchitectures?\b|\bmodel_type\b|\b\w+For(?:CausalLM|"
                r"ConditionalGeneration|SequenceClassification)\b|\bquantization\s+scheme|\bcheckpoint\s+format|"
                r"\bthis\s+model\b|\bthe\s+model\b|\bscheme\b|only\s+supports?\s+versions?)")
# the parallel layout as the engine's config names it inside (ParallelConfig, parallel_state)
_LAYOUT_NAMES = frozenset(("world_size", "tensor_model_parallel_size", "pipeline_model_parallel_size"))
_ENGINE_ARG_RE = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)+\b")
_KV_WORDS = r"(?:\bKV[\s_-]?cache|\bkv_cache|cache\s+blocks?|\b(?:num_)?(?:gpu_)?blocks\b|\bkv_budget)"
_LENGTH_WORDS = (r"(?:max[\s_-](?:model|seq)[\s_-]len|maximum\s+(?:model|sequence|context)\s+length|context\s+length|"
                 r"\bsequence\s+length|\btokens?\b)")
_FAMILIES = (
    # the KV cache too small for one request at the length asked for: the cache, the length, and a shortfall in one
    # message ("max_model_len (32768) is larger than the tokens the KV cache can hold (20000)")
    ("kv_cache_too_small", re.compile(
        rf"(?=[\s\S]*{_KV_WORDS})(?=[\s\S]*{_LENGTH_WORDS})[\s\S]*(?:larger|greater|more|longer)\s+than|"
        rf"(?=[\s\S]*{_KV_WORDS})(?=[\s\S]*{_LENGTH_WORDS})[\s\S]*(?:exceeds?|cannot\s+(?:hold|fit|store|serve)|"
        r"too\s+small|not\s+enough|insufficient)", re.I), None),
    # no memory at all for the cache: the cache, and none (or less than none) left for it
    ("no_kv_memory", re.compile(_KV_WORDS, re.I), re.compile(
        r"\bno\s+(?:\w+\s+){0,2}(?:memory|space|room)\b|not\s+enough\s+(?:\w+\s+){0,2}memory|insufficient\s+(?:\w+\s+){0,2}"
        r"memory|memory\s+(?:is\s+)?(?:insufficient|exhausted)|negative|(?:=|:|\bis)\s*-\d|(?:=|:|\bis)\s*0\b(?!\.)|"
        r"\bzero\b", re.I)),
    # less memory free at start than the engine asks for (another process holds the device)
    ("free_memory_below_request", re.compile(r"\bfree\s+(?:GPU\s+|device\s+|NPU\s+|XPU\s+)?memory", re.I),
     re.compile(r"(?:less|lower|smaller)\s+than|\bbelow\b|memory[_\s-]utilization|desired|requested", re.I)),
    # the shared-memory file system (not a kernel's on-chip shared memory, whose limit is the GPU's)
    ("shm_too_small", re.compile(r"/dev/shm|\bshm\b|shared\s+memory\s+(?:segment|object|file)", re.I), re.compile(
        r"no\s+space|too\s+small|insufficient|not\s+enough|exceed|\bBus\s+error|failed|cannot|unable", re.I)),
    ("trust_remote_code_required", re.compile(r"trust[_-]remote[_-]code(?!'?\s*[=:]\s*False)", re.I), None),
    ("model_not_found_or_auth", re.compile(
        r"\b40[13]\b[^\n]{0,80}?(?:Client\s+Error|Unauthori[sz]ed|Forbidden)[^\n]{0,200}?(?:huggingface|hf\.co|hf-mirror|"
        r"modelscope|/resolve/|/api/models)|\bgated\s+(?:repo|model)|"
        r"Access\s+to\s+model\s+\S+\s+is\s+restricted|Repository\s+Not\s+Found|not\s+a\s+valid\s+model\s+identifier|"
        r"\b(?:model|repo(?:sitory)?|checkpoint|adapter)\b[^\n]{0,160}?(?:does\s+not\s+exist|not\s+found|"
        r"could\s+not\s+be\s+found)|\bNo\s+(?:model|adapter|checkpoint)\s+(?:\w+\s+)?found|"
        # the hub out of reach (offline, DNS, a proxy) while the model is fetched
        r"(?:huggingface\.co|hf\.co|hf-mirror|modelscope)[^\n]{0,240}?(?:Max\s+retries|Failed\s+to\s+(?:resolve|establish)|"
        r"Name\s+or\s+service|Temporary\s+failure\s+in\s+name|timed?\s*out|Connection(?:Error|\s+refused|\s+reset)|"
        r"offline)|(?:Max\s+retries|NameResolutionError|ConnectTimeout|Failed\s+to\s+resolve)[^\n]{0,240}?"
        r"(?:huggingface\.co|hf\.co|hf-mirror|modelscope)|LocalEntryNotFound|OfflineModeIsEnabled|"
        # the model's own files missing where they were looked for
        r"(?:No\s+such\s+file\s+or\s+directory|does\s+not\s+exist|not\s+found)[^\n]{0,200}?(?:config\.json|"
        r"\.safetensors|pytorch_model|tokenizer(?:_config)?\.json|snapshots/|/models--)|"
        # the hubs' client libraries refusing a name or a download (huggingface_hub's and modelscope's exceptions)
        r"\b(?:HFValidationError|RepositoryNotFoundError|GatedRepoError|RevisionNotFoundError|EntryNotFoundError|"
        r"NotExistError)\b|\bRepo\s+id\s+must\b|Invalid\s+repository\s+ID|is\s+not\s+a\s+local\s+folder|"
        r"No\s+supported\s+config\s+format\s+found",
        re.I), None),
    ("tp_not_divisible",
     re.compile(r"tensor[\s_-]parallel|\btp(?:_size)?\b|\bworld[\s_]size|_per_partition|\bper\s+(?:rank|GPU)", re.I),
     re.compile(r"(?:not|be)\s+(?:evenly\s+)?divisible\s+by|does\s+not\s+divide|not\s+aligned|"
                r"too\s+(?:large|big|high)\s+(?:a\s+)?tensor[\s_-]parallel", re.I)),
    # a model's (or a device's) own limit on the context ("do not support max_model_len greater than 32768")
    ("max_len_over_model_limit",
     re.compile(r"max[\s_-]model[\s_-]len|maximum\s+(?:model|context|sequence)\s+length", re.I),
     re.compile(r"(?:greater|larger|more|longer)\s+than\s+(?:\d|the\s+(?:\w+\s+){0,2}(?:max|maximum|limit|derived|"
                r"model'?s|allowed))|exceeds?\s+(?:the\s+)?(?:\w+\s+)?(?:limit|maximum|\d)", re.I)),
    # the command line refused by vLLM's parser, or an argument the engine's classes do not take (a wrapper calling
    # another of vLLM's functions with a keyword it lacks is a version mismatch between the two: no category)
    ("config_rejected", re.compile(r"^[\w.-]+(?:\s+[\w-]+)?:\s+error:\s+(?:unrecognized\s+arguments|argument\s+-|"
                                   r"invalid\s+choice)|"
                                   r"\b(?:EngineArgs|AsyncEngineArgs|LLM|\w+Config)(?:\.__init__)?\(\)\s+got\s+an\s+"
                                   r"unexpected\s+keyword\s+argument", re.I), None),
    ("unsupported_dtype_or_gpu", re.compile(_GPU_WORDS, re.I), _REFUSAL_RE),
    # a kernel built without this device's architecture; a device type this torch was not built for
    ("unsupported_dtype_or_gpu", re.compile(
        r"invalid\s+device\s+function|hipErrorNoBinaryForGpu|no\s+binary\s+for\s+(?:the\s+)?GPU|no\s+kernel\s+image|"
        r"not\s+compatible\s+with\s+the\s+current\s+PyTorch\s+installation|not\s+linked\s+with\s+support\s+for|"
        r"\bsoc_?version\b[^\n]{0,80}?(?:not\s+support|unsupported|can\s*not)", re.I), None),
    ("model_not_supported", re.compile(_MODEL_WORDS, re.I), _REFUSAL_RE),
    # a model's config this vLLM reads without a field it expects, or a class it has no implementation of
    ("model_not_supported", re.compile(r"'\w+Config'\s+object\s+has\s+no\s+attribute|"
                                       r"\bhas\s+no\s+vLLM\s+implementation", re.I), None),
    # a dtype refused (by a quantization method, a kernel, the device)
    ("unsupported_dtype_or_gpu",
     re.compile(r"\b(?:torch\.)?(?:bfloat16|float16|bf16|fp16|float32|fp32)\b|\bDT_[A-Z0-9_]+\b", re.I), _REFUSAL_RE),
    # the device's memory exhausted in another accelerator's or library's words ("HPU out of memory", "NPU memory is
    # insufficient", "Failed to allocate device memory"): named by the phase the log shows, as any OOM
    ("cuda_oom", re.compile(
        r"\b(?:GPU|CUDA|NPU|XPU|HPU|HIP|MPS|device|VRAM|HBM)\b[^\n]{0,60}?(?:out\s+of\s+memory|\bOOM\b|"
        r"memory\s+(?:is\s+)?(?:exhausted|insufficient|full)|insufficient\s+memory)|"
        r"(?:out\s+of|insufficient|not\s+enough)\s+(?:GPU|device|NPU|XPU|HPU|VRAM|HBM)\s+memory|"
        r"failed\s+to\s+allocate\s+(?:\d+\s+\w+\s+(?:of\s+)?)?(?:GPU|device|NPU|XPU|HPU)\s+memory|"
        # Ascend's runtime: "alloc device memory failed, runtime result = 207001"
        r"alloc(?:ate)?\s+device\s+memory\s+failed|"
        # XLA's (TPU): "RESOURCE_EXHAUSTED: ... Ran out of memory in memory space hbm"; not a kernel's on-chip scratch
        # (vmem), whose limit is set in the kernel's code
        r"RESOURCE_EXHAUSTED(?![^\n]{0,200}?\bvmem\b)|Ran\s+out\s+of\s+memory\s+in\s+memory\s+space\s+hbm", re.I), None),
    ("port_in_use", re.compile(r"failed\s+to\s+(?:listen|bind)\b|could\s+not\s+bind|address\s+(?:is\s+)?already\s+in\s+"
                               r"use|EADDRINUSE|port\s+\d+\s+is\s+(?:already\s+)?in\s+use", re.I), None),
    ("nccl_error", re.compile(r"(?:\b(?:NCCL|RCCL|HCCL|oneCCL|XCCL|BKCL|Gloo)\b|(?-i:\bHccl[A-Z]\w*))[^\n]{0,120}?"
                              r"(?:error|fail|time[ds]?\s*out|abort)", re.I), None),
    # torch.distributed's rendezvous and process groups (its store, its sockets, a collective's watchdog)
    ("nccl_error", re.compile(r"\b(?:DistStoreError|DistNetworkError|DistBackendError|TCPStore|c10d|ProcessGroup\w*|"
                              r"connectFullMesh|WorkNCCL|collective\s+operation)\b", re.I),
     re.compile(r"time[ds]?\s*out|fail|error|abort|refused|could\s+not\s+connect", re.I)),
    ("driver_mismatch_or_no_driver", re.compile(
        r"(?:NVIDIA|CUDA|GPU)\s+driver[^\n]{0,100}?(?:not\s+found|too\s+old|mismatch|failed|not\s+loaded|unavailable|"
        r"insufficient|missing)|\bno\s+(?:NVIDIA\s+|CUDA\s+)?(?:GPUs?|devices?)\s+(?:were\s+)?(?:found|detected|available)|"
        # the CUDA libraries a wheel links against, not found in the container or host
        r"\blib(?:cuda|cudart|nvidia-ml|cublas\w*|nvrtc|cupti)[\w-]*\.so[\d.]*[^\n]{0,80}?(?:cannot\s+open|No\s+such\s+file|"
        r"not\s+found)|\bno\s+CUDA-capable\s+device|CUDA_ERROR_NO_DEVICE|CUDA\s+driver\s+version\s+is\s+insufficient|"
        r"\bNVML\b[^\n]{0,80}?(?:fail|not\s+found|error)|"
        # torch or vLLM finding no device to run on
        r"No\s+CUDA\s+GPUs\s+are\s+available|Failed\s+to\s+infer\s+device\s+type|"
        r"cudaGetDeviceCount|forward\s+compatibility\s+was\s+attempted",
        re.I), None),
    # a choice among vLLM's own parts refused (an attention backend, Ray's placement group; a quantization method
    # only in vLLM's own wording, which lists its methods: a rule)
    ("config_rejected", re.compile(r"\b(?:attention\s+backend|placement\s+group|load[_\s-]format|"
                                   r"kv[_\s-]cache[_\s-]dtype|speculative\s+(?:model|config|method))\b", re.I),
     _REFUSAL_RE),
)
# What a family's message says, and the fix: the message itself names the detail no rule knows.
_FAMILY_FIXES = {
    "trust_remote_code_required": ("The model needs trust_remote_code", _fix_trust_remote_code_required({}, "", "")[1]),
    "model_not_found_or_auth": ("The model could not be found or fetched", _fix_model_not_found_or_auth({}, "", "")[1]),
    "tp_not_divisible": ("A dimension does not split evenly over the tensor-parallel ranks",
                         "Pick a --tensor-parallel-size that divides the dimension the message names (heads, KV "
                         "heads, vocabulary, a quantized layer's groups), or use pipeline parallelism across GPUs."),
    "unsupported_dtype_or_gpu": ("This GPU lacks what the engine asked for",
                                 "Serve on a GPU that has what the message names (its compute capability or "
                                 "architecture), or drop the dtype, kernel, quantization or backend it names for one "
                                 "this GPU has (`vllm-deploy gpus` shows each GPU's capability)."),
    "model_not_supported": ("This vLLM cannot serve the model as asked",
                            "Use a vLLM (and the transformers it pins) that supports what the message names, or a "
                            "checkpoint, architecture or quantization scheme this vLLM lists as supported."),
    "port_in_use": ("A port the engine needs is taken", _fix_port_in_use({}, "", "")[1]),
    "max_len_over_model_limit": ("The context length asked for is over the model's or the device's limit",
                                 "Lower --max-model-len to the limit the message names (or drop it: vLLM then uses "
                                 "the model's own)."),
    "nccl_error": ("A collective communication library failed", _fix_nccl_error({}, "", "")[1]),
    "driver_mismatch_or_no_driver": ("The engine finds no usable GPU or driver",
                                     _fix_driver_mismatch_or_no_driver({}, "", "")[1]),
    "kv_cache_too_small": ("The KV cache cannot hold one request at the context length asked for",
                           _fix_kv_cache_too_small({}, "", "")[1]),
    "no_kv_memory": ("No memory is left for the KV cache", _fix_no_kv_memory({}, "", "")[1]),
    "free_memory_below_request": ("Less device memory is free than the engine asks for",
                                  _fix_free_memory_below_request({}, "", "")[1]),
    "shm_too_small": ("Shared memory (/dev/shm) is too small", _fix_shm_too_small({}, "", "")[1]),
    "config_rejected": ("vLLM refused its configuration",
                        "Change or drop the flag the message names (vLLM checks this at start; `vllm serve --help` "
                        "lists this version's flags and their values)."),
}
# Where each family's failure happens when the log does not say: start-up's checks (a collective's set-up included)
_FAMILY_DEFAULT_PHASE = dict.fromkeys(("trust_remote_code_required", "model_not_found_or_auth", "model_not_supported",
                                       "config_rejected", "driver_mismatch_or_no_driver", "port_in_use", "nccl_error",
                                       "max_len_over_model_limit", "free_memory_below_request", "shm_too_small"),
                                      "init") | dict.fromkeys(("kv_cache_too_small", "no_kv_memory"), "kv_cache_allocation")


@functools.lru_cache(maxsize=1)
def _engine_arg_names() -> frozenset:
    """The engine's own argument names (snake_case, of two words or more) from the pinned vLLM's argument dump."""
    try:
        from vllm_deploy import vllm_args
        names = set()
        for package, version in vllm_args.available():
            names.update(o["dest"] for o in vllm_args.load(package, version).get("options", ()) if "_" in o["dest"])
        return frozenset(names)
    except Exception:  # noqa: BLE001 - without the dump, the flag spelling (--max-model-len) still counts
        return frozenset()


@functools.lru_cache(maxsize=1)
def _spelled_arg_re() -> re.Pattern:
    """The engine's arguments of three words or more as prose spells them ("tensor parallel size"), and the features
    of two words or more that an --enable-/--disable- argument switches ("prefix caching", "sliding window")."""
    names = _engine_arg_names()
    features = {n.split("_", 1)[1] for n in names if n.startswith(("enable_", "disable_")) and n.count("_") >= 2}
    spelled = sorted((n for n in names | features if n.count("_") >= 2 or n in features), key=len, reverse=True)
    return re.compile(r"\b(?:" + "|".join(n.replace("_", r"[\s_-]") for n in spelled) + r")\b", re.I) if spelled \
        else re.compile(r"(?!)")


# the parallel layouts the engine's arguments set, in prose ("Pipeline parallelism is not supported yet with ...")
_PARALLELISM_RE = re.compile(r"\b(?:tensor|pipeline|data|expert|context|sequence)[\s_-]+parallel(?:ism)?\b|"
                             # and by their abbreviations, upper case ("BitAndBytes quantization with TP or PP is not
                             # supported yet", blind20 058)
                             r"(?-i:\b(?:TP|PP|DP|EP)\b)", re.I)


def _names_an_engine_arg(message: str) -> bool:
    """The message names one of the engine's arguments: --max-model-len, max_model_len, "max model len" or a parallel
    layout ("pipeline parallelism")."""
    if _ENGINE_ARG_RE.search(message) or _PARALLELISM_RE.search(message):
        return True
    words = set(re.findall(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b", message))
    return bool(words & (_engine_arg_names() | _LAYOUT_NAMES)) or bool(_spelled_arg_re().search(message)) \
        or bool(_VLLM_ENV_RE.search(message))


# one of vLLM's environment variables, set ("VLLM_USE_V1=1 is not supported with device type=cpu"): the engine's
# configuration as much as an argument is
_VLLM_ENV_RE = re.compile(r"\bVLLM_[A-Z0-9_]{3,}\b")


_LOG_RECORD_RE = re.compile(r"\b(?:INFO|WARNING|WARN|DEBUG)\b|with\s+config:|non-default\s+args")
_LAST_LINE_RE = re.compile(r"^[^\n]*\S[^\n]*(?=\s*\Z)", re.M)
_NEW_RECORD_RE = re.compile(r"Traceback|File\s+\"|During\s+handling|The\s+above\s+exception|"
                            r"(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\b|\^|INFO|WARNING|DEBUG|ERROR|\[|\(")


def _message_of(norm: str, m: re.Match) -> str:
    """An exception's message: its line, and for pydantic's wrapper ("1 validation error for ModelConfig") the
    lines it wraps."""
    line = m.group(0).strip()
    following = [x.strip() for x in norm[m.end(): m.end() + 800].split("\n")[1:4]]
    if re.search(r"validation\s+errors?\s+for\s+\w+$", line):
        line += " " + " ".join(following[:2])
    elif following and following[0] and not _NEW_RECORD_RE.match(following[0]):
        line += " " + following[0]   # a message that goes on on the next line (vLLM's hints, a wrapped path)
    return line[:600]


# one of vLLM's functions called with a keyword it does not take (its engine arguments' names among them): code and
# versions out of step inside the engine or a wrapper, not a configuration vLLM refused
_KEYWORD_MISMATCH_RE = re.compile(r"\bgot\s+an\s+unexpected\s+keyword\s+argument\b", re.I)


def _family(norm: str, exc: list, last_line: bool = True) -> tuple[str, re.Match, str] | None:
    """(category, exception line, message) of the first exception whose message reads as a known kind of failure;
    the log's last line too, where a message stands on a line of its own (a bare AssertionError's)."""
    last = _LAST_LINE_RE.search(norm)
    last = None if last is None or not last_line or _LOG_RECORD_RE.search(last.group(0)) else last
    for m in exc + ([last] if last and not any(x.start() <= last.start() < x.end() + 1 for x in exc) else []):
        message = _message_of(norm, m)
        if _PROMPT_TOO_LONG_RE.search(message) or _REQUEST_INPUT_RE.search(message) or \
                message.startswith("Exception raised from"):   # a C++ frame's location (c10's), not a message
            continue
        for category, words, refusal in _FAMILIES:
            if words.search(message) and (refusal is None or refusal.search(message)):
                return category, m, message
        if _REFUSAL_RE.search(message) and _names_an_engine_arg(message) and not _KEYWORD_MISMATCH_RE.search(message):
            return "config_rejected", m, message
    return None


def _family_diagnosis(norm: str, exc: list, milestones: list, figures: dict,
                      last_line: bool = True) -> Diagnosis | None:
    """A diagnosis from an unknown wording's family (low confidence), placed as an unknown error is."""
    found = _family(norm, exc, last_line)
    if not found:
        return None
    category, m, message = found
    loc = _locate(norm, m.start(), m.end(), "unknown", "", milestones)
    if loc["phase"] == "unknown":
        loc.update(_endpoint_logged(norm, norm))
    figures = dict(figures, message=re.sub(r"^(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\s*[:(]\s*", "", message)[:300])
    if category == "cuda_oom":
        # an OOM is named by the phase the log shows, never guessed from where it does not (as the rules' OOMs)
        category, where = _OOM_CATEGORY.get(loc["phase"], ("cuda_oom", ""))
        what, fix = _fix(category, figures, where)
        what = "The device ran out of memory" + (f" in {where}" if where else "")
    else:
        if loc["phase"] == "unknown" and (category in _FAMILY_DEFAULT_PHASE or loc["phase_reached"] == "none"):
            # the category's usual phase; else, with no start-up milestone before the error, init (as for `unknown`)
            loc.update(phase=_FAMILY_DEFAULT_PHASE.get(category, "init"), phase_confidence="low",
                       phase_evidence=_line_at(norm, m.start(), m.end()))
        what, fix = _FAMILY_FIXES[category]
    return _with_action(Diagnosis(
        category, f"{what}: {figures['message'][:200]} (no rule knows this wording; read from its words)", figures,
        fix[:1].upper() + fix[1:], _line_at(norm, m.start(), m.end()), "low", **loc))


# A launcher's or wrapper's words for an engine that never came up (KServe's "Failed to start model server", Triton's
# "Failed to start engine", Python's "Error while finding module specification for 'vllm...'")
_START_FAILED_RE = re.compile(r"\bFailed\s+to\s+(?:start|initiali[sz]e|launch)\b|Error\s+while\s+finding\s+module\s+"
                              r"specification|\bNo\s+module\s+named\b", re.I)


def _no_known_failure(norm: str, milestones: list, last_line_is_message: bool = True) -> Diagnosis:
    """No rule matched: a log that stops in graph capture or the profiling run, else `unknown` with the first
    error line."""
    reached, after, _, milestone_pos = _milestone_before(milestones, len(norm))
    figures = _context_figures(norm, len(norm))
    exc = [m for m in _EXCEPTION_LINE_RE.finditer(norm) if not _WRAPPER_RE.search(m.group(0))]
    if reached in _STOPPED_IN and not _CRASH_RE.search(norm, milestone_pos):
        category, phase, what, quiet = _STOPPED_IN[reached]
        if not (quiet and any(m.start() > milestone_pos for m in exc)):
            summary, fix = _fix(category, figures, _OOM_CATEGORY[phase][1])
            evidence = _line_at(norm, milestone_pos, milestone_pos)
            return _with_action(Diagnosis(
                category, f"The log stops {what} (no error text in the excerpt; OOM is the usual failure there)",
                figures, fix[:1].upper() + fix[1:], evidence, "low", phase=phase, phase_confidence="medium",
                phase_evidence=evidence, phase_reached=reached))
    cut = _cut_traceback(norm, exc, reached)
    if cut and cut.category != "unknown":
        return cut
    if not exc and reached in ("none", "engine_configured") and _odd_tp(figures.get("tp_size")):
        return _odd_tp_guess(norm, figures, reached)
    # an error line above a second traceback cut short (a wrapper's, a worker's) is still read by its family
    family = _family_diagnosis(norm, exc, milestones, figures, last_line_is_message)
    if family:
        return family
    if cut:
        return cut
    line = exc[0].group(0).strip()[:300] if exc else None
    loc = _locate(norm, exc[0].start(), exc[0].end(), "unknown", "", milestones) if exc else \
        _located_without_error(norm, reached, after, milestone_pos)
    start_failed = None if exc else _START_FAILED_RE.search(norm)
    if not exc and (too_long := _PROMPT_TOO_LONG_RE.search(norm)):
        # a request's prompt checked against max_model_len, its ValueError quoted inside a sentence (blind20 103, 114):
        # no exception line, but the check only runs when a request arrives
        loc.update(phase="serving", phase_confidence="medium",
                   phase_evidence=_line_at(norm, too_long.start(), too_long.end()))
    if (exc or start_failed) and loc["phase"] == "unknown" and loc["phase_reached"] == "none":
        # an error, and before it not one of the milestones vLLM logs as it starts (the engine's config line, weights
        # loaded, ...) nor a serving line: in a service's journal, the engine had not got past start-up's first steps.
        # So with no exception line, where a launcher or wrapper says the engine or its server failed to start
        first = exc[0] if exc else start_failed
        loc.update(phase="init", phase_confidence="low", phase_evidence=_line_at(norm, first.start(), first.end()))
    where = f"; the log reached: {loc['phase_reached'].replace('_', ' ')}" if loc["phase_reached"] != "none" else ""
    where += f"; failed in: {loc['phase'].replace('_', ' ')}" if loc["phase"] != "unknown" else ""
    summary = (f"No known vLLM failure found; first error: {line}" if line
               else "No known vLLM failure found in the log") + where
    return _with_action(Diagnosis("unknown", summary, figures,
                                  "Read the first traceback in the full log; rerun with VLLM_LOGGING_LEVEL=DEBUG "
                                  "(and CUDA_LAUNCH_BLOCKING=1 for a CUDA error).", line, "low", **loc))


def _located_without_error(norm: str, reached: str, after, milestone_pos: int) -> dict:
    """Where a log without any error line stops: the traceback frames at its end (a notebook's, whose layout the
    cut-traceback reading does not take), else the last milestone (low)."""
    phase, frame, _ = _frames_near(norm, len(norm), len(norm))
    if phase:
        return {"phase_reached": reached, "phase": phase, "phase_confidence": "low", "phase_evidence": frame}
    return {"phase_reached": reached, "phase": after or "unknown", "phase_confidence": "low" if after else "none",
            "phase_evidence": _line_at(norm, milestone_pos, milestone_pos) if after else None}


def _odd_tp(tp) -> bool:
    """A tensor-parallel size no usual head count divides (3, 5, 6, 7, ...: heads come in multiples of 8)."""
    return isinstance(tp, int) and tp > 2 and tp & (tp - 1) != 0


def _odd_tp_guess(norm: str, figures: dict, reached: str) -> Diagnosis:
    """A log that stops at start-up, before any error line, asking for such a tensor-parallel size: vLLM's
    divisibility check of the attention heads (ModelConfig.verify_with_parallel_config) fails first there."""
    summary, fix = _fix("tp_not_divisible", figures)
    m = dict(_CONTEXT_FIGURES)["tp_size"].search(norm)
    evidence = _line_at(norm, m.start(), m.end()) if m else None
    return _with_action(Diagnosis(
        "tp_not_divisible", f"The log stops at start-up, before its error line, with tensor-parallel size "
        f"{figures['tp_size']}, which the model's attention heads are seldom divisible by (a guess)",
        figures, fix[:1].upper() + fix[1:], evidence, "low", phase="init", phase_confidence="low",
        phase_evidence=evidence, phase_reached=reached))


_FILE_FRAME_RE = re.compile(r'^[ \t]*File\s+"(?P<path>[^"\n]*)",\s+line\s+\d+,\s+in\s+(?P<func>\S+)', re.M)
# Innermost frames inside a collective or a communicator, or forming the process groups (V0/V1 workers'
# init_worker_distributed_environment, parallel_state's): what fails there is the communication itself.
_COMM_FRAME_RE = re.compile(r"distributed_c10d\.py|pynccl|device_communicators|ProcessGroupNCCL|"
                            r"init_worker_distributed_environment|init_distributed_environment|"
                            r"initialize_model_parallel|ensure_model_parallel_initialized", re.I)
# Frames that read the checkpoint (a wrong weight name fails here, not only memory)
_READ_WEIGHTS_RE = re.compile(r"load_weights|weight_loader|weights_iterator", re.I)
# Where a traceback cut before its error line most often ends in an out-of-memory error: creating the
# model's layers (weights allocated), the profiling run, the KV-cache allocation, graph capture, sampler warm-up.
_CUT_OOM = {"model_loading": "cuda_oom_weights", "profile_run": "cuda_oom_weights",
            "kv_cache_allocation": "cuda_oom_after_kv", "graph_capture": "cuda_oom_after_kv",
            "sampler_warmup": "cuda_oom_after_kv"}


def _cut_traceback(norm: str, exc: list, reached: str) -> Diagnosis | None:
    """A log that ends inside a traceback, before its error line (an excerpt cut short): the frames say where
    the engine was; the failure is guessed (low confidence) only where one failure is the usual one."""
    frames = list(_FILE_FRAME_RE.finditer(norm))
    if not frames or any(m.start() > frames[-1].start() for m in exc):
        return None
    if len([line for line in norm[frames[-1].end():].splitlines()[1:] if line.strip()]) > 4:
        return None   # more than the frame's source and caret lines follows: not a traceback cut short
    tb = _traceback_start(norm, norm.rfind("Traceback (most recent call last)", 0, frames[-1].start()))
    trace = norm[tb if tb != -1 and frames[-1].start() - tb < 30000 else max(0, frames[-1].start() - 6000):]
    joined = "\n".join(m.group(0) for m in _FRAME_LINE_RE.finditer(trace))
    phase, evidence = None, None
    for name, pattern in _FRAME_PHASES:
        m = pattern.search(joined)
        if m:
            phase, evidence = name, _line_at(joined, m.start(), m.end())
            break
    innermost = [m.group("path") + " " + m.group("func") for m in frames[-3:]]
    figures = _context_figures(norm, len(norm))
    loc = {"phase": phase or "unknown", "phase_confidence": "medium" if phase else "none",
           "phase_evidence": evidence, "phase_reached": reached}
    where = (phase or "").replace("_", " ")
    if any(_COMM_FRAME_RE.search(f) for f in innermost):
        category, kind, what = "nccl_error", _nccl_kind(joined), "in a collective communication call (NCCL/Gloo)"
    elif phase in _CUT_OOM and not (phase == "model_loading" and _READ_WEIGHTS_RE.search(joined)):
        category, kind = _CUT_OOM[phase], ""
        what = f"in {where} (OOM is the usual failure there)"
        where = _OOM_CATEGORY[phase][1]
    elif phase:
        return _with_action(Diagnosis(
            "unknown", f"No known vLLM failure found; the log stops inside a traceback before its error line; "
            f"failed in: {where}", figures, "Collect the whole log: the excerpt ends before the error line (journalctl "
            "-u UNIT -b, or docker logs CONTAINER); rerun with VLLM_LOGGING_LEVEL=DEBUG.",
            _line_at(norm, frames[-1].start(), frames[-1].end()), "low", **loc))
    else:
        return None
    summary, fix = _fix(category, figures, where, kind)
    return _with_action(Diagnosis(
        category, f"The log stops inside a traceback {what}, before its error line (no error text in the excerpt)",
        figures, fix[:1].upper() + fix[1:], _line_at(norm, frames[-1].start(), frames[-1].end()), "low", **loc))


def _with_action(d: Diagnosis) -> Diagnosis:
    act = action_for(d.category)
    d.action, d.action_text = act["action"], act["text"]
    return d


def _nccl_kind(context: str) -> str:
    """Which NCCL failure, from the text around the error: its fix differs."""
    for kind, pattern in (
            ("p2p", r"peer\s+access|P2PStatus|P2P\s+is\s+not\s+supported"),
            ("custom_allreduce", r"custom_all_reduce|custom\s+all-?reduce|Cuda\s+failure\s+'invalid\s+argument'"),
            ("timeout", r"Watchdog\s+caught\s+collective\s+operation\s+timeout|time[ds]?\s*out|watchdog\s+got\s+stuck|"
                        r"did\s+not\s+send\s+the\s+data\s+in\s+time"),
            ("system", r"unhandled\s+system\s+error|ncclSystemError")):
        if re.search(pattern, context, re.I):
            return kind
    return ""
