"""What each optimisation costs and buys: one switch at a time, the same workload, served by
``labkit serve`` and measured by ``labkit bench`` (in this process: a background server on a free
loopback port per configuration; the weights are loaded once per process and shared).

    baseline ─┬─ KV: paged → contiguous           (take paging away)
              ├─ scheduler: continuous → static   (take continuous batching away)
              ├─ + prefix caching
              ├─ − chunked prefill
              ├─ + speculative: n-gram / draft model
              ├─ dtype: float32 → bfloat16
              ├─ torch.compile of each layer's dense halves (full mode only: compiling takes a while)
              └─ weights: fp32 → the GGUF's 4-bit codes  (weights="q4_1", an approximation of fp32)

Every variant gets the same KV pool (``num_blocks``), ``max_model_len`` and batch limits, so the
memory column compares like with like: weights + the peak KV bytes the variant allocated.

Measuring (``labkit.labs.common.measure``): every server runs torch on one thread and is
compared on CPU seconds (server and client share this process: ``time.process_time``). Each
workload is served ``ROUNDS`` times by every variant, the variants' order alternating from round to
round; the rounds' spread decides each gain's verdict (``compare.verdict_of``). A prefix-caching
variant gets a fresh engine every round (an empty cache), the others keep theirs.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from labkit.config import EngineConfig, SpecConfig
from labkit.events import StepEnd
from labkit.labs.common.display import fast
from labkit.labs.common.measure import cpu_clock, machine_load, measuring, wall_clock
from labkit.llm import LLM
from labkit.sampling_params import SamplingParams
from labkit.serve import BackgroundServer, ServedModel
from labkit.serve_bench.client import Target
from labkit.serve_bench.client_metrics import BenchMetrics, compute_metrics
from labkit.serve_bench.load_generator import LoadShape, run_load
from labkit.serve_bench.results import BenchResult
from labkit.serve_bench.workload import BenchRequest
from labkit.traces import load_prompts

SERVED_NAME = "labkit-lab05"
ROUNDS = fast(2, 2)       # rounds per workload: a verdict needs the spread of at least two


def run_blocking(coro):
    """Run a coroutine to completion from sync code, also inside Jupyter (whose thread already runs
    an event loop, where ``asyncio.run`` refuses): on a fresh thread with its own loop."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lab05-bench") as pool:
        return pool.submit(asyncio.run, coro).result()


@dataclass(frozen=True)
class Variant:
    name: str
    zh: str
    en: str
    config: EngineConfig | None           # None: not available in labkit (see ``why_not``)
    why_not_zh: str = ""
    why_not_en: str = ""
    only_workload: str | None = None      # measured on this workload only (the others list it without numbers)


def base_config(num_blocks: int = 160, max_model_len: int = 640) -> EngineConfig:
    """The reference point: paged KV, continuous batching, chunked prefill, fp32, no prefix cache."""
    return EngineConfig(num_blocks=num_blocks, max_model_len=max_model_len, max_num_seqs=16,
                        max_num_batched_tokens=512, enable_prefix_caching=False)


COMPILE_ZH = "torch.compile 每层的稠密部分（“编译型引擎”的类比）"
COMPILE_EN = "torch.compile of each layer's dense parts (the compiled-engine analogue)"


