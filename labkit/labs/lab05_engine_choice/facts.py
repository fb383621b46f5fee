"""Lab 05's cited facts: the published comparisons, the engineering cost of each engine, and the
cost-per-token arithmetic. Every value comes from ``data/reference/published-numbers.csv``.

A ``Published`` row keeps the number as the lab uses it (``value``) next to the citation it came
from; ``tests/labs/test_lab05.py`` checks that each number appears, digit for digit, in the
cited row, so the table cannot drift from its source.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.labs.common.references import Citation, all_citations


def find(claim_contains: str, value_contains: str = "") -> Citation:
    """The one row whose claim contains ``claim_contains`` and value contains ``value_contains``
    (two rows may share a claim, e.g. one TRT-LLM table at two versions)."""
    hits = [c for c in all_citations()
            if claim_contains.lower() in c.claim.lower() and value_contains in c.value]
    if len(hits) != 1:
        raise KeyError(f"expected one reference row for {claim_contains!r} / {value_contains!r}, found {len(hits)}")
    return hits[0]


def lookup(source: str) -> Citation:
    """A reason's ``source``: ``"claim words"`` or ``"claim words @ value words"``."""
    claim, _, value = source.partition(" @ ")
    return find(claim, value)


@dataclass(frozen=True)
class Published:
    """One published measurement: engine, version, model, hardware, metric, value, source."""

    engine: str
    version: str
    model: str
    hardware: str
    metric: str
    value: float
    shown: str             # the value as the source writes it (must appear in the citation)
    claim: str             # the citation's claim words (``find``)
    value_key: str = ""    # disambiguates rows that share a claim
    num_gpus: int = 1
    output_tokens_only: bool = True    # False: the source counts input + output tokens

    @property
    def citation(self) -> Citation:
        return find(self.claim, self.value_key)


_TRT_8B = "TRT-LLM Llama-3.1-8B FP8 TP1 128/128 H200/H100"
_OSS = "gpt-oss-120b H100 total tok/s"
_QWEN = "qwen3-8b H100 concurrency 4 TTFT"

PUBLISHED: tuple[Published, ...] = (
    Published("TensorRT-LLM", "v0.17", "Llama-3.1-8B FP8, 128 in / 128 out", "1× H100", "throughput (tok/s)",
              28837, "28,837", _TRT_8B, "v0.17"),
    Published("TensorRT-LLM", "v0.17", "Llama-3.1-8B FP8, 128 in / 128 out", "1× H200", "throughput (tok/s)",
              29526, "29,526", _TRT_8B, "v0.17"),
    Published("TensorRT-LLM", "v1.0", "Llama-3.1-8B FP8, 128 in / 128 out", "1× H100", "throughput (tok/s)",
              28312, "28,312", _TRT_8B, "v1.0"),
    Published("vLLM", "0.10.2", "gpt-oss-120b, default settings", "H100 (count taken as 1)", "total throughput (tok/s)",
              6095, "6,095", _OSS, output_tokens_only=False),
    Published("TensorRT-LLM", "1.0.0", "gpt-oss-120b, default settings", "H100 (count taken as 1)", "total throughput (tok/s)",
              2140, "2,140", _OSS, output_tokens_only=False),
    Published("SGLang", "0.5.3rc0", "gpt-oss-120b, default settings", "H100 (count taken as 1)", "total throughput (tok/s)",
              1814, "1,814", _OSS, output_tokens_only=False),
    Published("SGLang", "(GPUStack lab)", "Qwen3-8B, concurrency 4", "1× H100", "TTFT (ms)", 27.7, "27.7", _QWEN),
    Published("TensorRT-LLM", "(GPUStack lab)", "Qwen3-8B, concurrency 4", "1× H100", "TTFT (ms)", 51.6, "51.6", _QWEN),
    Published("vLLM", "(GPUStack lab)", "Qwen3-8B, concurrency 4", "1× H100", "TTFT (ms)", 64.0, "64.0", _QWEN),
    Published("vLLM", "v0.6.0 vs v0.5.3", "Llama 8B", "1× H100", "throughput gain (×)", 2.7, "2.7x",
              "vLLM v0.6.0 vs v0.5.3 Llama 8B"),
    Published("vLLM", "V1 vs V0", "(blog)", "—", "throughput gain (×)", 1.7, "1.7x", "vLLM V1 vs V0 throughput"),
    Published("LMDeploy", "0.4.0", "Llama-3-8B, 100 users", "1× A100-80GB", "throughput (tok/s)", 4000, "4000",
              "BentoML Llama-3-8B A100-80GB"),
)


