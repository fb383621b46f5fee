"""Online serving: requests arrive over time; latency percentiles and goodput, as ``vllm bench serve``.

Definitions (vLLM's benchmarks/serve.py; docs/serving.md):

    TTFT     first token time - arrival time
    TPOT     (e2e - TTFT) / (output tokens - 1)        per request
    ITL      every gap between consecutive tokens, pooled over requests
    goodput  requests that met every objective (TTFT <= slo_ttft_s and TPOT <= slo_tpot_s)
             / the run's duration (first arrival to last finish)

Arrivals are replayed in-process on the engine's clock (``labkit.replay``): wall time for the real
model, the virtual clock for the simulated one.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, replace

from labkit import host_clock
from labkit.config import EngineConfig
from labkit.events import RequestFinished
from labkit.metrics import percentile
from labkit.replay import replay
from labkit.traces import TraceRequest


@dataclass(frozen=True)
class SLO:
    ttft_s: float
    tpot_s: float

    def met(self, ttft_s: float | None, tpot_s: float | None) -> bool:
        return ttft_s is not None and ttft_s <= self.ttft_s and (tpot_s is None or tpot_s <= self.tpot_s)


@dataclass(frozen=True)
class ServingResult:
    label: str
    rate: float                 # offered requests / s
    num_requests: int
    duration_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    itl_p50_s: float
    itl_p99_s: float
    num_good: int
    output_tokens: int
    simulated: bool

    @property
    def goodput(self) -> float:
        return self.num_good / self.duration_s

    @property
    def throughput(self) -> float:
        """Completed requests / s."""
        return self.num_requests / self.duration_s

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.duration_s


def serve_trace(llm, trace: list[TraceRequest], rate: float, slo: SLO, label: str) -> ServingResult:
    """Replay ``trace`` (arrival times already set) and measure it against ``slo``."""
    engine = llm.engine
    finished: list = []
    handler = finished.append
    engine.hooks.subscribe(handler, RequestFinished)
    try:
        with _host_cpu_time(engine.simulated):
            result = replay(engine, trace)
    finally:
        engine.hooks.unsubscribe(handler)
    s = result.stats
    timings = [e.timings for e in finished]
    ttft = [t.ttft_s for t in timings if t.ttft_s is not None]
    tpot = [t.tpot_s for t in timings if t.tpot_s is not None]
    good = sum(SLO.met(slo, t.ttft_s, t.tpot_s) for t in timings)
    return ServingResult(label, rate, len(timings), s["elapsed_s"], percentile(ttft, 50), percentile(ttft, 99),
                         percentile(tpot, 50), percentile(tpot, 99), s["itl_p50_s"], s["itl_p99_s"], good,
                         s["num_output_tokens"], engine.simulated)


@contextmanager
def _host_cpu_time(simulated: bool):
    """The simulator's virtual clock moves by the engine's host work as well as the modelled
    accelerator step (``labkit.sim.simulator``). Timed on the wall clock, another program on a busy
    machine would stretch every simulated step: a busy run then serves a different simulation.
    So a simulated replay reads the host work in this process's CPU time (an injected clock, e.g. a
    test's, is left alone). The real model keeps the wall clock: its latencies are wall time."""
    if not simulated or host_clock.now is not time.perf_counter:
        yield
        return
    host_clock.use(time.process_time)
    try:
        yield
    finally:
        host_clock.use(None)


def rate_sweep(make_llm, trace_at_rate, rates: list[float], slo: SLO,
               schedulers=("static", "continuous")) -> dict[str, list[ServingResult]]:
    """``make_llm(scheduler)`` a fresh engine per run; ``trace_at_rate(rate)`` the arrivals."""
    return {name: [serve_trace(make_llm(name), trace_at_rate(rate), rate, slo, name) for rate in rates]
            for name in schedulers}


def saturates(result: ServingResult) -> bool:
    """Some completed requests miss the SLO: goodput falls below completed throughput. (The name is
    kept for callers; the lab calls this "missing the SLO", not saturation, which is throughput that
    stops growing with the rate.)"""
    return result.num_good < result.num_requests


def extend_to_saturation(sweep: dict[str, list[ServingResult]], make_llm, trace_at_rate, slo: SLO,
                         until: str = "continuous", max_extra: int = 5) -> dict[str, list[ServingResult]]:
    """A copy of ``sweep`` (``rate_sweep``'s result) with its highest rate doubled, every scheduler run
    there, until ``until``'s last run ``saturates`` (at most ``max_extra`` doublings): a sweep that
    shows where goodput and throughput part."""
    out = {name: list(results) for name, results in sweep.items()}
    for _ in range(max_extra):
        if saturates(out[until][-1]):
            break
        rate = 2 * out[until][-1].rate
        for name in out:
            out[name].append(serve_trace(make_llm(name), trace_at_rate(rate), rate, slo, name))
    return out


def saturation_rate(results: list[ServingResult]) -> float | None:
    """The lowest swept rate at which goodput fell below completed throughput, i.e. some requests
    missed the SLO (None: it never did)."""
    return next((r.rate for r in sorted(results, key=lambda r: r.rate) if saturates(r)), None)


def slo_capacity(results: list[ServingResult], attainment: float = 0.9) -> float | None:
    """The highest swept rate at which at least ``attainment`` of the requests met the SLO, with every
    lower rate meeting it too (None: not even the lowest rate did)."""
    best = None
    for r in sorted(results, key=lambda r: r.rate):
        if r.num_good < attainment * r.num_requests:
            break
        best = r.rate
    return best