def variants(base: EngineConfig, full: bool = True) -> list[Variant]:
    """The switches, one at a time against ``base``; ``full=False`` keeps the five cheapest and the
    4-bit row (the torch.compile row is listed without numbers, saying why; the KV layout and scheduler
    rows are measured on the chat workload only)."""
    # Fast mode measures the batching and layout switches on the batch workload only: one request at a
    # time gives the scheduler no batch to form, and their rounds were a fifth of the fast mode's decode steps.
    chat_only = {} if full else dict(
        why_not_zh="快速模式只在批量对话（chat）负载上测这一行：一次一个请求时调度器没有可拼的批，KV 布局只剩注意力寻址的差别（实验 02 第 7 节单独测过）；完整模式两个负载都测。",
        why_not_en="Fast mode measures this row on the batch-chat workload only: one request at a time gives the scheduler "
                   "no batch to form and leaves the KV layout only its attention addressing (lab 02 section 7 measures "
                   "that alone); full mode measures both workloads.",
        only_workload="chat")
    out = [
        Variant("baseline", "基线：分页 + 连续批处理 + 分块预填充", "baseline: paged + continuous + chunked prefill", base),
        Variant("contiguous", "KV：分页 → 连续预留", "KV: paged → contiguous reservation", replace(base, kv_cache="contiguous"),
                **chat_only),
        Variant("static", "调度：连续 → 静态批处理", "scheduler: continuous → static", replace(base, scheduler="static"),
                **chat_only),
        Variant("prefix", "+ 前缀缓存", "+ prefix caching", replace(base, enable_prefix_caching=True)),
        Variant("ngram", "+ 投机解码：n-gram，k=4", "+ speculative: n-gram, k=4",
                replace(base, speculative=SpecConfig(method="ngram", num_speculative_tokens=4))),
    ]
    if full:
        out += [
            # Both workloads fit one step's token budget (512), so switching chunking off changes no step
            # here: the row says so instead of timing a copy of the baseline. Lab 03 measures chunking.
            Variant("no-chunked", "− 分块预填充", "− chunked prefill", None,
                    "这两个负载每一步都装得进 512 个 token 的预算，关掉分块不会改变任何一步，所以这里不测；实验 03 的分块预填充一节测了它。",
                    "Both workloads fit the 512-token step budget, so switching chunking off changes no step and it is "
                    "not timed here; lab 03's chunked-prefill section measures it."),
            Variant("draft", "+ 投机解码：草稿模型，k=4", "+ speculative: draft model, k=4",
                    replace(base, speculative=SpecConfig(method="draft", num_speculative_tokens=4))),
            Variant("bf16", "权重与 KV：float32 → bfloat16", "weights and KV: float32 → bfloat16", replace(base, dtype="bfloat16")),
            # One workload is enough to see what compiling buys, and the row's setup is the lab's longest.
            Variant("compile", COMPILE_ZH, COMPILE_EN, replace(base, compile=True),
                    "只在批量对话负载上测一次（编译和预热是这个实验里最慢的一步）。",
                    "Measured on the batch-chat workload only (compiling and warming up is this lab's slowest step).",
                    only_workload="chat"),
        ]
    else:
        out.append(Variant("compile", COMPILE_ZH, COMPILE_EN, None,
                           "快速模式（FAST）跳过这一行：第一次编译要几十秒。完整模式会测它。",
                           "Skipped in FAST mode: the first compilation takes tens of seconds. Full mode measures it."))
    out += [
        Variant("int4", "目标模型 4 位权重（GGUF 的 Q4_1 码，近似 fp32）",
                "4-bit target weights (the GGUF's Q4_1 codes; approximates fp32)", replace(base, weights="q4_1")),
    ]
    return out


# ------------------------------------------------------------------------------------ workloads

@dataclass(frozen=True)
class Workload:
    name: str
    zh: str
    en: str
    requests: tuple[BenchRequest, ...]
    max_concurrency: int | None = None     # None: every request at once

    def shape(self) -> LoadShape:
        return LoadShape(max_concurrency=self.max_concurrency)


SHARED_RULES = ("You are the copy desk of a small newspaper. House rules: keep the author's meaning, keep every "
                "name and number exactly as written, do not add commentary, answer with the corrected text only. ")


def chat_workload(num_prompts: int, min_out: int, max_out: int, seed: int = 0) -> Workload:
    """Distinct short chat questions with output lengths drawn uniformly in [min_out, max_out]."""
    if not 1 <= min_out <= max_out:
        raise ValueError(f"output lengths need 1 <= min_out <= max_out, got min_out={min_out}, max_out={max_out}")
    rng = random.Random(seed)
    prompts = load_prompts("chat")
    reqs = tuple(BenchRequest(prompts[i % len(prompts)], rng.randint(min_out, max_out)) for i in range(num_prompts))
    return Workload("chat", "批量对话：各不相同的短问题、输出长短不一，同时到达",
                    "batch chat: distinct short questions, varied output lengths, all at once", reqs)


