"""Diagnose a running service from outside: where does the memory go, and does the scheduler
saturate first? (the chapter's closing challenge)

While ``labkit bench`` drives a server, a sampler thread scrapes ``/metrics`` every
``interval_s`` and keeps the gauges and counters that answer the two questions:

    memory      kv_cache_usage_perc (0..1), num_preemptions_total, requests running / waiting
    scheduler   host time vs model time per step (labkit: from StepEnd events, in process;
                a remote vLLM does not export it, so there we read only the memory side)

Metric names differ by engine and version: labkit exports ``labkit:kv_cache_usage_perc``; vLLM
``vllm:kv_cache_usage_perc`` (older releases ``vllm:gpu_cache_usage_perc``). ``NAMES`` lists the
candidates per quantity, first match wins.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import httpx

from labkit.events import StepEnd
from labkit.i18n import t
from labkit.labs.lab05_engine_choice.ablation import SERVED_NAME, StepTotals, Workload, run_blocking
from labkit.llm import LLM
from labkit.serve import BackgroundServer, ServedModel
from labkit.serve_bench.client import Target
from labkit.serve_bench.client_metrics import compute_metrics
from labkit.serve_bench.load_generator import LoadShape, run_load

NAMES = {
    "kv_usage": ("kv_cache_usage_perc", "gpu_cache_usage_perc"),
    "preemptions": ("num_preemptions_total", "num_preemptions"),
    "running": ("num_requests_running",),
    "waiting": ("num_requests_waiting",),
}


def parse_prometheus(text: str) -> dict[str, float]:
    """``{"name": value}`` summed over label sets (comments and blank lines skipped)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        name = key.split("{", 1)[0]
        try:
            values[name] = values.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return values


def pick(values: dict[str, float], prefix: str, quantity: str) -> float | None:
    for suffix in NAMES[quantity]:
        name = f"{prefix}:{suffix}"
        if name in values:
            return values[name]
    return None


@dataclass(frozen=True)
class Sample:
    t_s: float
    kv_usage: float | None
    preemptions: float | None
    running: float | None
    waiting: float | None


@dataclass
class MetricsSampler:
    """``with MetricsSampler(url, "labkit") as s: ...run load...`` → ``s.samples``."""

    base_url: str
    prefix: str = "labkit"
    interval_s: float = 0.25
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lab05-metrics", daemon=True)

    def _run(self) -> None:
        t0 = time.perf_counter()
        with httpx.Client(timeout=10.0) as client:
            while not self._stop.is_set():
                self.scrape_once(client, time.perf_counter() - t0)
                self._stop.wait(self.interval_s)

    def scrape_once(self, client: httpx.Client, t_s: float) -> None:
        try:
            values = parse_prometheus(client.get(self.base_url.rstrip("/") + "/metrics").text)
        except httpx.HTTPError as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return
        self.samples.append(Sample(t_s, *(pick(values, self.prefix, q) for q in NAMES)))

    def __enter__(self) -> "MetricsSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(15.0)

    def peak(self, quantity: str) -> float | None:
        values = [getattr(s, quantity) for s in self.samples if getattr(s, quantity) is not None]
        return max(values) if values else None


@dataclass(frozen=True)
class LoadPoint:
    """One load level: what the server's metrics and the engine's steps said."""

    concurrency: int
    peak_kv_usage: float | None        # 0..1
    preemptions: float | None          # during this run
    peak_waiting: float | None
    host_s: float
    model_s: float
    output_tok_s: float
    samples: tuple[Sample, ...] = ()

    @property
    def host_share(self) -> float:
        total = self.host_s + self.model_s
        return self.host_s / total if total > 0 else 0.0


