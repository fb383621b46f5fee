"""Lab 04's experiments on the real model: speed-up vs k, per workload, and per batch size.

Every engine is built once (``Engines``) and warmed up (its first calls, which allocate and pick
kernels, are not timed); plain greedy and the speculative engines serve the same prompts in
``ROUNDS`` rounds whose order reverses from round to round (a neighbour's load then hits both sides
of a ratio), all on one torch thread and timed on the CPU clock (``labkit.labs.common.measure``).
``speedup.aggregate`` turns the runs into ``Row``s with α, c, verify cost, the measured speed-up,
both predictions, and verdicts whose confidence comes from the spread over rounds; each verdict is
recorded in the learner's ``results/lab04.json``.

    engines = Engines()
    rows = sweep_k(engines, "ngram", "copy", ks=[1, 2, 4, 8], num_prompts=1, max_tokens=32)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.labs.common.measure import (
    Verdict,
    cores,
    cpu_clock,
    describe_machine,
    machine_load,
    measuring,
    record_verdict,
    verdict_from_ratios,
)
from labkit.labs.lab04_speculative.speedup import (
    Clock,
    Conditions,
    Row,
    RunStats,
    Timers,
    aggregate,
    make_llm,
    run_batch,
)
from labkit.spec_decode.theory import optimal_k

METHODS = {   # name: SpecConfig fields
    "ngram": dict(method="ngram"),
    "draft": dict(method="draft"),
    "int4": dict(method="draft", draft_model="target-int4"),
}
METHOD_LABELS = {"ngram": ("n-gram 提示查找", "n-gram prompt lookup"),
                 "draft": ("2 层草稿模型", "2-layer draft model"),
                 "int4": ("目标模型的 4-bit 副本", "4-bit copy of the target")}
WORKLOADS = ("copy", "chat", "code", "json")
# Single stream: room for the longest prompt (423 tokens) plus output. Every engine has its own pool
# (the weights are shared), so the many single-stream engines keep theirs small.
# Prefix caching is on (vLLM's default too): the experiments time decode steps only, and every round
# serves the same prompts again, so a repeated prompt re-prefills at most its last partial block. That
# saves each engine's later rounds their prefill and changes no decode step (a draft model keeps its own
# KV and catches up on the whole prompt, cached or not). No section here reports a time to first token.
LAB_CONFIG = {"device": "auto", "dtype": "auto", "num_blocks": 64, "max_num_batched_tokens": 1024,
              "enable_prefix_caching": True}
# Batch experiment: 16 copy-heavy prompts (3,459 tokens) prefill in one step and decode side by side.
# Every batch size serves the first prompts again (batch 1 and 4 the same four), so with the cache a
# prompt's prefill is paid once per engine: that halves the experiment's time.
BATCH_CONFIG = {"device": "auto", "dtype": "auto", "num_blocks": 320, "max_num_batched_tokens": 4096,
                "max_num_seqs": 16, "enable_prefix_caching": True}
ROUNDS = 2            # rounds per comparison: a verdict needs the spread of at least two (full mode ≤ 3 min)
LAB = "04"            # results/lab04.json


def engine_name(method: str, k: int) -> str:
    return "plain" if method == "plain" else f"{method} k={k}"


class Engines:
    """One warmed-up ``LLM`` per (method, k), built on first use; all share the target's weights."""

    def __init__(self, config: dict | None = None, clock: Clock | None = None, model: str | None = None):
        self.config, self.model = dict(config or LAB_CONFIG), model
        self.llms: dict[str, object] = {}
        self.timers: dict[str, Timers] = {}
        self._clock = clock

    @property
    def device(self):
        return getattr(self.get("plain").engine.runner, "device", None)

    @property
    def clock(self) -> Clock:
        """The clock passed in, else ``measure.cpu_clock`` for the engines' device (read afresh on
        every call, so ``measure.clock_override`` reaches engines built before it)."""
        if self._clock is not None:
            return self._clock
        device = self.device
        return lambda: cpu_clock(device)()

    @property
    def clock_name(self) -> str:
        return getattr(self._clock, "name", "injected clock") if self._clock is not None else \
            cpu_clock(self.device).name

    def get(self, method: str, k: int = 0):
        from labkit import SpecConfig

        if method != "plain" and method not in METHODS:
            raise ValueError(f"method must be 'plain' or one of {list(METHODS)}, got {method!r}")
        name = engine_name(method, k)
        if name not in self.llms:
            spec = None if method == "plain" else SpecConfig(num_speculative_tokens=k, **METHODS[method])
            with measuring():
                llm = make_llm(self.model, spec, self.config)
                llm.generate([[1, 2, 3, 4]], _warmup_params())   # first calls allocate and pick kernels
            self.llms[name] = llm
        return self.llms[name]

    def timed(self, name: str) -> Timers:
        if name not in self.timers:
            method, _, k = name.partition(" k=")
            self.timers[name] = Timers.attach(self.get(method, int(k or 0)).engine, self.clock)
        return self.timers[name]

    def encode(self, workload: str, count: int, split: str | None = "heldout") -> list[list[int]]:
        """The first ``count`` prompts of a workload (chat template applied), cycling if needed."""
        from labkit.traces import load_prompts

        texts = load_prompts(workload, split)
        tokenizer = self.get("plain").tokenizer
        return [tokenizer.encode_prompt(texts[i % len(texts)]) for i in range(count)]