def copy_workload(num_prompts: int, output_len: int) -> Workload:
    """One editor at a time: copy-editing requests that share an instruction prefix, sent one after
    another (concurrency 1); answers repeat much of the prompt."""
    prompts = load_prompts("copy")
    reqs = tuple(BenchRequest(SHARED_RULES + prompts[i % len(prompts)], output_len) for i in range(num_prompts))
    return Workload("copy", "单人改稿：共享指令前缀，回答大段照抄输入，一次一个请求",
                    "one editor: shared instruction prefix, answers repeat the input, one request at a time", reqs,
                    max_concurrency=1)


# ------------------------------------------------------------------------------------ one run

@dataclass
class StepTotals:
    """Summed from ``StepEnd`` events while a run is served (the loop thread emits them)."""

    steps: int = 0
    host_s: float = 0.0
    model_s: float = 0.0
    peak_kv_perc: float = 0.0
    preemptions: int = 0

    def on_step(self, event: StepEnd) -> None:
        s = event.stats
        self.steps += 1
        self.host_s += s.host_s
        self.model_s += s.model_s
        self.peak_kv_perc = max(self.peak_kv_perc, s.kv_cache_usage_perc)
        self.preemptions = max(self.preemptions, s.num_preemptions)


@dataclass(frozen=True)
class AblationRow:
    workload: str
    variant: Variant
    metrics: BenchMetrics | None = None
    cpu_s: float = 0.0                 # CPU time of this process (server + client) during the run
    weights_bytes: int = 0
    peak_kv_bytes: int = 0
    steps: StepTotals = field(default_factory=StepTotals)
    result_file: str | None = None
    setup_s: float = 0.0               # wall time to build the engine and warm it up (compiling, if asked)
    rounds: tuple = ()                 # per round: (output tokens, CPU seconds, BenchMetrics)
    load: tuple = (None, None)         # load average before and after the workload's rounds

    @property
    def round_tokens_per_cpu_s(self) -> tuple[float, ...]:
        return tuple(tok / cpu for tok, cpu, _ in self.rounds if cpu > 0)

    @property
    def available(self) -> bool:
        return self.metrics is not None

    @property
    def tokens_per_cpu_s(self) -> float | None:
        if not self.available or self.cpu_s <= 0:
            return None
        return self.metrics.total_output_tokens / self.cpu_s

    @property
    def memory_bytes(self) -> int:
        return self.weights_bytes + self.peak_kv_bytes


def table_cells(rows: list[AblationRow], workload: str) -> list[dict[str, Any]]:
    """What §2's table and figure show of each row of ``workload`` (the measured row's best round, the
    memory, the setup time; an unavailable row's reason), as plain values."""
    out = []
    for r in (r for r in rows if r.workload == workload):
        cell = {"variant": r.variant.name, "zh": r.variant.zh, "en": r.variant.en, "available": r.available,
                "why_not_zh": r.variant.why_not_zh, "why_not_en": r.variant.why_not_en}
        if r.available:
            m = r.metrics
            cell.update(output_throughput=m.output_throughput, tokens_per_cpu_s=r.tokens_per_cpu_s,
                        ttft_p99_ms=m.ttft.p99_ms, tpot_p99_ms=m.tpot.p99_ms, goodput=m.goodput,
                        memory_bytes=r.memory_bytes, completed=m.completed, failed=m.failed, setup_s=r.setup_s)
        out.append(cell)
    return out


class Servers:
    """One running server per engine, kept between rounds and workloads: starting one builds its app (which
    reads the tokenizer's whole vocabulary) and starts uvicorn, work the 24 short runs of the fast mode did
    again and again. The measured CPU time starts after the server is up, so keeping it changes no number."""

    def __init__(self):
        self._by_engine: dict[int, tuple[object, BackgroundServer]] = {}

    def get(self, llm) -> BackgroundServer:
        key = id(llm.engine)
        if key not in self._by_engine:      # the llm is kept with its server, so its id is not reused
            self._by_engine[key] = (llm, BackgroundServer(ServedModel(llm.engine, SERVED_NAME)).start())
        return self._by_engine[key][1]

    def drop(self, llm) -> None:
        entry = self._by_engine.pop(id(llm.engine), None)
        if entry is not None:
            entry[1].stop()

    def close(self) -> None:
        for _, server in self._by_engine.values():
            server.stop()
        self._by_engine.clear()


