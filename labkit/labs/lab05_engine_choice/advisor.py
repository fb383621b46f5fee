"""A scenario advisor: plain rules from a deployment's constraints to an engine, with reasons.

Every ``Reason`` names where it comes from: a row of ``data/reference/published-numbers.csv``
(``source`` = the claim words, looked up with ``facts.lookup``) or a measurement in this lab
(``source`` starts with ``"measured:"``). The widget in ``views.py`` only displays what
``recommend`` returns; the rules are tested in ``tests/labs/test_lab05.py``.

The rules, in order (the first that decides, decides; the rest add reasons or shift scores):

    1. hardware    not NVIDIA → TensorRT-LLM is out; CPU / Apple → llama.cpp; AMD or mixed → vLLM
    2. quantisation NVFP4 needs Blackwell; FP8 needs Hopper/Ada/Blackwell (on NVIDIA)
    3. stable model + max throughput + NVIDIA FP8/FP4 + a team that can run it → TensorRT-LLM
    4. weekly new models, a small Python team → vLLM (no build step, broad hardware)
    5. strict TTFT at low concurrency, or structured output / multi-LoRA heavy → SGLang is a contender
"""

from __future__ import annotations

from dataclasses import dataclass, field

HARDWARE = ("nvidia-blackwell", "nvidia-hopper", "nvidia-ada", "nvidia-ampere", "amd", "mixed-amd-nvidia",
            "cpu", "apple")
LEVELS = ("low", "medium", "high")
CHURN = ("stable", "monthly", "weekly")
QUANT = ("none", "fp8", "nvfp4", "int4")
TEAMS = ("small-python", "platform", "nvidia-experts")
OPERATIONS = ("cluster", "single-server", "edge")
ENGINES = ("vLLM", "TensorRT-LLM", "SGLang", "llama.cpp")


@dataclass(frozen=True)
class Scenario:
    hardware: str = "nvidia-hopper"
    latency_slo: str = "medium"          # how strict: high = tight TTFT/TPOT objectives
    throughput: str = "medium"           # how much: high = max tokens per GPU-hour
    model_churn: str = "stable"
    quantization: str = "none"
    structured_output: bool = False
    multi_lora: bool = False
    team: str = "platform"
    operations: str = "cluster"          # where it runs: a GPU cluster, one server, or edge devices

    def __post_init__(self) -> None:
        for name, allowed in (("hardware", HARDWARE), ("latency_slo", LEVELS), ("throughput", LEVELS),
                              ("model_churn", CHURN), ("quantization", QUANT), ("team", TEAMS),
                              ("operations", OPERATIONS)):
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")

    @property
    def nvidia(self) -> bool:
        return self.hardware.startswith("nvidia-")


@dataclass(frozen=True)
class Reason:
    text_zh: str
    text_en: str
    source: str          # a reference claim (facts.find) or "measured: ..."
    engine: str = ""     # the engine this reason speaks for ("" = general)
    weight: int = 0      # + for, − against; 0 = information


@dataclass
class Recommendation:
    engine: str
    reasons: list[Reason]
    scores: dict[str, int] = field(default_factory=dict)
    excluded: dict[str, str] = field(default_factory=dict)    # engine → why it cannot run here

    @property
    def runner_up(self) -> str | None:
        ranked = sorted((e for e in self.scores if e != self.engine), key=lambda e: -self.scores[e])
        return ranked[0] if ranked else None


def _r(zh: str, en: str, source: str, engine: str = "", weight: int = 0) -> Reason:
    return Reason(zh, en, source, engine, weight)


def _hardware(s: Scenario, reasons: list[Reason], excluded: dict[str, str]) -> None:
    if not s.nvidia:
        excluded["TensorRT-LLM"] = "NVIDIA GPUs only"
        reasons.append(_r("TensorRT-LLM 只支持 NVIDIA GPU，这里用不了。", "TensorRT-LLM runs on NVIDIA GPUs only; not here.",
                          "TensorRT-LLM supported hardware", "TensorRT-LLM", -100))
    if s.hardware in ("cpu", "apple"):
        reasons.append(_r("llama.cpp 为 CPU 与 Apple 芯片而生（NEON/Metal/AVX），并有 4/5/8 位量化，模型装得进笔记本内存。",
                          "llama.cpp is built for CPUs and Apple silicon (NEON/Metal/AVX) with 4/5/8-bit quantization, "
                          "so a model fits a laptop's memory.", "llama.cpp hardware and quantization", "llama.cpp", 6))
        reasons.append(_r("本实验在 CPU 上测得：即使 135M 的小模型，单请求改稿的吞吐也只有每秒几个 token；"
                          "批处理类优化在 CPU 上收益有限。", "Measured in this lab on a CPU: even a 135M model serves a "
                          "single copy-edit at a few tokens per second; batching optimisations buy little on a CPU.",
                          "measured: section 2, copy workload", "llama.cpp", 1))
        excluded["SGLang"] = "GPU-oriented serving stack"
    if s.hardware in ("amd", "mixed-amd-nvidia"):
        reasons.append(_r("vLLM 在 NVIDIA 与 AMD（ROCm）上用同一套代码和 API，混合机队只需维护一个引擎。",
                          "vLLM runs the same code and API on NVIDIA and AMD (ROCm): one engine for a mixed fleet.",
                          "vLLM supported hardware platforms", "vLLM", 5))
    if s.nvidia:
        reasons.append(_r("四个引擎都能在 NVIDIA GPU 上运行：要靠其他条件来选。",
                          "All four engines run on NVIDIA GPUs: the other constraints decide.",
                          "TensorRT-LLM supported hardware", "", 0))