def throughput_rows() -> list[Published]:
    """The rows a cost per token can be computed from (a throughput in tokens per second)."""
    return [p for p in PUBLISHED if "throughput (tok/s)" in p.metric]


def cost_per_million_tokens(tokens_per_s: float, usd_per_gpu_hour: float, num_gpus: int = 1) -> float:
    """Dollars per million tokens at a sustained throughput:

        cost = price per hour × GPUs / (tokens per second × 3600) × 10^6
    """
    if not tokens_per_s > 0:
        raise ValueError(f"tokens_per_s must be > 0, got {tokens_per_s!r}")
    if not usd_per_gpu_hour >= 0:
        raise ValueError(f"usd_per_gpu_hour must be >= 0, got {usd_per_gpu_hour!r}")
    if num_gpus < 1:
        raise ValueError(f"num_gpus must be >= 1, got {num_gpus!r}")
    return usd_per_gpu_hour * num_gpus / (tokens_per_s * 3600.0) * 1e6


@dataclass(frozen=True)
class CostRow:
    row: Published
    usd_per_million: float


def cost_table(usd_per_gpu_hour: float) -> list[CostRow]:
    """Every cited throughput turned into $ per million tokens at the learner's GPU price."""
    return [CostRow(p, cost_per_million_tokens(p.value, usd_per_gpu_hour, p.num_gpus)) for p in throughput_rows()]


# ---------------------------------------------------------------- philosophies and engineering cost

@dataclass(frozen=True)
class Fact:
    """One sentence of the side-by-side, with the reference row that backs it."""

    zh: str
    en: str
    claim: str
    value_key: str = ""

    @property
    def citation(self) -> Citation:
        return find(self.claim, self.value_key)