def serve_and_bench(llm, workload: Workload, shape: LoadShape, slo_ms: dict[str, float],
                    timeout_s: float = 120.0, server: BackgroundServer | None = None) -> tuple[BenchResult, float, StepTotals]:
    """Run ``labkit bench``'s load against ``llm`` served on a free loopback port (``server``, kept by the
    caller, or one started and stopped here)."""
    if server is None:
        with BackgroundServer(ServedModel(llm.engine, SERVED_NAME)) as own:
            return serve_and_bench(llm, workload, shape, slo_ms, timeout_s, own)
    totals = StepTotals()
    llm.engine.hooks.subscribe(totals.on_step, StepEnd)
    try:
        target = Target(server.base_url, SERVED_NAME, "chat", ignore_eos=True)   # fixed lengths: labkit serve
        clock = cpu_clock()     # process CPU time: server and client share this process (injected in tests)
        cpu0 = clock()
        outcome = run_blocking(run_load(target, list(workload.requests), shape, request_timeout_s=timeout_s,
                                   max_duration_s=timeout_s, progress=False,
                                   clock=wall_clock("wall clock (client-side latency)")))
        cpu_s = clock() - cpu0
    finally:
        llm.engine.hooks.unsubscribe(totals.on_step)
    metrics = compute_metrics(outcome.records, outcome.duration_s, slo_ms)
    settings = {"base_url": server.base_url, "model": SERVED_NAME, "endpoint": "chat", "dataset": workload.name,
                "num_prompts": len(workload.requests), "request_rate": shape.request_rate,
                "max_concurrency": shape.max_concurrency, "goodput_slo_ms": slo_ms}
    return BenchResult(settings, metrics, outcome.records), cpu_s, totals


def _weights_bytes(llm) -> int:
    """Bytes of the weights the serving model holds: its parameters plus packed 4-bit matrices
    (modules with an ``nbytes()``, e.g. ``quant.Int4Linear``, keep them as buffers)."""
    model = llm.engine.runner.model
    return (sum(p.numel() * p.element_size() for p in model.parameters())
            + sum(m.nbytes() for m in model.modules() if hasattr(m, "nbytes")))


def _kv_bytes(llm) -> int:
    tensor = llm.engine.kv_cache.tensor
    return tensor.numel() * tensor.element_size()


def _build(variant: Variant) -> tuple[object, float]:
    start = time.perf_counter()
    llm = LLM(config=variant.config, progress=False)
    warm_up(llm)                                          # first-step costs are not the variant's
    return llm, time.perf_counter() - start


def _measured(variant: Variant, workload: Workload) -> bool:
    return variant.config is not None and variant.only_workload in (None, workload.name)


def run_variant(variant: Variant, workload: Workload, slo_ms: dict[str, float],
                results_dir: Path | None = None) -> AblationRow:
    """One variant, one round (``run_workload`` measures rounds of every variant)."""
    return run_workload([variant], workload, slo_ms, results_dir, rounds=1)[0]