def _quantization(s: Scenario, reasons: list[Reason]) -> None:
    if s.quantization == "nvfp4" and s.hardware != "nvidia-blackwell":
        reasons.append(_r("NVFP4 需要 Blackwell；这块硬件上退回 FP8 或 INT4。", "NVFP4 needs Blackwell; on this hardware "
                          "fall back to FP8 or INT4.", "TensorRT-LLM FP8 / FP4 quantization", "", 0))
    if s.quantization == "fp8" and s.hardware == "nvidia-ampere":
        reasons.append(_r("Ampere 不支持 FP8（TensorRT-LLM 支持矩阵：Ampere 只有 INT8/INT4）。",
                          "Ampere has no FP8 (TensorRT-LLM support matrix: INT8/INT4 only on Ampere).",
                          "TensorRT-LLM precision by architecture", "", 0))
    low_precision = s.quantization in ("fp8", "nvfp4") and s.hardware in ("nvidia-hopper", "nvidia-blackwell", "nvidia-ada")
    if low_precision:
        reasons.append(_r("TensorRT-LLM 为 Hopper/Blackwell 的 FP8/FP4 提供现成配方（Model Optimizer 预量化检查点）。",
                          "TensorRT-LLM ships FP8/FP4 recipes for Hopper/Blackwell (Model Optimizer pre-quantized checkpoints).",
                          "TensorRT-LLM FP8 / FP4 quantization", "TensorRT-LLM", 3))
    if s.quantization == "int4" and s.hardware in ("cpu", "apple"):
        reasons.append(_r("4 位 GGUF 量化是 llama.cpp 的本行。", "4-bit GGUF quantization is llama.cpp's home ground.",
                          "llama.cpp hardware and quantization", "llama.cpp", 2))


def _throughput_and_churn(s: Scenario, reasons: list[Reason]) -> None:
    if s.nvidia and s.throughput == "high" and s.model_churn == "stable":
        reasons.append(_r("模型稳定、追求极限吞吐：TensorRT-LLM 公布了 Llama-3.1-8B FP8 在单卡 H100 上 28,837 tok/s；"
                          "但各家的对比常常互相矛盾（默认参数、版本、负载不同）。",
                          "Stable model, maximum throughput: TensorRT-LLM publishes 28,837 tok/s for Llama-3.1-8B FP8 on one "
                          "H100; but published comparisons disagree (defaults, versions, workloads).",
                          "TRT-LLM Llama-3.1-8B FP8 TP1 128/128 @ v0.17", "TensorRT-LLM", 4))
        reasons.append(_r("反例：默认设置下 gpt-oss-120b 在 H100 上 vLLM 6,095 tok/s，TensorRT-LLM 2,140：先在自己的负载上测。",
                          "Counter-example: at default settings gpt-oss-120b on an H100 gave vLLM 6,095 tok/s and "
                          "TensorRT-LLM 2,140: measure on your own workload first.",
                          "gpt-oss-120b H100 total tok/s", "vLLM", 1))
    if s.model_churn == "weekly":
        reasons.append(_r("每周换新模型：vLLM 直接加载 Hugging Face 检查点、无构建步骤，且一份代码跑所有硬件。",
                          "New models weekly: vLLM loads Hugging Face checkpoints directly with no build step, on every "
                          "kind of hardware.", "vLLM supported hardware platforms", "vLLM", 4))
        reasons.append(_r("TensorRT-LLM 1.x 以 PyTorch 为唯一后端，已不必编译引擎，差距在缩小。",
                          "TensorRT-LLM 1.x runs on PyTorch only and no longer compiles an engine: the gap is closing.",
                          "TRT-LLM 1.4 execution backend", "TensorRT-LLM", 1))