PHILOSOPHY: dict[str, tuple[Fact, ...]] = {
    "vLLM": (
        Fact("Python 优先的调度器：v0.6.0 之前的剖析中，API 服务器占 33%、调度占 29%，GPU 只占 38%",
             "Python-first scheduler: a pre-0.6 profile spent 33% in the API server, 29% scheduling, 38% on the GPU",
             "vLLM (pre-0.6) time split"),
        Fact("V1 重写把调度放进独立的引擎核心进程，吞吐最高为 V0 的 1.7 倍",
             "The V1 rewrite moved scheduling into its own engine-core process: up to 1.7x V0's throughput",
             "vLLM V1 vs V0 throughput"),
        Fact("硬件覆盖面广：NVIDIA、AMD、Intel GPU，x86/ARM/Apple CPU，TPU、Gaudi 等",
             "Broad hardware: NVIDIA, AMD and Intel GPUs; x86/ARM/Apple CPUs; TPU, Gaudi and more",
             "vLLM supported hardware platforms"),
        Fact("V1 默认用 torch.compile 编译模型，并把批补齐（padding）到最近的已捕获 CUDA 图大小——"
             "“为形状编译、补齐”不是 TensorRT-LLM 独有", "V1 compiles the model with torch.compile by default and pads a "
             "batch to the nearest captured CUDA-graph size: compiling for shapes and padding is not TensorRT-LLM's alone",
             "vLLM V1 torch.compile default"),
        Fact("FP8：Ada/Hopper（新版文档含 Blackwell）上权重与激活都用 FP8（W8A8）；Ampere 上以仅权重 FP8（W8A16）运行",
             "FP8: weights and activations (W8A8) on Ada/Hopper (Blackwell in newer docs); weight-only FP8 (W8A16) on Ampere",
             "vLLM FP8 W8A8"),
        Fact("NVFP4：llm-compressor 量化的 W4A4 检查点（Blackwell 之前的 GPU 上仅权重）",
             "NVFP4: W4A4 checkpoints quantized with llm-compressor (weight-only on GPUs before Blackwell)", "vLLM NVFP4"),
        Fact("用 PagedAttention（分页 KV，出自 vLLM 的论文）管理 KV，并对新来的请求做连续批处理：文档首页列出的两项",
             "PagedAttention (paged KV, from vLLM's own paper) manages the KV cache, and incoming requests are batched "
             "continuously: two items its docs' front page lists", "vLLM continuous batching and PagedAttention"),
    ),
    "TensorRT-LLM": (
        Fact("只支持 NVIDIA GPU（Blackwell、Hopper、Ada、Ampere），Linux", "NVIDIA GPUs only (Blackwell, Hopper, Ada, "
             "Ampere), on Linux", "TensorRT-LLM supported hardware"),
        Fact("FP8 / FP4（NVFP4）量化：Hopper 与 Blackwell", "FP8 / FP4 (NVFP4) quantization on Hopper and Blackwell",
             "TensorRT-LLM FP8 / FP4 quantization"),
        Fact("0.17 起提供 PyTorch 后端；1.1.0rc3 的文档里 `tensorrt_llm.LLM` 已是 PyTorch 后端，TensorRT 引擎路径"
             "作为 `_tensorrt_engine.LLM` 保留", "A PyTorch backend since 0.17; in the 1.1.0rc3 docs `tensorrt_llm.LLM` is "
             "the PyTorch backend and the TensorRT-engine path remains as `_tensorrt_engine.LLM`", "TRT-LLM 1.1.0rc3 backends"),
        Fact("1.4 的文档：PyTorch 是唯一的执行后端，TensorRT 引擎后端已移除——两种哲学在靠拢",
             "The 1.4 docs: PyTorch is the sole execution backend and the TensorRT engine backend is removed: the "
             "philosophies converge", "TRT-LLM 1.4 execution backend"),
        Fact("重叠调度器（overlap scheduler）默认开启：第 n 步的 CPU 工作与第 n+1 步的 GPU 工作重叠",
             "The overlap scheduler is on by default: CPU work of step n overlaps GPU work of step n+1",
             "TRT-LLM overlap scheduler"),
    ),
    "SGLang": (
        Fact("零开销批调度器（zero-overhead batch scheduler）带来 1.1 倍吞吐", "Zero-overhead batch scheduler: 1.1x throughput",
             "SGLang zero-overhead batch scheduler"),
        Fact("同一批次内为不同序列使用不同的 LoRA 适配器", "Different LoRA adapters for different sequences in one batch",
             "SGLang multi-LoRA serving"),
        Fact("和 vLLM 一样没有构建步骤（直接加载 Hugging Face 检查点），调度器也是 Python 写的",
             "Like vLLM, no build step (it loads a Hugging Face checkpoint as is) and a scheduler written in Python",
             "SGLang launch without a build step"),
    ),
    "LMDeploy": (
        Fact("厂商自称请求吞吐最高为 vLLM 的 1.8 倍（厂商说法）", "Vendor claim: up to 1.8x vLLM's request throughput",
             "LMDeploy request throughput claim"),
    ),
}


@dataclass(frozen=True)
class EngineeringCost:
    engine: str
    steps_zh: str
    steps_en: str
    hardware_claim: str


ENGINEERING: tuple[EngineeringCost, ...] = (
    EngineeringCost("vLLM", "pip 安装后直接加载 Hugging Face 检查点，无需构建或转换（`vllm serve MODEL`）",
                    "pip install, then load the Hugging Face checkpoint as is; no build or conversion (`vllm serve MODEL`)",
                    "vLLM supported hardware platforms"),
    EngineeringCost("TensorRT-LLM", "TensorRT 后端（0.x；1.1.0rc3 的文档里仍保留）须先转换检查点、按最大形状编译引擎（`trtllm-build`）；"
                    "PyTorch 后端（0.17 起，1.4 起唯一）免构建；FP8/FP4 需 Model Optimizer 预量化的检查点（`trtllm-serve MODEL`）",
                    "The TensorRT backend (0.x; still in the 1.1.0rc3 docs) converts the checkpoint and builds an engine for "
                    "maximum shapes (`trtllm-build`); the PyTorch backend (since 0.17, the only one from 1.4) needs no build; "
                    "FP8/FP4 want a checkpoint pre-quantized with Model Optimizer (`trtllm-serve MODEL`)",
                    "TensorRT-LLM supported hardware"),
    EngineeringCost("llama.cpp", "C/C++ 编译（或下载二进制），模型先转换为 GGUF 并量化（`llama-server -m model.gguf`）",
                    "Compile C/C++ (or take a binary); convert the model to GGUF and quantize it (`llama-server -m model.gguf`)",
                    "llama.cpp hardware and quantization"),
)


# ---------------------------------------------------------------- TensorRT-LLM in its own terms