def run_workload(variant_list: list[Variant], workload: Workload, slo_ms: dict[str, float],
                 results_dir: Path | None = None, rounds: int | None = None,
                 built: dict[str, tuple[object, float]] | None = None,
                 servers: Servers | None = None) -> list[AblationRow]:
    """Every variant serves ``workload`` in ``rounds`` interleaved rounds (order alternating);
    the table shows each variant's least disturbed round (the one with the most tokens per CPU s).
    ``built`` (name -> (llm, setup seconds)) keeps engines between workloads: an engine serves one
    workload after another as a server would; a prefix-caching one starts each round with an empty cache.
    ``servers`` keeps each engine's server running between rounds (and workloads); without it the
    servers started here are stopped on return."""
    rounds = ROUNDS if rounds is None else rounds
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds!r}")
    if servers is None:
        own = Servers()
        try:
            return run_workload(variant_list, workload, slo_ms, results_dir, rounds, built, own)
        finally:
            own.close()
    live = [v for v in variant_list if _measured(v, workload)]
    built = {} if built is None else built
    reused = {v.name for v in live if v.name in built}
    for v in live:
        if v.name not in built:
            built[v.name] = _build(v)
    llms = {v.name: built[v.name] for v in live}
    done: dict[str, list] = {v.name: [] for v in live}
    load_before = machine_load()
    for r in range(rounds):
        for v in (live if r % 2 == 0 else live[::-1]):
            if (r or v.name in reused) and v.config.enable_prefix_caching:   # an empty cache every round
                servers.drop(llms[v.name][0])
                llms[v.name] = (_build(v)[0], llms[v.name][1])             # (setup time: the first build's)
                built[v.name] = llms[v.name]
            llm = llms[v.name][0]
            llm.engine.reset_metrics()
            result, cpu_s, totals = serve_and_bench(llm, workload, workload.shape(), slo_ms, server=servers.get(llm))
            done[v.name].append((result, cpu_s, totals, int(totals.peak_kv_perc / 100.0 * _kv_bytes(llm))))
    load = (load_before, machine_load())
    rows = []
    for v in variant_list:
        if not _measured(v, workload):
            rows.append(AblationRow(workload.name, v if v.config is None else replace(v, config=None)))
            continue
        llm, setup_s = llms[v.name]
        runs = done[v.name]
        best = max(runs, key=lambda x: x[0].metrics.total_output_tokens / max(x[1], 1e-9))
        result, cpu_s, totals, peak_kv = best
        path = None
        if results_dir is not None:
            path = str(result.save(Path(results_dir) / f"{workload.name}_{v.name}.json"))
        rows.append(AblationRow(workload.name, v, result.metrics, cpu_s, _weights_bytes(llm), max(x[3] for x in runs),
                                totals, path, setup_s,
                                tuple((x[0].metrics.total_output_tokens, x[1], x[0].metrics) for x in runs), load))
    return rows
def warm_up(llm) -> None:
    """Run the step shapes a workload will meet: one, a few and many rows per step. A compiled
    engine compiles once per row-count range (1; 2-6; 7-16; more: ``ops.torch_ops.linear`` branches there),
    and that time belongs to its setup, not to the requests it serves."""
    params = SamplingParams(temperature=0.0, max_tokens=2)
    for batch in ((1, 4, 10) if getattr(llm.engine.runner, "pieces", None) is not None else (1,)):
        llm.generate(["Hi"] * batch, params)


def run_ablation(variant_list: list[Variant], workloads: list[Workload], slo_ms: dict[str, float],
                 results_dir: Path | None = None, rounds: int | None = None) -> list[AblationRow]:
    """Every variant on every workload (workload-major, so one workload's rows are close in time),
    on ``measure.measuring()`` threads, with a progress bar per workload."""
    from tqdm.auto import tqdm

    from labkit.i18n import t

    rows: list[AblationRow] = []
    built: dict[str, tuple[object, float]] = {}          # each engine is built (and compiled) once
    servers = Servers()                                  # and served by one server throughout
    try:
        with measuring(), quiet_compiler():
            for w in tqdm(workloads, desc=t("测量：各配置轮流服务每个负载", "measuring: every configuration serves each workload"),
                          unit=t("个负载", "workload"), leave=False):
                rows += run_workload(variant_list, w, slo_ms, results_dir, rounds, built, servers)
    finally:
        servers.close()
    return rows


@contextmanager
def quiet_compiler():
    """torch.compile's recompile-limit warning is about our warm-up shapes, not the learner's work:
    raise the limit while the compiled row runs and keep dynamo's log out of the lab's output."""
    try:
        import torch._dynamo.config as dynamo_config
    except Exception:            # torch without dynamo: nothing to quiet
        yield
        return
    name = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"
    before = getattr(dynamo_config, name)
    logger = logging.getLogger("torch._dynamo")
    level = logger.level
    setattr(dynamo_config, name, max(before, 64))
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        setattr(dynamo_config, name, before)
        logger.setLevel(level)
