"""Offline throughput: the same trace, every request at t = 0, through a static and a continuous engine.

Static (request-level) batching runs a batch until its longest request ends; continuous
(iteration-level) batching refills a slot the step after it frees. If every step cost the same,
the time ratio would equal the step-count ratio, so

    ceiling = static steps / continuous steps        (measured: the engine counts its steps)

is the most continuous batching can gain on this trace. Continuous batching still needs at least
as many steps as the longest request has tokens, so ``static steps / longest request`` bounds the
ceiling from above. On a real device a fuller batch costs a little more per step, so the measured
time ratio comes in under the ceiling.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from labkit.config import EngineConfig
from labkit.labs.common.measure import (
    Verdict,
    cores,
    cpu_clock,
    machine_load,
    measuring,
    record_verdict,
    verdict_from_ratios,
)
from labkit.replay import replay, static_decode_occupancy
from labkit.sim.cost import MODELS
from labkit.sim.paper import PAPER_KV_BYTES, PAPER_MODEL
from labkit.traces import TraceRequest


@dataclass(frozen=True)
class OfflineRun:
    """One replay. ``seconds``, the basis of ``tokens_per_s``: on the real model this process's CPU
    time (one intra-op thread: it counts the work, not the time the OS gave other programs on a shared
    machine); on the simulated model the cost model's accelerator time. ``wall_s`` is the wall clock."""

    label: str
    num_requests: int
    output_tokens: int
    steps: int
    seconds: float
    wall_s: float
    occupancy_perc: float            # mean over steps of busy slots / max_num_seqs
    decode_occupancy_perc: float | None
    token_budget_perc: float         # mean over steps of scheduled tokens / max_num_batched_tokens
    max_num_seqs: int
    simulated: bool
    occupancy_while_waiting_perc: float | None = None   # mean over steps that began with requests queued
    outputs: dict[str, list[int]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds else 0.0

    @property
    def mean_batch(self) -> float:
        """Mean busy slots per step (occupancy x max_num_seqs)."""
        return self.occupancy_perc * self.max_num_seqs / 100.0


@dataclass(frozen=True)
class OfflineComparison:
    static: OfflineRun
    continuous: OfflineRun
    longest_output: int
    predicted_static_occupancy_perc: float    # labkit.replay.static_decode_occupancy on the lengths
    round_ratios: tuple = ()                  # real model: continuous / static throughput of each round
    load: tuple = (None, None)                # load average before and after the rounds
    spread: float | None = None               # real model: the larger slowest/fastest round of a policy
    clock: str = "CPU time (time.process_time)"
    round_seconds: tuple = ()                 # real model: (static rounds, continuous rounds), CPU seconds each

    def verdict(self) -> Verdict:
        """Continuous over static throughput: exact when simulated (the cost model is deterministic),
        else from the rounds' CPU times (one round: hedged, it cannot show its own noise)."""
        claim = ("连续批处理 ÷ 静态批处理的吞吐", "continuous over static throughput")
        if self.static.simulated and self.continuous.simulated:
            return Verdict.exact(self.time_ratio, margin=0.05, id="offline/continuous_over_static", claim=claim)
        loads = [x for x in self.load if x is not None]
        return verdict_from_ratios(list(self.round_ratios) or [self.time_ratio], ratio=self.time_ratio, margin=0.05,
                                   quantity="speed", load=max(loads, default=None), cores=cores(),
                                   spread=self.spread, clock=self.clock, load_before=self.load[0],
                                   load_after=self.load[1], id="offline/continuous_over_static", claim=claim)

    @property
    def time_ratio(self) -> float:
        """Continuous throughput / static throughput (= static time / continuous time)."""
        return self.continuous.tokens_per_s / self.static.tokens_per_s

    @property
    def step_ceiling(self) -> float:
        return self.static.steps / self.continuous.steps

    @property
    def longest_bound(self) -> float:
        """static steps / the longest request's output: no continuous run can take fewer steps."""
        return self.static.steps / self.longest_output

    @property
    def share_of_ceiling(self) -> float:
        return self.time_ratio / self.step_ceiling


def run_offline(llm, trace: list[TraceRequest], label: str) -> OfflineRun:
    """Replay ``trace`` to the end and summarise it (greedy, exact output lengths)."""
    engine = llm.engine
    engine.reset_metrics()
    busy_while_waiting, waiting_before = [], [len(trace)]

    def on_step(engine, _steps: int) -> None:
        """A loaded server's occupancy: steps that began with requests queued (the drain tail excluded)."""
        last = engine.metrics.last
        if waiting_before[0] > 0:
            busy_while_waiting.append(last.batch_occupancy_perc)
        waiting_before[0] = last.num_requests_waiting

    clock = cpu_clock()
    with measuring():
        c0 = clock()
        result = replay(engine, trace, keep_outputs=not engine.simulated, on_step=on_step)
        cpu_s = clock() - c0
    s = result.stats
    seconds = s["mean_model_s"] * s["num_steps"] if engine.simulated else cpu_s
    waiting = sum(busy_while_waiting) / len(busy_while_waiting) if busy_while_waiting else None
    return OfflineRun(label, len(trace), s["num_output_tokens"], s["num_steps"], seconds, result.wall_s,
                      s["mean_batch_occupancy_perc"], s["mean_decode_occupancy_perc"],
                      s["mean_token_budget_perc"], engine.config.max_num_seqs, engine.simulated, waiting, result.outputs)


def compare_offline(make_llm, trace: list[TraceRequest]) -> OfflineComparison:
    """``make_llm(scheduler)`` builds a fresh engine; both replay the same trace."""
    return compare_engines(make_llm("static"), make_llm("continuous"), trace)


def compare_engines(static_llm, continuous_llm, trace: list[TraceRequest], rounds: int = 1,
                    lab: str | None = "03") -> OfflineComparison:
    """Replay ``trace`` on two engines built alike but for the scheduler (widgets may be attached),
    ``rounds`` times, the order alternating (static, continuous, continuous, static, ...); the
    tables show the first round, the throughput uses each policy's least CPU time. On the real
    model the verdict is recorded in the lab's results summary."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds!r}")
    runs: dict[str, list[OfflineRun]] = {"static": [], "continuous": []}
    llms = {"static": static_llm, "continuous": continuous_llm}
    load_before = machine_load()
    for r in range(rounds):
        for name in (("static", "continuous") if r % 2 == 0 else ("continuous", "static")):
            runs[name].append(run_offline(llms[name], trace, name))
    load = (load_before, machine_load())
    static, continuous = (replace(runs[n][0], seconds=min(x.seconds for x in runs[n])) for n in ("static", "continuous"))
    ratios = tuple((c.output_tokens / c.seconds) / (s.output_tokens / s.seconds)
                   for s, c in zip(runs["static"], runs["continuous"]) if s.seconds > 0 and c.seconds > 0)
    # The same trace replayed again costs the same: rounds that differ widely were disturbed.
    spreads = [max(x.seconds for x in mine) / min(x.seconds for x in mine) for mine in runs.values()
               if len(mine) > 1 and min(x.seconds for x in mine) > 0]
    predicted = static_decode_occupancy([r.output_len for r in trace], static.max_num_seqs)
    comparison = OfflineComparison(static, continuous, max(r.output_len for r in trace), predicted, ratios, load,
                                   max(spreads, default=None), cpu_clock().name,
                                   tuple(tuple(x.seconds for x in runs[n]) for n in ("static", "continuous")))
    if lab is not None and not static.simulated:
        record_verdict(lab, comparison.verdict(), step_ceiling=comparison.step_ceiling)
    return comparison


def same_outputs(comparison: OfflineComparison) -> bool:
    """Greedy output per request is the same under both policies (real model runs keep outputs)."""
    a, b = comparison.static.outputs, comparison.continuous.outputs
    return list(a.values()) == list(b.values())


# ------------------------------------------------------------------------------ real model

def real_engine_factory(max_num_seqs: int, max_model_len: int = 256, block_size: int = 16):
    """``make_llm(scheduler)`` for the real model with a pool that holds a full batch at max length."""
    from labkit import LLM

    num_blocks = max_num_seqs * (-(-max_model_len // block_size)) + 1

    def make(scheduler: str):
        return LLM(progress=False, config=EngineConfig(
            scheduler=scheduler, max_num_seqs=max_num_seqs, max_model_len=max_model_len,
            num_blocks=num_blocks, block_size=block_size, max_num_batched_tokens=1024))
    return make


def sim_factory(max_num_seqs: int = 32, max_num_batched_tokens: int = 8192):
    """``make_llm(scheduler)``: simulated Llama-3-8B on an A100-80GB profile."""
    from labkit import LLM

    def make(scheduler: str):
        return LLM(model="sim", config=EngineConfig(scheduler=scheduler, max_num_seqs=max_num_seqs, max_model_len=4096,
                                                    max_num_batched_tokens=max_num_batched_tokens),
                   model_profile="llama-3-8b", hardware="a100-80gb")
    return make


def azure_occupancy(kind: str, num_requests: int, seed: int = 0) -> OfflineComparison:
    """Static vs continuous on the Azure 2023 ``kind`` length distribution, all at t = 0 (simulated)."""
    from labkit.traces import azure_like_trace

    trace = [replace(r, arrival_s=0.0) for r in azure_like_trace(kind, num_requests, seed=seed, max_total_tokens=4096)]
    return compare_offline(sim_factory(), trace)


# ------------------------------------------------------------------------------ the Anyscale setup (simulated)

ANYSCALE_SYSTEMS = {
    "static, max-length reservation": dict(scheduler="static", kv_cache="contiguous"),
    "continuous, max-length reservation": dict(scheduler="continuous", kv_cache="contiguous"),
    "continuous, paged KV": dict(scheduler="continuous", kv_cache="paged"),
}


def pool_slots(block_size: int = 16) -> int:
    """Token slots in the simulated 12 GiB pool (whole blocks, as the engine sizes it)."""
    bytes_per_block = MODELS[PAPER_MODEL].kv_bytes_per_token * block_size
    return PAPER_KV_BYTES // bytes_per_block * block_size


def anyscale_engine(system: str, max_model_len: int, max_num_seqs: int = 256):
    """A simulated 13B server with 12 GiB of KV (the vLLM paper's A100-40GB split, lab 01), like the
    blog's OPT-13B on one A100-40GB. Max-length reservation caps concurrency at pool / max_model_len (static
    batches are that large too); paged KV lets up to ``max_num_seqs`` (vLLM's default 256) run."""
    from labkit import LLM

    if system not in ANYSCALE_SYSTEMS:
        raise ValueError(f"system must be one of {sorted(ANYSCALE_SYSTEMS)}, got {system!r}")
    options = ANYSCALE_SYSTEMS[system]
    config = EngineConfig(kv_cache_bytes=PAPER_KV_BYTES, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                          max_num_batched_tokens=8192, **options)
    if options["kv_cache"] == "contiguous":     # no more requests run than reservations fit
        config = replace(config, max_num_seqs=max(1, pool_slots(config.block_size) // max_model_len))
    return LLM(model="sim", config=config, model_profile=PAPER_MODEL)


@dataclass(frozen=True)
class AnyscaleRow:
    max_output_len: int
    runs: dict[str, OfflineRun]

    def speedup(self, system: str) -> float:
        return self.runs[system].tokens_per_s / self.runs["static, max-length reservation"].tokens_per_s

    def step_ceiling(self, system: str) -> float:
        """Static steps / this system's steps: the gain if every step cost the same."""
        return self.runs["static, max-length reservation"].steps / self.runs[system].steps


def anyscale_sweep(trace_for_cap, caps: list[int]) -> list[AnyscaleRow]:
    """For each output cap, the three systems on the same ``trace_for_cap(cap)`` (simulated)."""
    rows = []
    for cap in caps:
        trace = trace_for_cap(cap)
        max_model_len = max(r.prompt_len + r.output_len for r in trace)
        rows.append(AnyscaleRow(cap, {name: run_offline(anyscale_engine(name, max_model_len), trace, name)
                                      for name in ANYSCALE_SYSTEMS}))
    return rows


# ------------------------------------------------------------------------------ section 2's record
#
# Sections 2 and 3.1 read one real-model comparison: the table, the throughput sentence, the step ceiling
# and the summary's first row render from its record (``views.offline_narration``), so they can be
# rendered from a run on another CPU and from counterfactual records.

SECTION = "2-offline"


def _run_dict(run: OfflineRun) -> dict:
    return {f: getattr(run, f) for f in OfflineRun.__dataclass_fields__ if f != "outputs"}


def record_offline(c: OfflineComparison, name: str, same_outputs: bool | None = None):
    """Section 2 as a record: both runs (without outputs), the rounds' throughput ratios, the load and
    the verdict; ``same_outputs``: whether the greedy outputs matched (checked live, where they are)."""
    from labkit.labs.common.records import RunContext, SectionRecord

    loads = [x for x in c.load if x is not None]
    return SectionRecord(lab="03", section=SECTION, context=RunContext.current(load=max(loads, default=None)),
                         rounds={"continuous_over_static": list(c.round_ratios),
                                 **{name: list(secs) for name, secs in zip(("static", "continuous"), c.round_seconds)}},
                         values={"name": name, "static": _run_dict(c.static), "continuous": _run_dict(c.continuous),
                                 "longest_output": c.longest_output,
                                 "predicted_static_occupancy_perc": c.predicted_static_occupancy_perc,
                                 "load": list(c.load), "spread": c.spread, "clock": c.clock, "same_outputs": same_outputs},
                         verdicts={"continuous_over_static": c.verdict()})


def offline_from_record(rec) -> OfflineComparison:
    v = rec.values
    return OfflineComparison(OfflineRun(**v["static"]), OfflineRun(**v["continuous"]), v["longest_output"],
                             v["predicted_static_occupancy_perc"], tuple(rec.rounds.get("continuous_over_static") or ()),
                             tuple(v["load"]), v["spread"], v["clock"],
                             tuple(tuple(rec.rounds[n]) for n in ("static", "continuous") if n in rec.rounds))