@dataclass(frozen=True)
class Mechanism:
    """One part of TensorRT-LLM's design: what the TensorRT (engine) backend does, what the PyTorch
    backend keeps or drops, each with the documentation row (and version) it comes from."""

    aspect_zh: str
    aspect_en: str
    engine_zh: str
    engine_en: str
    engine_claim: str
    pytorch_zh: str
    pytorch_en: str
    pytorch_claim: str
    vllm_zh: str = "—"          # what vLLM V1 does about the same thing (the idea is not one engine's)
    vllm_en: str = "—"
    vllm_claim: str = ""

    @property
    def citations(self) -> tuple[Citation | None, Citation]:
        """(engine side, PyTorch side); the engine side is None where the lab states nothing about it."""
        return (find(self.engine_claim) if self.engine_claim else None), find(self.pytorch_claim)

    @property
    def vllm_citation(self) -> Citation | None:
        """The first vLLM row (``vllm_citations`` has them all)."""
        return self.vllm_citations[0] if self.vllm_claim else None

    @property
    def vllm_citations(self) -> tuple[Citation, ...]:
        return tuple(find(c) for c in self.vllm_claim.split("; ")) if self.vllm_claim else ()


_REMOVED = "TRT-LLM TensorRT engine backend"

TRTLLM_MECHANISM: tuple[Mechanism, ...] = (
    Mechanism("提前构建（ahead-of-time engine build）", "ahead-of-time engine build",
              "构建时定下 max_batch_size / max_seq_len / max_num_tokens；构建期参数要改就得重建引擎",
              "max_batch_size / max_seq_len / max_num_tokens fixed at build time; changing a build-time flag means rebuilding",
              "TRT-LLM engine build shapes (TensorRT backend, v0.13)",
              "不构建引擎：`LLM(model=..., max_batch_size=..., max_seq_len=...)` 直接加载 Hugging Face 模型（1.0.0）",
              "no engine build: `LLM(model=..., max_batch_size=..., max_seq_len=...)` loads a Hugging Face model (1.0.0)",
              "TRT-LLM 1.0.0 LLM API example"),
    Mechanism("内核自动调优（kernel auto-tuning）", "kernel auto-tuning",
              "TensorRT 按优化配置（min / 最优 / max 形状）构建，为“最优”形状选内核；默认一个配置，--multiple_profiles 建更多",
              "TensorRT builds per optimization profile (min / optimal / max shapes) and optimizes for the optimal one; "
              "one profile by default, --multiple_profiles builds more",
              "TRT-LLM build-time flags and optimization profiles",
              "随 TensorRT 引擎后端一起移除（1.4 文档）", "removed with the TensorRT engine backend (1.4 docs)", _REMOVED),
    Mechanism("插件（plugins：注意力、GEMM）", "plugins (attention, GEMM)",
              "gpt_attention_plugin、gemm_plugin 等在构建时按精度启用（PluginConfig）",
              "gpt_attention_plugin, gemm_plugin and others enabled per precision at build time (PluginConfig)",
              "TRT-LLM plugins (TensorRT backend)",
              "TensorRT 插件属于引擎，随引擎后端移除；注意力等概念文档保留（1.4 文档）",
              "TensorRT plugins belong to the engine and went with it; the attention concept pages are kept (1.4 docs)",
              "TRT-LLM legacy docs still relevant"),
    Mechanism("CUDA 图（CUDA graphs）", "CUDA graphs",
              "—", "—", "",
              "为一组批大小捕获 CUDA 图；enable_padding 把批补到最近的已捕获大小（1.3.0rc27）",
              "CUDA graphs captured for a list of batch sizes; enable_padding rounds a batch up to the nearest (1.3.0rc27)",
              "TRT-LLM CUDA graph padding (PyTorch backend, 1.3.0rc27)",
              "同样：为 cudagraph_capture_sizes 捕获 CUDA 图，批补齐到最近的已捕获大小（v0.10.2）",
              "the same: CUDA graphs captured for cudagraph_capture_sizes, a batch padded to the nearest captured size (v0.10.2)",
              "vLLM CUDA graph capture sizes and padding"),
    Mechanism("飞行中批处理（in-flight batching）", "in-flight batching",
              "预填充与解码的序列同批；输入打包、不补齐（packed, no padding）",
              "context and generation sequences in one batch; packed inputs, no padding",
              "TRT-LLM in-flight batching input layout",
              "保留：调度概念文档仍适用于 PyTorch 后端（1.4 文档）", "kept: the scheduling concepts still apply (1.4 docs)",
              "TRT-LLM legacy docs still relevant",
              "同样：连续批处理（continuous batching），请求每一步都可加入或离开批（v0.7.3 文档首页）",
              "the same: continuous batching of incoming requests, joining and leaving the batch every step (v0.7.3 docs index)",
              "vLLM continuous batching and PagedAttention"),
    Mechanism("分页 KV（paged KV cache）", "paged KV cache",
              "构建选项 --paged_kv_cache", "build option --paged_kv_cache", "TRT-LLM multiple profiles and timing cache",
              "保留：KV 缓存管理与复用（1.4 文档）", "kept: KV cache management and reuse (1.4 docs)",
              "TRT-LLM legacy docs still relevant",
              "同样：PagedAttention 把 KV 存在固定大小的块里（分页 KV 就出自 vLLM；v0.7.3 文档首页）",
              "the same: PagedAttention keeps KV in fixed-size blocks (paged KV comes from vLLM; v0.7.3 docs index)",
              "vLLM continuous batching and PagedAttention"),
    Mechanism("FP8 / NVFP4（Model Optimizer）", "FP8 / NVFP4 via Model Optimizer",
              "Hopper/Ada：FP8、INT8、INT4；Ampere 无 FP8（0.18 支持矩阵）", "Hopper/Ada: FP8, INT8, INT4; no FP8 on Ampere (0.18 matrix)",
              "TensorRT-LLM precision by architecture",
              "FP8 与 FP4：Blackwell 与 Hopper，用 Model Optimizer 预量化的检查点", "FP8 and FP4 on Blackwell and Hopper, "
              "from checkpoints pre-quantized with Model Optimizer", "TensorRT-LLM FP8 / FP4 quantization",
              "同样有 FP8 与 NVFP4：FP8 W8A8（Ada/Hopper；Ampere 仅权重）；llm-compressor 量化的 NVFP4 W4A4（Blackwell 之前仅权重）",
              "FP8 and NVFP4 too: FP8 W8A8 (Ada/Hopper; weight-only on Ampere); NVFP4 W4A4 from llm-compressor "
              "(weight-only before Blackwell)", "vLLM FP8 W8A8; vLLM NVFP4"),
    Mechanism("torch.compile", "torch.compile",
              "—", "—", "",
              "用 torch.compile 做轻量的纵向融合，并做分段 CUDA 图（注意力留在 eager）（1.4.0rc1）",
              "torch.compile for light vertical fusion and piecewise CUDA graphs (attention stays eager) (1.4.0rc1)",
              "TRT-LLM torch.compile and piecewise CUDA graph",
              "V1 默认开启 torch.compile（v0.8.3 文档）", "torch.compile on by default in V1 (v0.8.3 docs)",
              "vLLM V1 torch.compile default"),
)