def saturated_throughput(results: list[ServingResult]) -> ServingResult:
    """The run with the highest completed requests / s: where the throughput curve flattens."""
    return max(results, key=lambda r: r.throughput)


# ------------------------------------------------------------------------------ engines

def sim_server(scheduler: str, max_num_seqs: int = 64, max_num_batched_tokens: int = 2048):
    """Simulated Llama-3-8B on an A100-80GB profile, vLLM-like limits (chunked prefill on)."""
    from labkit import LLM

    config = EngineConfig(scheduler=scheduler, max_num_seqs=max_num_seqs, max_model_len=4096,
                          max_num_batched_tokens=max_num_batched_tokens)
    return LLM(model="sim", config=config, model_profile="llama-3-8b", hardware="a100-80gb")


def real_server(scheduler: str, max_num_seqs: int = 8, max_model_len: int = 256):
    from labkit.labs.lab03_batching.offline import real_engine_factory

    return real_engine_factory(max_num_seqs, max_model_len)(scheduler)


def calibrated_sim_server(scheduler: str, hardware, max_num_seqs: int = 8, max_model_len: int = 256):
    """The simulated SmolLM2-135M with a hardware profile fitted to this CPU (``scaling.calibrate``).

    ``LLM(model="sim", hardware=...)`` takes the fitted profile itself."""
    from labkit import LLM

    config = EngineConfig(scheduler=scheduler, max_num_seqs=max_num_seqs, max_model_len=max_model_len,
                          max_num_batched_tokens=1024)
    return LLM(model="sim", config=config, model_profile="smollm2-135m", hardware=replace(hardware))


# ------------------------------------------------------------------------------ the sections' records
#
# Section 4 (the simulated rate sweep and the bursty pair) and section 5.1 (real model beside the
# calibrated simulation) save records; their tables, sentences and titles render from them alone
# (``views.serving_narration``, ``views.fidelity_narration``).

SERVING_SECTION = "4-serving"
FIDELITY_SECTION = "5.1-fidelity"


def result_to_dict(r: ServingResult) -> dict:
    return {f: getattr(r, f) for f in ServingResult.__dataclass_fields__}


def record_serving(sweep: dict[str, list[ServingResult]], bursty: list[ServingResult], slo: SLO,
                   burst_rate: float | None = None):
    """Section 4 as a record: every policy's runs over the swept rates, the bursty pair and the SLO. The
    simulator charges host work in CPU time, so the context's load says how busy the host was."""
    from labkit.labs.common.records import RunContext, SectionRecord

    return SectionRecord(lab="03", section=SERVING_SECTION, context=RunContext.current(),
                         rounds={f"{name}/goodput": [r.goodput for r in results] for name, results in sweep.items()},
                         values={"sweep": {name: [result_to_dict(r) for r in results] for name, results in sweep.items()},
                                 "bursty": [result_to_dict(r) for r in bursty], "burst_rate": burst_rate,
                                 "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s}})


def serving_from_record(rec) -> tuple[dict[str, list[ServingResult]], list[ServingResult], SLO]:
    v = rec.values
    return ({name: [ServingResult(**d) for d in results] for name, results in v["sweep"].items()},
            [ServingResult(**d) for d in v["bursty"]], SLO(**v["slo"]))


def serve_fidelity(cpu_profile, trace: list[TraceRequest], rate: float, slo: SLO, max_num_seqs: int = 4):
    """Section 5.1: the real model (wall clock) then the calibrated simulation, static and continuous, on
    one trace; returns (real, simulated, (load before, load after the real runs))."""
    from labkit.labs.common.measure import machine_load

    before = machine_load()
    real = [serve_trace(real_server(name, max_num_seqs=max_num_seqs), trace, rate, slo, name) for name in ("static", "continuous")]
    load = (before, machine_load())
    sim = [serve_trace(calibrated_sim_server(name, cpu_profile, max_num_seqs=max_num_seqs), trace, rate, slo, name)
           for name in ("static", "continuous")]
    return real, sim, load


def record_fidelity(real: list[ServingResult], sim: list[ServingResult], load: tuple, cpu_profile, base_step,
                    rate: float, slo: SLO):
    """Section 5.1 as a record: the calibration (from section 5's batch-1 step ``base_step``, a
    ``scaling.StepTiming``, and the prefill slope), both pairs of runs and the load around the real ones."""
    from dataclasses import asdict

    from labkit.labs.common.records import RunContext, SectionRecord

    loads = [x for x in load if x is not None]
    return SectionRecord(lab="03", section=FIDELITY_SECTION, context=RunContext.current(load=max(loads, default=None)),
                         rounds={f"real/{r.label}/ttft_p50_s": [r.ttft_p50_s] for r in real},
                         values={"real": [result_to_dict(r) for r in real], "simulated": [result_to_dict(r) for r in sim],
                                 "load": list(load), "bandwidth": cpu_profile.mem_bandwidth, "compute": cpu_profile.compute,
                                 "base_step": asdict(base_step), "rate": rate,
                                 "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s}})


def fidelity_from_record(rec) -> tuple[list[ServingResult], list[ServingResult]]:
    return [ServingResult(**d) for d in rec.values["real"]], [ServingResult(**d) for d in rec.values["simulated"]]
