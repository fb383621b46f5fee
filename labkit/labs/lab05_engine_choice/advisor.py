"""A scenario advisor: plain rules from a deployment's constraints to an engine, with reasons.

Every ``Reason`` names where it comes from: a row of ``data/reference/published-numbers.csv``
(``source`` = the claim words, looked up with ``facts.lookup``), a measurement of this run
(``source`` starts with ``"measured:"``; only built from the numbers handed in as ``Measured``), or
a plain note (``"note:"``, e.g. what the lab did not check). The widget in ``views.py`` only
displays what ``recommend`` returns; the rules are tested in ``tests/labs/test_lab05.py``.

Each cited reason is checked against the scenario's premises: a figure measured on an H100 in FP8
is only quoted for Hopper with FP8, an A100 gets the A100 comparison, a format the hardware cannot
run gets the formats it can. Equal scores are broken by the fixed order ``TIE_ORDER`` (the broadest
hardware coverage first), and the recommendation says so when it happens.

The rules, in order (the first that decides, decides; the rest add reasons or shift scores):

    1. hardware    not NVIDIA → TensorRT-LLM is out; CPU / Apple → llama.cpp; AMD or mixed → vLLM
    2. quantisation NVFP4 needs Blackwell; FP8 (W8A8) needs Hopper/Ada/Blackwell. vLLM and TensorRT-LLM
                   both serve FP8 there (equal points); NVFP4 recipes are cited for TensorRT-LLM only
    3. stable model + max throughput: only a comparison one party made on the same hardware and a
       comparable model ranks engines (points to its winner); a figure with no second engine beside it,
       or one default-settings run of another kind of model (gpt-oss-120b, a mixture of experts), is
       information (0)
    4. weekly new models, a small Python team → vLLM and SGLang (no build step, Python scheduler);
       vLLM also for broad hardware
    5. strict TTFT: the low-concurrency comparison (concurrency 4) counts only for a low-concurrency
       scenario; at high concurrency only the one cited high-concurrency comparison (BentoML, A100,
       100 users) counts, on A100s; multi-LoRA → vLLM, SGLang and TensorRT-LLM alike (each serves
       several adapters at once)
    6. edge devices: llama.cpp (one binary, CUDA / HIP backends on NVIDIA or AMD too)
    7. ties: the first engine of ``TIE_ORDER`` among those with the top score, said as "the evidence
       here does not separate them"
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
CONCURRENCY = ("low", "high")
ENGINES = ("vLLM", "TensorRT-LLM", "SGLang", "llama.cpp")
TIE_ORDER = ("vLLM", "SGLang", "TensorRT-LLM", "llama.cpp")     # broadest hardware coverage first
NOISE = 0.10            # a single served run moves by about 10 % here: smaller gaps are "no difference"


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
    concurrency: str = "low"             # requests in flight: low (a few) or high (bursty, many tenants)

    def __post_init__(self) -> None:
        for name, allowed in (("hardware", HARDWARE), ("latency_slo", LEVELS), ("throughput", LEVELS),
                              ("model_churn", CHURN), ("quantization", QUANT), ("team", TEAMS),
                              ("operations", OPERATIONS), ("concurrency", CONCURRENCY)):
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
    source: str          # a reference claim (facts.find), "measured: ..." or "note: ..."
    engine: str = ""     # the engine this reason speaks for ("" = general)
    weight: int = 0      # + for, − against; 0 = information

    @property
    def kind(self) -> str:
        """"measured" (this run), "note" (no source: says what was not checked) or "cited"."""
        head = self.source.split(":", 1)[0]
        return head if head in ("measured", "note") else "cited"


@dataclass(frozen=True)
class Measured:
    """This run's section-2 numbers for one workload: variant name → output tokens per CPU second
    ÷ the baseline's (what ``compare.gains`` computes)."""

    workload: str
    gains: dict[str, float]
    verdicts: dict = field(default_factory=dict)     # variant -> its Verdict (the rounds decide the direction)

    @classmethod
    def from_gains(cls, workload: str, gains) -> Measured:
        return cls(workload, {g.variant: g.throughput_x for g in gains},
                   {g.variant: g.verdict for g in gains if g.verdict is not None})