@dataclass(frozen=True)
class EnginePair:
    """One cross-engine comparison made by one party with one method (so its ranking means something)."""

    measured_by: str
    model: str
    hardware: str
    method: str
    claim: str

    @property
    def citation(self) -> Citation:
        return find(self.claim)


CROSS_ENGINE: tuple[EnginePair, ...] = (
    EnginePair("GPUStack", "gpt-oss-120b", "H100", "vllm bench serve, default settings, total tok/s", _OSS),
    EnginePair("GPUStack", "Qwen3-8B", "1× H100", "concurrency 4, TTFT", _QWEN),
    EnginePair("vLLM team (v0.6.0 blog appendix)", "Llama 8B", "1× A100", "ShareGPT / decode-heavy, throughput",
               "v0.6.0 comparison: TRT-LLM r24.07 8B on 1xA100"),
    EnginePair("vLLM team (v0.6.0 blog appendix)", "Llama 8B / 70B", "H100", "ShareGPT / decode-heavy / prefill-heavy",
               "v0.6.0 comparison: H100"),
    EnginePair("BentoML", "Llama-3-8B", "1× A100-80GB", "100 concurrent users, tok/s and TTFT", "BentoML Llama-3-8B A100-80GB"),
)


# ---------------------------------------------------------------- serving features, engine by engine

@dataclass(frozen=True)
class Feature:
    """A serving feature the chapter names, per engine, each backed by one reference row."""

    feature_zh: str
    feature_en: str
    engine: str
    fact: Fact