def diagnose_labkit(config, workload: Workload, concurrencies: list[int]) -> list[LoadPoint]:
    """Serve one labkit engine (a fresh one per load level) and sweep the concurrency."""
    points = []
    for c in concurrencies:
        llm = LLM(config=config, progress=False)
        totals = StepTotals()
        llm.engine.hooks.subscribe(totals.on_step, StepEnd)
        with BackgroundServer(ServedModel(llm.engine, SERVED_NAME)) as server:
            with MetricsSampler(server.base_url) as sampler:
                target = Target(server.base_url, SERVED_NAME, "chat", ignore_eos=True)    # fixed lengths
                out = run_blocking(run_load(target, list(workload.requests),
                                           LoadShape(max_concurrency=c), 120.0, 120.0, progress=False))
        m = compute_metrics(out.records, out.duration_s)
        points.append(LoadPoint(c, sampler.peak("kv_usage"), totals.preemptions, sampler.peak("waiting"),
                                totals.host_s, totals.model_s, m.output_throughput, tuple(sampler.samples)))
    return points


HOST_SHARE_LOW = 0.2      # below this share of a step, the model (not the scheduler) is what saturates


def diagnosis_sentences(points: list[LoadPoint], busy: bool = False) -> list[str]:
    """The two answers, computed from the numbers: where memory goes (counted), and how large the host's
    share of a step is. One run per load level gives no rounds, so the host shares are reported, not
    ranked ("rising" from two single runs would be a ranking from noise); ``busy`` (the record's machine
    was busy) says the wall-clock shares are stretched."""
    lo, hi = points[0], points[-1]
    kv = "—" if hi.peak_kv_usage is None else f"{100 * hi.peak_kv_usage:.0f}%"
    pre = 0 if hi.preemptions is None else int(hi.preemptions)
    memory = (t(f"内存：并发 {hi.concurrency} 时 KV 使用峰值 {kv}，抢占 {pre} 次——KV 池是先到顶的资源。",
                f"Memory: at concurrency {hi.concurrency} KV usage peaks at {kv} with {pre} preemptions: the KV pool "
                "saturates first.")
              if pre > 0 or (hi.peak_kv_usage or 0) >= 0.95 else
              t(f"内存：并发 {hi.concurrency} 时 KV 使用峰值 {kv}，没有抢占——这个负载下内存还没到顶。",
                f"Memory: at concurrency {hi.concurrency} KV usage peaks at {kv}, no preemptions: memory is not the limit here."))
    low = hi.host_share < HOST_SHARE_LOW
    host = t(f"调度：主机时间占每步 {100 * lo.host_share:.1f}%（并发 {lo.concurrency}）和 {100 * hi.host_share:.1f}%"
             f"（并发 {hi.concurrency}），每个并发只跑了一次，两者之差不下“升或降”的结论；" +
             ("最高并发时仍远小于模型时间：在这台 CPU 上模型先饱和，调度器没有先饱和。" if low else
              "最高并发时已占相当比例：调度器开销值得优化（vLLM V1、重叠调度就是为此）。"),
             f"Scheduler: host time is {100 * lo.host_share:.1f}% of a step at concurrency {lo.concurrency} and "
             f"{100 * hi.host_share:.1f}% at {hi.concurrency}; one run per level, so the difference is not read as rising "
             "or falling; " + ("at the highest concurrency it is still far below model time: on this CPU the model "
                               "saturates first, not the scheduler." if low else
                               "at the highest concurrency it is a real share: scheduler overhead is worth attacking "
                               "(what vLLM V1 and overlap scheduling do)."))
    if busy:
        host += t("（测量时机器正忙：主机与模型时间都是墙钟，被邻居拉长，这个占比不可靠。）",
                  " (The machine was busy while measuring: host and model time are wall clock, stretched by neighbours, "
                  "so this share is not reliable.)")
    lab03 = t("主机时间占比只说明这个负载、这台机器上调度器有没有先饱和；调度器的 CPU 时间怎样随运行中的请求数增长"
              "（第三个误解），看实验 03 第 7 节。",
              "The host share only says whether the scheduler saturated first on this workload and machine; how the "
              "scheduler's CPU time grows with the number of running requests (the third misreading) is lab 03, section 7.")
    return [memory, host, lab03]