@dataclass
class Recommendation:
    engine: str
    reasons: list[Reason]
    scores: dict[str, int] = field(default_factory=dict)
    excluded: dict[str, str] = field(default_factory=dict)    # engine → why it cannot run here
    tied: tuple[str, ...] = ()      # engines sharing the top score (more than one: TIE_ORDER decided)

    @property
    def ranked(self) -> list[str]:
        """Engines by score, equal scores in ``TIE_ORDER``."""
        return sorted(self.scores, key=lambda e: (-self.scores[e], TIE_ORDER.index(e)))

    @property
    def runner_up(self) -> str | None:
        rest = [e for e in self.ranked if e != self.engine]
        return rest[0] if rest else None

    def tie_note(self) -> tuple[str, str] | None:
        """(zh, en) saying how a tie was broken, or None when the top score was not shared."""
        if len(self.tied) < 2:
            return None
        names = "、".join(self.tied)
        order = " → ".join(TIE_ORDER)
        return (f"{names} 同分（{self.scores[self.engine]}）：这里的证据分不出它们，在你的负载上测；列在首位的 {self.engine} "
                f"只是按固定顺序 {order}（硬件覆盖最广者优先）。",
                f"{', '.join(self.tied)} tie at {self.scores[self.engine]}: the evidence here does not separate them, so "
                f"measure your workload; {self.engine} is listed first only by the fixed order {order} (broadest "
                "hardware first).")


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
    if s.hardware == "cpu":
        reasons.append(_r("SGLang 有 CPU 后端，文档写明为带 AMX 的 Intel Xeon（第 4 代起）启用并优化；别的 CPU 不是它的目标。",
                          "SGLang has a CPU backend, documented as enabled and optimised for Intel Xeon with AMX (4th "
                          "generation on); other CPUs are not its target.", "SGLang CPU backend", "SGLang", 0))
    if s.hardware == "apple":
        excluded["SGLang"] = "its documented CPU backend targets Intel Xeon with AMX, not Apple silicon"
    if s.hardware in ("amd", "mixed-amd-nvidia"):
        reasons.append(_r("vLLM 在 NVIDIA 与 AMD（ROCm）上用同一套代码和 API，混合机队只需维护一个引擎。",
                          "vLLM runs the same code and API on NVIDIA and AMD (ROCm): one engine for a mixed fleet.",
                          "vLLM supported hardware platforms", "vLLM", 5))
    if s.nvidia:
        reasons.append(_r("四个引擎都能在 NVIDIA GPU 上运行：要靠其他条件来选。",
                          "All four engines run on NVIDIA GPUs: the other constraints decide.",
                          "TensorRT-LLM supported hardware", "", 0))