FEATURES: tuple[Feature, ...] = (
    Feature("服务框架：Triton 推理服务器（Triton Inference Server）", "serving front end: Triton Inference Server", "TensorRT-LLM",
            Fact("tensorrtllm_backend 是 Triton 推理服务器里服务 TensorRT-LLM 引擎的后端",
                 "tensorrtllm_backend is the Triton Inference Server backend that serves TensorRT-LLM engines",
                 "TensorRT-LLM backend for Triton Inference Server")),
    Feature("预填充/解码分离（disaggregated prefill/decode）", "disaggregated prefill/decode", "vLLM",
            Fact("实验性：预填充与解码放在不同的 vLLM 实例里，KV 在两者间传输；分开调 TTFT 与 ITL，文档写明不提高吞吐",
                 "experimental: prefill and decode in separate vLLM instances, KV transferred between them; TTFT and ITL "
                 "tuned apart; the docs say it does not improve throughput", "vLLM disaggregated prefilling")),
    Feature("预填充/解码分离（disaggregated prefill/decode）", "disaggregated prefill/decode", "TensorRT-LLM",
            Fact("分离式服务（disaggregated serving）的概念文档保留给 PyTorch 后端（TensorRT 后端移除说明页）",
                 "the disaggregated-serving concept pages are kept for the PyTorch backend (TensorRT-backend removal page)",
                 "TRT-LLM legacy docs still relevant")),
    Feature("投机解码（speculative decoding）：今天的方法", "speculative decoding: methods today", "vLLM",
            Fact("EAGLE（含 EAGLE-3）、MTP（多 token 预测）、草稿模型、并行草稿模型（PARD）、MLP、n-gram、后缀解码（suffix decoding）"
                 "（v0.19.0 文档）",
                 "EAGLE (EAGLE-3 included), MTP (multi-token prediction), draft model, parallel draft model (PARD), MLP, "
                 "n-gram, suffix decoding (v0.19.0 docs)", "vLLM speculative decoding methods")),
    Feature("投机解码（speculative decoding）：今天的方法", "speculative decoding: methods today", "TensorRT-LLM",
            Fact("EAGLE 3、MTP（DeepSeek V3/R1）、草稿-目标（draft/target）、n-gram、用户自带的提议者（PyTorch 后端文档）",
                 "EAGLE 3, MTP (DeepSeek V3/R1), draft/target, n-gram, a user-provided drafter (PyTorch backend docs)",
                 "TRT-LLM speculative decoding methods")),
    Feature("投机解码（speculative decoding）：历史测量（2024 年，V0）", "speculative decoding: a 2024 measurement (V0)", "vLLM",
            Fact("2024 年 10 月的博客（V0 时代）：低负载（QPS 1，Llama3-70B，4×H100）草稿模型 1.5 倍（ShareGPT），n-gram 2.8 倍（CNN/DM）",
                 "the October 2024 blog (V0 era): at low load (QPS 1, Llama3-70B, 4x H100) draft model 1.5x (ShareGPT), "
                 "n-gram 2.8x (CNN/DM)", "vLLM spec decode low QPS")),
    Feature("投机解码（speculative decoding）", "speculative decoding", "SGLang",
            Fact("EAGLE-2 / EAGLE-3：Llama-3.1-8B、单卡 H100、MT-bench 上 158.34 → 244.10 / 373.25 tok/s",
                 "EAGLE-2 / EAGLE-3: Llama-3.1-8B on one H100, MT-bench, 158.34 → 244.10 / 373.25 tok/s",
                 "SGLang Llama-3.1-8B 1xH100 MT-bench")),
    Feature("多 LoRA（multi-LoRA）", "multi-LoRA", "TensorRT-LLM",
            Fact("PyTorch 后端同时加载多个 LoRA 适配器，每个请求用自己的适配器（LoRARequest；LoraConfig 的 max_loras）",
                 "the PyTorch backend loads several LoRA adapters at once, each request with its own (LoRARequest; "
                 "LoraConfig max_loras)", "TRT-LLM multiple LoRA adapters")),
    Feature("多 LoRA（multi-LoRA）", "multi-LoRA", "vLLM",
            Fact("一个批里混合不同的适配器（--max-loras 是一批里最多的适配器数）",
                 "different adapters mixed in one batch (--max-loras is the most adapters per batch)", "vLLM mixed LoRA batch")),
)