def _warmup_params():
    from labkit import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True)


@dataclass(frozen=True)
class Measured:
    rounds: list[dict[str, RunStats]]
    conditions: Conditions


def measure_rounds(engines: Engines, names: list[str], batches: list[list[list[int]]], max_tokens: int,
                   repeats: int = 1, what: tuple[str, str] = ("", "")) -> Measured:
    """Every engine serves every batch ``repeats`` times, one batch per round, the order of engines
    reversing each round; on ``measure.measuring()`` threads, with a progress bar naming ``what``."""
    from tqdm.auto import tqdm

    from labkit.i18n import t

    plan = [b for _ in range(repeats) for b in batches]
    rounds: list[dict[str, RunStats]] = []
    label = t(*what) if any(what) else ", ".join(names)
    bar = tqdm(total=len(plan) * len(names), desc=t(f"测量：{label}", f"measuring: {label}"), leave=False,
               unit=t("次", "run"))
    load_before = machine_load()
    with measuring():
        for i, batch in enumerate(plan):
            order = names if i % 2 == 0 else names[::-1]
            runs = {}
            for name in order:
                bar.set_postfix_str(name)
                runs[name] = run_batch(engines.get(*_split(name)), batch, max_tokens, engines.timed(name))
                bar.update(1)
            rounds.append({name: runs[name] for name in names})
    bar.close()
    conditions = Conditions(engines.clock_name, load_before, machine_load(), cores(), describe_machine(),
                            {name: _spread(plan, [r[name] for r in rounds]) for name in names})
    return Measured(rounds, conditions)


def _spread(plan: list[list[list[int]]], runs: list[RunStats]) -> float:
    """The largest slowest/fastest step time over rounds that served the same batch (1.0 if none repeats)."""
    by_batch: dict[tuple, list[float]] = {}
    for batch, run in zip(plan, runs):
        if run.decode_steps:
            by_batch.setdefault(tuple(map(tuple, batch)), []).append(run.decode_s / run.decode_steps)
    spreads = [max(v) / min(v) for v in by_batch.values() if len(v) > 1 and min(v) > 0]
    return max(spreads, default=1.0)


def _record(rows: list[Row], lab: str | None) -> None:
    if lab is None:
        return
    for row in rows:
        for verdict in (row.verdict, row.verify_verdict):
            if verdict is not None:
                record_verdict(lab, verdict, k=row.k, alpha=row.alpha, identical=row.identical,
                               round_values=list(verdict_rounds(row, verdict)))