def _measured_on_cpu(s: Scenario, measured: Measured | None, reasons: list[Reason]) -> None:
    """What this run measured for batching and paging on this CPU, in numbers (nothing if not handed in)."""
    if s.hardware not in ("cpu", "apple") or measured is None:
        return
    parts = [(name, zh, en, measured.gains[name]) for name, zh, en in
             (("static", "静态批处理", "static batching"), ("contiguous", "连续预留 KV", "contiguous KV"))
             if name in measured.gains]
    if not parts:
        return
    numbers_zh = "、".join(f"{zh} {x:.2f}×" for _, zh, _, x in parts)
    numbers_en = ", ".join(f"{en} {x:.2f}x" for _, _, en, x in parts)
    worse = [x for *_, x in parts if x <= 1 - NOISE]
    verdicts = [measured.verdicts.get(name) for name, *_ in parts]
    if measured.verdicts and not all(v is not None and v.clear for v in verdicts):
        zh, en = ("至少一个数的各轮不在同一边（在噪声之内或测量时机器正忙）：这次看不出批处理类优化在这台 CPU 上的得失",
                  "at least one of them is not clear round by round (within noise or measured while busy): this run "
                  "does not show what they are worth on this CPU")
    elif measured.verdicts and all(v.direction == "less" for v in verdicts):
        zh, en = "去掉连续批处理或分页，吞吐就掉（各轮一致）：批处理类优化在这台 CPU 上也有收益", \
            "taking continuous batching or paging away costs throughput in every round: they pay on this CPU too"
    elif measured.verdicts and all(v.direction == "same" for v in verdicts):
        zh, en = "各轮都与基线持平：这台 CPU 上看不出批处理类优化的收益", \
            "level with the baseline in every round: no visible gain from them on this CPU"
    elif measured.verdicts:
        zh, en = "两个开关方向不一，看单独的数", "the two switches point different ways; read each number"
    elif len(worse) == len(parts):
        zh, en = "去掉连续批处理或分页，吞吐就掉：批处理类优化在这台 CPU 上也有收益", \
            "taking continuous batching or paging away costs throughput: they pay on this CPU too"
    elif not worse and all(abs(x - 1) < NOISE for *_, x in parts):
        zh, en = "差别在一次运行的噪声（约 10%）以内：这台 CPU 上看不出批处理类优化的收益", \
            "within one run's noise (about 10 %): no visible gain from them on this CPU"
    else:
        zh, en = "两个开关方向不一，看单独的数", "the two switches point different ways; read each number"
    reasons.append(_r(f"本次在这台 CPU 上测得（{measured.workload} 负载，每 CPU 秒输出 token 相对基线）：{numbers_zh}——{zh}。",
                      f"Measured in this run on this CPU ({measured.workload} workload, output tokens per CPU second over "
                      f"the baseline): {numbers_en}: {en}.", f"measured: section 2, {measured.workload} workload", "", 0))