def _latency_and_features(s: Scenario, reasons: list[Reason]) -> None:
    if s.latency_slo == "high" and s.nvidia:
        reasons.append(_r("低并发下 TTFT：Qwen3-8B、H100、并发 4，SGLang 27.7 ms，TensorRT-LLM 51.6 ms，vLLM 64.0 ms（单次测量）。",
                          "TTFT at low concurrency: Qwen3-8B on an H100 at concurrency 4, SGLang 27.7 ms, TensorRT-LLM 51.6 ms, "
                          "vLLM 64.0 ms (one measurement).", "qwen3-8b H100 concurrency 4 TTFT", "SGLang", 3))
        reasons.append(_r("本实验测得：调度器的主机时间占每步的一部分，并发越高越明显——低延迟要看引擎的 CPU 开销。",
                          "Measured in this lab: host (scheduler) time is a share of every step and grows with concurrency; "
                          "low latency depends on an engine's CPU overhead.", "measured: section 5, host vs model time", "", 0))
    if s.multi_lora:
        reasons.append(_r("多 LoRA：SGLang 在同一批次内为不同序列用不同适配器。", "Multi-LoRA: SGLang batches different "
                          "adapters for different sequences.", "SGLang multi-LoRA serving", "SGLang", 2))
        reasons.append(_r("多 LoRA：vLLM 按请求挂载适配器。", "Multi-LoRA: vLLM attaches an adapter per request.",
                          "vLLM LoRA adapters", "vLLM", 2))
    if s.structured_output:
        reasons.append(_r("结构化输出：本实验没有核实各引擎的约束解码实现，这一项不加分；请在自己的 JSON schema 上测。",
                          "Structured output: this lab has not checked each engine's constrained decoding, so it scores "
                          "nothing; test with your own JSON schema.", "measured: not measured in labkit", "", 0))
    if s.team == "small-python":
        reasons.append(_r("小型 Python 团队：vLLM 的调度器是 Python 写的、可读可改（V1 的引擎核心进程）。",
                          "Small Python team: vLLM's scheduler is Python, readable and patchable (V1's engine-core process).",
                          "vLLM V1 vs V0 throughput", "vLLM", 2))
    if s.operations == "edge":
        reasons.append(_r("边缘设备：llama.cpp 是没有依赖的 C/C++ 程序，一个二进制加一个 GGUF 文件即可部署。",
                          "Edge devices: llama.cpp is plain C/C++ without dependencies; one binary and one GGUF file deploy.",
                          "llama.cpp hardware and quantization", "llama.cpp", 2))
    if s.team == "nvidia-experts" and s.nvidia:
        reasons.append(_r("熟悉 NVIDIA 工具链的团队能承担量化与调参的工程成本。", "A team fluent in NVIDIA's toolchain can "
                          "carry the quantization and tuning work.", "TensorRT-LLM FP8 / FP4 quantization", "TensorRT-LLM", 2))


def recommend(s: Scenario) -> Recommendation:
    reasons: list[Reason] = []
    excluded: dict[str, str] = {}
    _hardware(s, reasons, excluded)
    _quantization(s, reasons)
    _throughput_and_churn(s, reasons)
    _latency_and_features(s, reasons)
    if s.nvidia or s.hardware in ("amd", "mixed-amd-nvidia"):
        excluded.setdefault("llama.cpp", "built for one machine, not for a batched GPU service")
    scores = {e: sum(r.weight for r in reasons if r.engine == e) for e in ENGINES if e not in excluded}
    scores["vLLM"] = scores.get("vLLM", 0) + 1      # the broadest default: ties go to vLLM
    best = max(scores, key=lambda e: scores[e])
    return Recommendation(best, reasons, scores, excluded)


SCENARIOS: dict[str, Scenario] = {
    "H100, stable Llama model, max throughput, FP8": Scenario(
        hardware="nvidia-hopper", throughput="high", model_churn="stable", quantization="fp8", team="nvidia-experts"),
    "mixed AMD + NVIDIA fleet, weekly new models": Scenario(
        hardware="mixed-amd-nvidia", model_churn="weekly", team="platform"),
    "CPU-only laptop": Scenario(hardware="cpu", throughput="low", latency_slo="low", quantization="int4",
                                team="small-python", operations="edge"),
    "MacBook (Apple silicon), local assistant": Scenario(hardware="apple", throughput="low", quantization="int4"),
    "H100 chat product, strict TTFT, many LoRA adapters": Scenario(
        hardware="nvidia-hopper", latency_slo="high", multi_lora=True, throughput="medium"),
    "small Python team on A100s, weekly new models": Scenario(
        hardware="nvidia-ampere", model_churn="weekly", team="small-python", quantization="fp8"),
    "B200, stable model, NVFP4, max throughput": Scenario(
        hardware="nvidia-blackwell", throughput="high", quantization="nvfp4", team="nvidia-experts"),
    "AMD MI300X, stable model": Scenario(hardware="amd", throughput="high"),
}