def verdict_rounds(row: Row, verdict: Verdict) -> tuple:
    return row.round_speedups if verdict is row.verdict else row.round_verify_costs


def _split(name: str) -> tuple[str, int]:
    method, _, k = name.partition(" k=")
    return method, int(k or 0)


# ----------------------------------------------------------------------------- the three experiments

def sweep_k(engines: Engines, method: str, workload: str, ks: list[int], num_prompts: int,
            max_tokens: int, rounds: int | None = None, lab: str | None = LAB) -> list[Row]:
    """Speed-up vs k for one method on one workload (single stream): each prompt served ``rounds``
    times (default ``ROUNDS``) by every engine."""
    names = ["plain"] + [engine_name(method, k) for k in ks]
    batches = [[p] for p in engines.encode(workload, num_prompts)]
    m = measure_rounds(engines, names, batches, max_tokens, _repeats(rounds, len(batches)),
                       (f"{method}，{workload}，k = {ks}", f"{method}, {workload}, k = {ks}"))
    rows = [aggregate(workload, name, m.rounds, m.conditions) for name in names[1:]]
    _record(rows, lab)
    return rows


def _repeats(rounds: int | None, batches: int) -> int:
    """Repeats of the batch list that give at least ``rounds`` rounds."""
    rounds = ROUNDS if rounds is None else rounds
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds!r}")
    return max(1, math.ceil(rounds / max(batches, 1)))


def workload_matrix(engines: Engines, methods: list[str], workloads: list[str], k: int, num_prompts: int,
                    max_tokens: int, rounds: int | None = None, lab: str | None = LAB) -> list[Row]:
    """Every method at one k on every workload (single stream)."""
    names = ["plain"] + [engine_name(m, k) for m in methods]
    rows = []
    for workload in workloads:
        batches = [[p] for p in engines.encode(workload, num_prompts)]
        m = measure_rounds(engines, names, batches, max_tokens, _repeats(rounds, len(batches)),
                           (f"{workload}，k = {k}", f"{workload}, k = {k}"))
        rows += [aggregate(workload, name, m.rounds, m.conditions) for name in names[1:]]
    _record(rows, lab)
    return rows


@dataclass(frozen=True)
class BatchRow:
    batch: int
    row: Row
    plain_step_s: float      # mean plain decode step at this batch size
    spec_step_s: float       # mean speculative decode step
    plain_step_rounds: tuple = ()   # the plain step per round (its spread hedges comparisons across batch sizes)


def batch_effect(engines: Engines, method: str, k: int, workload: str, batch_sizes: list[int],
                 max_tokens: int, min_requests: int = 4, rounds: int | None = None,
                 lab: str | None = LAB) -> list[BatchRow]:
    """Speed-up at several batch sizes. Batch size b serves the first max(b, ``min_requests``)
    prompts of the workload in groups of b, so small batches see the same requests (batch 1 and
    batch 4 both serve prompts 0-3: one at a time, or all four together); the groups repeat until
    there are ``rounds`` rounds."""
    names = ["plain", engine_name(method, k)]
    out = []
    for b in batch_sizes:
        prompts = engines.encode(workload, max(b, min_requests), split=None)
        groups = [prompts[i:i + b] for i in range(0, len(prompts), b)]
        m = measure_rounds(engines, names, groups, max_tokens, _repeats(rounds, len(groups)),
                           (f"批大小 {b}", f"batch {b}"))
        plain, spec = [r["plain"] for r in m.rounds], [r[names[1]] for r in m.rounds]
        out.append(BatchRow(b, aggregate(f"batch {b}", names[1], m.rounds, m.conditions), _mean_step(plain),
                            _mean_step(spec), tuple(_mean_step([p]) for p in plain)))
    _record([b.row for b in out], lab)
    if lab is not None and len(out) > 1:
        for verdict in batch_verdicts(out):
            record_verdict(lab, verdict)
    return out