def _quantization(s: Scenario, reasons: list[Reason]) -> None:
    if s.quantization == "nvfp4" and s.hardware != "nvidia-blackwell":
        if s.hardware in ("nvidia-hopper", "nvidia-ada"):
            reasons.append(_r("NVFP4 需要 Blackwell；Hopper/Ada 上可以退回 FP8 或 INT4。", "NVFP4 needs Blackwell; on "
                              "Hopper/Ada fall back to FP8 or INT4.", "TensorRT-LLM precision by architecture", "", 0))
        elif s.hardware == "nvidia-ampere":
            reasons.append(_r("NVFP4 需要 Blackwell，Ampere 也没有 FP8：可用 INT8 / INT4。", "NVFP4 needs Blackwell and "
                              "Ampere has no FP8: use INT8 / INT4.", "TensorRT-LLM precision by architecture", "", 0))
        elif s.hardware in ("cpu", "apple"):
            reasons.append(_r("NVFP4 是 NVIDIA Blackwell 的格式，CPU / Apple 上用不了；这里用 4/5/8 位整数量化（GGUF）。",
                              "NVFP4 is an NVIDIA Blackwell format, not available on a CPU or Apple silicon; use 4/5/8-bit "
                              "integer quantization (GGUF) here.", "llama.cpp hardware and quantization", "", 0))
        else:
            reasons.append(_r("NVFP4 是 NVIDIA Blackwell 的格式（TensorRT-LLM 文档），这块硬件上不适用。",
                              "NVFP4 is an NVIDIA Blackwell format (TensorRT-LLM docs); it does not apply to this hardware.",
                              "TensorRT-LLM FP8 / FP4 quantization", "", 0))
    if s.quantization == "fp8" and s.hardware == "nvidia-ampere":
        reasons.append(_r("Ampere 没有 FP8 硬件：TensorRT-LLM 在 Ampere 上只有 INT8/INT4（0.18 支持矩阵）。",
                          "Ampere has no FP8 hardware: TensorRT-LLM offers INT8/INT4 only on Ampere (0.18 support matrix).",
                          "TensorRT-LLM precision by architecture", "", 0))
        reasons.append(_r("vLLM 在 Ampere 上以仅权重 FP8（W8A16，FP8 Marlin 内核）运行 FP8 检查点：省显存，但不是 FP8 计算。",
                          "vLLM runs an FP8 checkpoint on Ampere weight-only (W8A16, FP8 Marlin kernels): it saves memory, "
                          "but does not compute in FP8.", "vLLM FP8 W8A8", "vLLM", 1))
    if s.quantization == "fp8" and s.hardware in ("cpu", "apple"):
        reasons.append(_r("FP8 是 Hopper/Ada/Blackwell GPU 的格式；CPU / Apple 上用 4/5/8 位整数量化（GGUF）。",
                          "FP8 is a Hopper/Ada/Blackwell GPU format; on a CPU or Apple silicon use 4/5/8-bit integer "
                          "quantization (GGUF).", "llama.cpp hardware and quantization", "", 0))
    fp8_ok = s.quantization == "fp8" and s.hardware in ("nvidia-hopper", "nvidia-ada", "nvidia-blackwell")
    fp4_ok = s.quantization == "nvfp4" and s.hardware == "nvidia-blackwell"
    if fp8_ok or fp4_ok:
        reasons.append(_r("TensorRT-LLM 为 Hopper/Blackwell 的 FP8/FP4 提供现成配方（Model Optimizer 预量化检查点）。",
                          "TensorRT-LLM ships FP8/FP4 recipes for Hopper/Blackwell (Model Optimizer pre-quantized checkpoints).",
                          "TensorRT-LLM FP8 / FP4 quantization", "TensorRT-LLM", 3))
    if fp4_ok:
        reasons.append(_r("vLLM 同样服务 NVFP4：llm-compressor 量化的 W4A4 检查点在 Blackwell 上权重与激活都用 FP4（更早的 GPU 上仅权重）。",
                          "vLLM serves NVFP4 too: W4A4 checkpoints quantized with llm-compressor run weights and activations "
                          "in FP4 on Blackwell (weight-only on earlier GPUs).", "vLLM NVFP4", "vLLM", 3))
    if fp8_ok:
        reasons.append(_r("vLLM 同样服务 FP8：Ada/Hopper（新版文档含 Blackwell）上权重与激活都用 FP8（W8A8）——FP8 本身不区分这两个引擎。",
                          "vLLM serves FP8 too: weights and activations in FP8 (W8A8) on Ada/Hopper (Blackwell in newer "
                          "docs), so FP8 alone does not separate the two engines.", "vLLM FP8 W8A8", "vLLM", 3))
    if s.quantization == "int4" and s.hardware in ("cpu", "apple"):
        reasons.append(_r("4 位 GGUF 量化是 llama.cpp 的本行。", "4-bit GGUF quantization is llama.cpp's home ground.",
                          "llama.cpp hardware and quantization", "llama.cpp", 2))


