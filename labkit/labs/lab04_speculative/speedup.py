"""Measuring speculative decoding: decode time, α, c and verify cost of one run, and the predictions.

Shared by lab 04 and ``bench/spec.py`` (the benchmark imports these; it adds tables and a CLI).

Decode time. Serve prompts that all prefill in the first engine step; decode time is every step
after it, plus the proposer call that ends the prefill step (it drafts for the first decode step).
Prefill is the same work with or without speculation, so it is left out. ``clock`` is passed in:
``labkit.labs.common.measure.cpu_clock`` (process CPU time on one torch thread: a busy neighbour's
time slices do not count; the wall clock after synchronize on CUDA).

Verdicts (``labkit.labs.common.measure``). Engines are compared round by round (the same prompts, the order alternating),
so each round gives its own speed-up and verify cost; ``aggregate`` turns their spread into a
``Verdict`` (clear / within noise / machine busy) that the lab's sentences are rendered from.

Estimating α (Leviathan et al. 2023, §3.1: the probability that one draft token is accepted, the
same at every position). The engine reports accepted / drafted (vLLM's acceptance rate), which is
*not* α: a step stops comparing at the first rejection, so later drafts were never tried. With k
full drafts accepted / drafted = (α + α² + … + α^k) / k. Each compared position is one Bernoulli(α)
trial, so the maximum-likelihood estimate is::

    α̂ = Σ accepted / Σ trials,   trials per step = accepted + (1 if a draft was rejected else 0)

Estimating c (Definition 3.7: one draft step's time over one target step's time): the proposer's
time per engine step over k plain decode steps, so that k·c is the proposer's share of a speculative
step, as in the formula's k·c + 1. For n-gram lookup c is the lookup's cost (close to 0).

Why measurement and textbook formula differ: the formula assumes every step drafts k tokens (n-gram
proposes nothing without a match: "proposal rate") and that verifying k + 1 tokens costs one plain
step (on a CPU in fp32 it costs more: "verify cost"). ``Row.adjusted_prediction`` puts both back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from labkit.labs.common.measure import Verdict, cpu_clock, verdict_from_ratios

Clock = Callable[[], float]
CPU_CONFIG = {"device": "cpu", "dtype": "float32", "num_blocks": 64}
SPEEDUP_MARGIN = 0.05     # a speed-up within 5 % of 1 is "the same speed"
VERIFY_MARGIN = 0.10      # a verify step within 10 % of a plain step "costs one plain step"


def default_clock(device=None) -> Clock:
    """The measuring clock (``measure.cpu_clock``): process CPU time on a CPU, where the labs run
    torch on one thread (``measure.measuring``); the wall clock after synchronize on CUDA."""
    return cpu_clock(device)


def make_llm(model: str | None, spec, config: dict | None = None):
    """An LLM with ``speculative=spec``; ``config`` overrides EngineConfig fields (CPU fp32 default)."""
    from labkit import LLM, EngineConfig

    return LLM(model=model, config=EngineConfig(**(config or CPU_CONFIG), speculative=spec), progress=False)


# ----------------------------------------------------------------------------- estimators

def acceptance_mle(drafted: list[int], accepted: list[int]) -> float | None:
    """α̂ = Σ accepted / Σ trials (see the module docstring); None without any trial."""
    trials = sum(a + (1 if a < d else 0) for d, a in zip(drafted, accepted))
    return sum(accepted) / trials if trials else None


def acceptance_rate(drafted: list[int], accepted: list[int]) -> float | None:
    """The engine's (and vLLM's) accepted / drafted."""
    return sum(accepted) / sum(drafted) if sum(drafted) else None


# ----------------------------------------------------------------------------- one run

@dataclass
class RunStats:
    """One run (one prompt, or a batch served together): decode time and what the steps did."""

    decode_s: float
    token_ids: list[list[int]]                           # per request, output tokens
    decode_steps: int = 0                                # target steps after the prefill step
    request_steps: int = 0                               # sum over requests of the steps that gave it tokens
    propose_s: float = 0.0                               # proposer time over those steps
    drafted: list[int] = field(default_factory=list)     # per verification (per request and step)
    accepted: list[int] = field(default_factory=list)

    @property
    def decode_tokens(self) -> int:
        return sum(max(len(ids) - 1, 0) for ids in self.token_ids)


def _timed(obj, name: str, clock: Clock) -> list[float]:
    """Wrap ``obj.name`` on the instance so each call appends its duration to the returned list."""
    durations: list[float] = []
    inner = getattr(type(obj), name).__get__(obj)

    def wrapper(*args, **kwargs):
        t0 = clock()
        try:
            return inner(*args, **kwargs)
        finally:
            durations.append(clock() - t0)

    setattr(obj, name, wrapper)
    return durations


@dataclass
class Timers:
    """Durations of every ``engine.step`` and ``proposer.propose`` call of one engine."""

    steps: list[float]
    proposals: list[float]

    @classmethod
    def attach(cls, engine, clock: Clock) -> "Timers":
        proposals = _timed(engine.proposer, "propose", clock) if engine.proposer is not None else []
        return cls(_timed(engine, "step", clock), proposals)

    def clear(self) -> None:
        self.steps.clear()
        self.proposals.clear()


def run_batch(llm, prompts: list[list[int]], max_tokens: int, timers: Timers) -> RunStats:
    """Serve ``prompts`` together, greedy (their prefill must fit the first step)."""
    from labkit import SamplingParams
    from labkit.events import SpecVerified, TokensAppended

    if sum(map(len, prompts)) > llm.engine.config.max_num_batched_tokens:
        raise ValueError("prompts must prefill in one step: their total length exceeds max_num_batched_tokens")
    verified: list[SpecVerified] = []
    appended: list[TokensAppended] = []
    on_verify = llm.engine.hooks.subscribe(verified.append, SpecVerified)
    on_append = llm.engine.hooks.subscribe(appended.append, TokensAppended)
    timers.clear()
    try:
        outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens))
    finally:
        llm.engine.hooks.unsubscribe(on_verify)
        llm.engine.hooks.unsubscribe(on_append)
    # Step 1 is the prefill; its last act is the proposer call that drafts for step 2. The later
    # proposer calls happen inside steps 2, 3, ...: all of ``proposals`` is decode-time work.
    decode_s = sum(timers.steps[1:]) + sum(timers.proposals[:1])
    return RunStats(decode_s, [o.token_ids for o in outs], len(timers.steps) - 1, len(appended) - len(prompts),
                    sum(timers.proposals), [v.drafted for v in verified], [v.accepted for v in verified])


def run_one(llm, prompt: list[int], max_tokens: int, timers: Timers) -> RunStats:
    return run_batch(llm, [prompt], max_tokens, timers)


# ----------------------------------------------------------------------------- aggregated rows

@dataclass(frozen=True)
class Row:
    """One (workload, engine, k) summed over runs, against the plain runs of the same rounds."""

    workload: str
    name: str
    k: int
    alpha: float | None
    accepted_over_drafted: float | None
    proposal_rate: float     # verifications per request-step (steps without drafts are plain steps)
    c: float                 # proposer time per step / (k · plain step time)
    tokens_per_step: float   # output tokens per request-step
    verify_cost: float       # (speculative step − proposer) / plain step
    speedup: float           # plain decode time / speculative decode time
    identical: str           # "same/total" runs whose output equals plain greedy
    drafted: tuple = ()      # drafts per verification
    steps: int = 0           # request-steps while decoding
    num_accepted: int = 0    # accepted drafts, and compared positions (accepted + rejections): α̂ = ratio
    num_trials: int = 0
    round_speedups: tuple = ()       # per round: plain time per token / speculative time per token
    round_verify_costs: tuple = ()   # per round: verify cost
    verdict: Verdict | None = None          # is it faster than plain decoding? (ratio = speed-up)
    verify_verdict: Verdict | None = None   # does a verify step cost more than a plain step? (ratio = verify cost)

    @property
    def method(self) -> str:
        return self.name.split()[0]

    @property
    def all_identical(self) -> bool:
        same, total = self.identical.split("/")
        return same == total

    @property
    def adjusted_tokens_per_step(self) -> float | None:
        """E[tokens per step] from α when only the measured share of steps verify, each with the
        number of drafts it actually had: steps without drafts emit one token."""
        from labkit.spec_decode.theory import expected_tokens_per_step

        if self.alpha is None or not self.steps:
            return None
        verified = sum(expected_tokens_per_step(self.alpha, d) for d in self.drafted)
        return (verified + max(self.steps - len(self.drafted), 0)) / self.steps

    @property
    def adjusted_prediction(self) -> float | None:
        """Leviathan's model with the two CPU facts the textbook formula leaves out: the measured
        proposal rate and the measured verify cost. Equals the textbook formula when every step
        drafts k and verify cost is 1."""
        tokens = self.adjusted_tokens_per_step
        return None if tokens is None else tokens / (self.verify_cost + self.k * self.c)

    @property
    def prediction(self) -> float | None:
        from labkit.spec_decode.theory import expected_speedup

        return expected_speedup(self.alpha, self.k, self.c) if self.alpha is not None else None

    @property
    def predicted_tokens_per_step(self) -> float | None:
        from labkit.spec_decode.theory import expected_tokens_per_step

        return expected_tokens_per_step(self.alpha, self.k) if self.alpha is not None else None


@dataclass(frozen=True)
class Conditions:
    """How a set of rounds was measured: the clock, the load before and after, the cores, the CPU,
    and for each engine the largest slowest/fastest ratio of its step time over rounds that served
    the same prompts (a disturbed measurement spreads)."""

    clock: str = ""
    load_before: float | None = None
    load_after: float | None = None
    cores: int = 1
    cpu: str = ""
    spread: dict = field(default_factory=dict)

    @property
    def load(self) -> float | None:
        loads = [x for x in (self.load_before, self.load_after) if x is not None]
        return max(loads) if loads else None


def _per_token(run: RunStats) -> float:
    return run.decode_s / max(run.decode_tokens, 1)


def _per_step(runs: list[RunStats]) -> float:
    return sum(r.decode_s for r in runs) / max(sum(r.decode_steps for r in runs), 1)


def _verdicts(workload: str, name: str, speedup: float, verify_cost: float, round_speedups: list[float],
              round_verify: list[float], conditions: Conditions | None) -> tuple[Verdict | None, Verdict | None]:
    if not round_speedups or any(r <= 0 for r in round_speedups + round_verify):
        return None, None
    c = conditions or Conditions()
    spread = max([c.spread.get(name, 1.0), c.spread.get("plain", 1.0)])
    info = dict(load=c.load, cores=c.cores, spread=spread, clock=c.clock, load_before=c.load_before,
                load_after=c.load_after, cpu=c.cpu)
    speed = verdict_from_ratios(round_speedups, ratio=speedup, margin=SPEEDUP_MARGIN, quantity="speed",
                                id=f"speedup/{workload}/{name}",
                                claim=(f"{name} 相对普通解码的加速比（{workload}）",
                                       f"speed-up of {name} over plain decoding ({workload})"), **info)
    verify = verdict_from_ratios(round_verify, ratio=verify_cost, margin=VERIFY_MARGIN,
                                 id=f"verify_cost/{workload}/{name}",
                                 claim=(f"{name} 验证一步 / 普通解码一步（{workload}）",
                                        f"verify step / plain step of {name} ({workload})"), **info)
    return speed, verify


def aggregate(workload: str, name: str, rounds: list[dict[str, RunStats]],
              conditions: Conditions | None = None) -> Row:
    """Sum engine ``name`` ("<method> k=<k>") over its rounds, against each round's "plain" run;
    with ``conditions`` (how the rounds were measured) the verdicts are hedged by load and spread."""
    k = int(name.split("k=")[1])
    runs, plain = [r[name] for r in rounds], [r["plain"] for r in rounds]
    drafted = [d for r in runs for d in r.drafted]
    accepted = [a for r in runs for a in r.accepted]
    steps = sum(r.decode_steps for r in runs)
    request_steps = sum(r.request_steps for r in runs)
    plain_step_s = sum(p.decode_s for p in plain) / max(sum(p.decode_steps for p in plain), 1)
    spec_step_s = sum(r.decode_s for r in runs) / max(steps, 1)
    propose_step_s = sum(r.propose_s for r in runs) / max(steps, 1)
    same = sum(r.token_ids == p.token_ids for r, p in zip(runs, plain))
    speedup = sum(p.decode_s for p in plain) / max(sum(r.decode_s for r in runs), 1e-9)
    verify_cost = (spec_step_s - propose_step_s) / plain_step_s
    round_speedups = [_per_token(p) / _per_token(r) for p, r in zip(plain, runs) if r.decode_s > 0]
    round_verify = [(_per_step([r]) - r.propose_s / max(r.decode_steps, 1)) / _per_step([p])
                    for p, r in zip(plain, runs) if p.decode_s > 0 and r.decode_steps]
    speed_v, verify_v = _verdicts(workload, name, speedup, verify_cost, round_speedups, round_verify, conditions)
    return Row(workload, name, k, acceptance_mle(drafted, accepted), acceptance_rate(drafted, accepted),
               len(drafted) / max(request_steps, 1), propose_step_s / (k * plain_step_s),
               sum(r.decode_tokens for r in runs) / max(request_steps, 1), verify_cost, speedup,
               f"{same}/{len(runs)}", tuple(drafted), request_steps, sum(accepted),
               sum(a + (1 if a < d else 0) for d, a in zip(drafted, accepted)),
               tuple(round_speedups), tuple(round_verify), speed_v, verify_v)