def batch_verdicts(rows: list[BatchRow]) -> tuple[Verdict, Verdict]:
    """From the first batch size to the last: (does a plain step get slower?, does the speed-up
    change?). Different batch sizes are different runs, so each ratio's range is the worst case of
    the two per-round ranges (the slowest over the fastest round, and the other way round)."""
    first, last = rows[0], rows[-1]
    step = _range_verdict(last.plain_step_rounds or (last.plain_step_s,),
                          first.plain_step_rounds or (first.plain_step_s,), last.plain_step_s / first.plain_step_s,
                          0.2, last.row.verdict, id=f"batch/plain_step/{first.batch}->{last.batch}",
                          claim=(f"普通解码一步：批 {last.batch} / 批 {first.batch}",
                                 f"plain step: batch {last.batch} / batch {first.batch}"))
    speed = _range_verdict(last.row.round_speedups or (last.row.speedup,),
                           first.row.round_speedups or (first.row.speedup,), last.row.speedup / first.row.speedup,
                           0.05, last.row.verdict, id=f"batch/speedup/{first.batch}->{last.batch}",
                           claim=(f"加速比：批 {last.batch} / 批 {first.batch}",
                                  f"speed-up: batch {last.batch} / batch {first.batch}"))
    return step, speed


def _range_verdict(top: tuple, bottom: tuple, ratio: float, margin: float, like: Verdict | None, **info) -> Verdict:
    ends = [min(top) / max(bottom), max(top) / min(bottom)]
    loads = [] if like is None else [x for x in (like.load_before, like.load_after) if x is not None]
    hedge = {} if like is None else dict(load=max(loads, default=None), cores=like.cores, spread=like.spread,
                                         clock=like.clock, load_before=like.load_before,
                                         load_after=like.load_after, cpu=like.cpu)
    return verdict_from_ratios(ends, ratio=ratio, margin=margin, **hedge, **info)


def _mean_step(runs: list[RunStats]) -> float:
    return sum(r.decode_s for r in runs) / max(sum(r.decode_steps for r in runs), 1)


# ----------------------------------------------------------------------------- reading a k sweep

@dataclass(frozen=True)
class OptimalK:
    measured_k: int            # the k with the largest measured speed-up
    measured_speedup: float
    alpha: float               # pooled over the sweep
    c: float                   # mean over the sweep
    textbook_k: int            # argmax of Leviathan's formula at (alpha, c), k in 0..k_max
    textbook_speedup: float
    adjusted_k: int            # argmax of the prediction that uses the measured verify cost
    verify_cost_max: float     # the largest measured verify cost (plain steps) over the sweep
    verify_cost_at_max_k: float


def read_sweep(rows: list[Row], k_max: int = 8) -> OptimalK:
    """Best k measured, by the textbook formula, and by the formula with measured verify costs."""
    from labkit.spec_decode.theory import expected_speedup

    best = max(rows, key=lambda r: r.speedup)
    alpha = pooled_alpha(rows)
    c = sum(r.c for r in rows) / len(rows)
    k_star = optimal_k(alpha, c, k_max)
    adjusted = max((r for r in rows if r.adjusted_prediction is not None), key=lambda r: r.adjusted_prediction,
                   default=best)
    last = max(rows, key=lambda r: r.k)
    return OptimalK(best.k, best.speedup, alpha, c, k_star, expected_speedup(alpha, k_star, c), adjusted.k,
                    max(r.verify_cost for r in rows), last.verify_cost)


def pooled_alpha(rows: list[Row]) -> float:
    """α̂ over all rows: their accepted drafts over their compared positions (0 if none compared)."""
    trials = sum(r.num_trials for r in rows)
    return sum(r.num_accepted for r in rows) / trials if trials else 0.0