def _max_throughput(s: Scenario, reasons: list[Reason]) -> None:
    """A stable model run for maximum throughput: quote only figures measured on this hardware and precision."""
    if not (s.nvidia and s.throughput == "high" and s.model_churn == "stable"):
        return
    if s.hardware == "nvidia-hopper" and s.quantization == "fp8":
        reasons.append(_r("参考（不排名）：TensorRT-LLM 公布了 Llama-3.1-8B FP8 在单卡 H100 上 28,837 tok/s"
                          "（它自己的 trtllm-bench）；同一模型没有别的引擎的数字，所以这一项不加分。",
                          "For reference (no ranking): TensorRT-LLM publishes 28,837 tok/s for Llama-3.1-8B FP8 on one H100 "
                          "(its own trtllm-bench); no other engine's figure for that model is cited, so it scores nothing.",
                          "TRT-LLM Llama-3.1-8B FP8 TP1 128/128 @ v0.17", "", 0))
    if s.hardware == "nvidia-hopper":
        reasons.append(_r("参考（不加分）：同一块 H100、同一方、同一方法，但只是一次默认参数的 MoE 模型（gpt-oss-120b）测量："
                          "vLLM 6,095 tok/s，TensorRT-LLM 2,140，SGLang 1,814。默认参数、单个模型，排不出稠密模型调优后的名次。",
                          "For reference (no points): same H100, one party, one method, but a single default-settings run of "
                          "a mixture-of-experts model (gpt-oss-120b): vLLM 6,095 tok/s, TensorRT-LLM 2,140, SGLang 1,814. "
                          "Default flags on one model do not rank tuned dense-model serving.",
                          "gpt-oss-120b H100 total tok/s", "", 0))
        reasons.append(_r("vLLM v0.6.0 博客附录（H100）：ShareGPT 与解码为主的负载上 vLLM 最高（70B 只略高于 TensorRT-LLM），"
                          "预填充为主时更低——排名随负载变。", "vLLM v0.6.0 blog appendix (H100): vLLM highest on ShareGPT and "
                          "decode-heavy loads (70B only marginally above TensorRT-LLM), lower on prefill-heavy: the ranking "
                          "moves with the workload.", "v0.6.0 comparison: H100", "", 0))
    elif s.hardware == "nvidia-ampere":
        reasons.append(_r("A100 上的跨引擎对比（vLLM v0.6.0 博客附录，8B、单卡 A100）：TensorRT-LLM r24.07 吞吐最高，vLLM 第二。",
                          "Cross-engine comparison on an A100 (vLLM v0.6.0 blog appendix, 8B on one A100): TensorRT-LLM "
                          "r24.07 had the highest throughput, vLLM second.",
                          "v0.6.0 comparison: TRT-LLM r24.07 8B on 1xA100", "TensorRT-LLM", 3))
    elif s.hardware == "nvidia-blackwell" and s.quantization in ("fp8", "nvfp4"):
        reasons.append(_r("Blackwell 上的 FP4/FP8：本表没有 Blackwell 上任何引擎的吞吐数字，这一项不加分，先测。",
                          "FP4/FP8 on Blackwell: no engine's Blackwell throughput figure is cited here, so this scores "
                          "nothing; measure first.", "TensorRT-LLM FP8 / FP4 quantization", "", 0))


def _churn(s: Scenario, reasons: list[Reason]) -> None:
    if s.model_churn == "weekly":
        reasons.append(_r("每周换新模型：vLLM 直接加载 Hugging Face 检查点、无构建步骤，且一份代码跑所有硬件。",
                          "New models weekly: vLLM loads Hugging Face checkpoints directly with no build step, on every "
                          "kind of hardware.", "vLLM supported hardware platforms", "vLLM", 4))
        reasons.append(_r("SGLang 也直接加载 Hugging Face 检查点、没有构建步骤（硬件覆盖比 vLLM 窄）。",
                          "SGLang also loads Hugging Face checkpoints directly with no build step (on narrower hardware "
                          "than vLLM).", "SGLang launch without a build step", "SGLang", 2))
        if s.nvidia:
            reasons.append(_r("TensorRT-LLM 1.0 的 LLM API 也直接加载 Hugging Face 模型（PyTorch 后端，不构建引擎）：差距在缩小。",
                              "TensorRT-LLM 1.0's LLM API also loads a Hugging Face model directly (PyTorch backend, no "
                              "engine build): the gap is closing.", "TRT-LLM 1.0.0 LLM API example", "TensorRT-LLM", 1))


def _latency_and_features(s: Scenario, reasons: list[Reason]) -> None:
    if s.latency_slo == "high" and s.nvidia and s.concurrency == "high":
        reasons.append(_r("高并发下的 TTFT：这里只有 BentoML 在单卡 A100-80GB、100 个并发用户下的一组对比（Llama-3-8B，vLLM 的 TTFT 最好）；"
                          "低并发（并发 4）的对比说明不了突发的多租户流量。",
                          "TTFT under high concurrency: the only comparison cited is BentoML's on one A100-80GB with 100 "
                          "concurrent users (Llama-3-8B; vLLM had the best TTFT); the low-concurrency one (concurrency 4) "
                          "says nothing about bursty multi-tenant traffic.", "BentoML Llama-3-8B A100-80GB", "vLLM",
                          2 if s.hardware == "nvidia-ampere" else 0))
    if s.latency_slo == "high" and s.nvidia and s.concurrency == "low":
        reasons.append(_r("低并发下 TTFT：Qwen3-8B、H100、并发 4，SGLang 27.7 ms，TensorRT-LLM 51.6 ms，vLLM 64.0 ms（单次测量）。",
                          "TTFT at low concurrency: Qwen3-8B on an H100 at concurrency 4, SGLang 27.7 ms, TensorRT-LLM 51.6 ms, "
                          "vLLM 64.0 ms (one measurement).", "qwen3-8b H100 concurrency 4 TTFT", "SGLang", 3))
        reasons.append(_r("低延迟要看引擎的 CPU 开销：v0.6.0 之前的 vLLM 剖析里 API 服务器占 33%、调度占 29%（第 5 节在本机测主机时间占比）。",
                          "Low latency depends on an engine's CPU overhead: a pre-0.6 vLLM profile spent 33% in the API "
                          "server and 29% scheduling (section 5 measures the host share here).",
                          "vLLM (pre-0.6) time split", "", 0))
    if s.multi_lora:
        reasons.append(_r("多 LoRA：SGLang 在同一批次内为不同序列用不同适配器。", "Multi-LoRA: SGLang batches different "
                          "adapters for different sequences.", "SGLang multi-LoRA serving", "SGLang", 2))
        reasons.append(_r("多 LoRA：vLLM 同样在一个批里混合不同的适配器（--max-loras 是一批里最多的适配器数）。",
                          "Multi-LoRA: vLLM also mixes different adapters in one batch (--max-loras is the most adapters per "
                          "batch).", "vLLM mixed LoRA batch", "vLLM", 2))
        if s.nvidia:
            reasons.append(_r("多 LoRA：TensorRT-LLM 的 PyTorch 后端同时加载多个适配器，每个请求用自己的适配器（LoRARequest）。",
                              "Multi-LoRA: TensorRT-LLM's PyTorch backend loads several adapters at once, each request with "
                              "its own (LoRARequest).", "TRT-LLM multiple LoRA adapters", "TensorRT-LLM", 2))
    if s.structured_output:
        reasons.append(_r("结构化输出：本实验没有核实各引擎的约束解码实现，这一项不加分；请在自己的 JSON schema 上测。",
                          "Structured output: this lab has not checked each engine's constrained decoding, so it scores "
                          "nothing; test with your own JSON schema.", "note: not checked in this lab", "", 0))
    if s.team == "small-python":
        reasons.append(_r("小型 Python 团队：vLLM 的调度器是 Python 写的、可读可改（V1 的引擎核心进程）。",
                          "Small Python team: vLLM's scheduler is Python, readable and patchable (V1's engine-core process).",
                          "vLLM V1 vs V0 throughput", "vLLM", 2))
        reasons.append(_r("小型 Python 团队：SGLang 的调度器同样是 Python 写的。",
                          "Small Python team: SGLang's scheduler is Python too.", "SGLang launch without a build step",
                          "SGLang", 2))
    if s.operations == "edge":
        reasons.append(_r("边缘设备：llama.cpp 是没有依赖的 C/C++ 程序，一个二进制加一个 GGUF 文件即可部署"
                          + ("；它也有 CUDA / HIP 后端，GPU 边缘盒子同样能用。" if s.nvidia or s.hardware == "amd" else "。"),
                          "Edge devices: llama.cpp is plain C/C++ without dependencies; one binary and one GGUF file deploy"
                          + ("; it has CUDA / HIP backends too, so a GPU edge box runs it." if s.nvidia or s.hardware == "amd"
                             else "."), "llama.cpp hardware and quantization", "llama.cpp", 2))
    if s.team == "nvidia-experts" and s.nvidia:
        reasons.append(_r("熟悉 NVIDIA 工具链的团队能承担量化与调参的工程成本。", "A team fluent in NVIDIA's toolchain can "
                          "carry the quantization and tuning work.", "TensorRT-LLM FP8 / FP4 quantization", "TensorRT-LLM", 2))


def recommend(s: Scenario, measured: Measured | None = None) -> Recommendation:
    """The engine for scenario ``s``, with every reason; ``measured`` adds this run's section-2 numbers."""
    reasons: list[Reason] = []
    excluded: dict[str, str] = {}
    _hardware(s, reasons, excluded)
    _measured_on_cpu(s, measured, reasons)
    _quantization(s, reasons)
    _max_throughput(s, reasons)
    _churn(s, reasons)
    _latency_and_features(s, reasons)
    if (s.nvidia or s.hardware in ("amd", "mixed-amd-nvidia")) and s.operations != "edge":
        excluded.setdefault("llama.cpp", "built for one machine, not for a batched GPU service")
    scores = {e: sum(r.weight for r in reasons if r.engine == e) for e in ENGINES if e not in excluded}
    top = max(scores.values())
    tied = tuple(e for e in TIE_ORDER if scores.get(e) == top)
    return Recommendation(tied[0], reasons, scores, excluded, tied)


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
    "A100s, stable model, max throughput": Scenario(hardware="nvidia-ampere", throughput="high", quantization="int4"),
    "B200, stable model, NVFP4, max throughput": Scenario(
        hardware="nvidia-blackwell", throughput="high", quantization="nvfp4", team="nvidia-experts"),
    "AMD MI300X, stable model": Scenario(hardware="amd", throughput="high"),
    "MacBook (Apple silicon), NVFP4 checkpoint": Scenario(hardware="apple", throughput="low", quantization="nvfp4"),
    "Intel Xeon CPU server": Scenario(hardware="cpu", throughput="medium", team="platform"),
    "NVIDIA edge box (Jetson-class), one app": Scenario(hardware="nvidia-ampere", operations="edge", throughput="low"),
    "bursty multi-tenant API on H100s, many LoRA adapters": Scenario(
        hardware="nvidia-hopper", latency_slo="high", concurrency="high", multi_lora=True, throughput="high"),
}

# The named scenarios as a learner reads them (Chinese first); the English key stays the identifier.
SCENARIO_NAMES_ZH: dict[str, str] = {
    "H100, stable Llama model, max throughput, FP8": "H100、稳定的 Llama 模型、追求极限吞吐、FP8",
    "mixed AMD + NVIDIA fleet, weekly new models": "AMD + NVIDIA 混合机队、每周换新模型",
    "CPU-only laptop": "只有 CPU 的笔记本",
    "MacBook (Apple silicon), local assistant": "MacBook（Apple 芯片）上的本地助手",
    "H100 chat product, strict TTFT, many LoRA adapters": "H100 上的对话产品、严格的 TTFT、很多 LoRA 适配器",
    "small Python team on A100s, weekly new models": "A100 上的小型 Python 团队、每周换新模型",
    "A100s, stable model, max throughput": "A100、稳定的模型、追求极限吞吐",
    "B200, stable model, NVFP4, max throughput": "B200、稳定的模型、NVFP4、追求极限吞吐",
    "AMD MI300X, stable model": "AMD MI300X、稳定的模型",
    "MacBook (Apple silicon), NVFP4 checkpoint": "MacBook（Apple 芯片）、NVFP4 检查点",
    "Intel Xeon CPU server": "Intel Xeon CPU 服务器",
    "NVIDIA edge box (Jetson-class), one app": "NVIDIA 边缘盒子（Jetson 一类）、单个应用",
    "bursty multi-tenant API on H100s, many LoRA adapters": "H100 上突发的多租户 API、很多 LoRA 适配器",
}
