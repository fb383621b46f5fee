"""Measuring speculative decoding: decode time, α, c and verify cost of one run, and the predictions.

Shared by lab 04 and ``bench/spec.py`` (the benchmark imports these; it adds tables and a CLI).

Decode time. Serve prompts that all prefill in the first engine step; decode time is every step
after it, plus the proposer call that ends the prefill step (it drafts for the first decode step).
Prefill is the same work with or without speculation, so it is left out. ``clock`` is passed in:
process CPU time with one thread (a busy neighbour does not count), else wall time.

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

import time
from dataclasses import dataclass, field
from typing import Callable

Clock = Callable[[], float]
CPU_CONFIG = {"device": "cpu", "dtype": "float32", "num_blocks": 64}


def default_clock(device=None) -> Clock:
    """Process CPU time on a CPU with one torch thread (a busy neighbour's slices do not count);
    wall time with more threads (CPU time would sum them) or on a GPU (its work is not CPU time)."""
    import torch

    on_gpu = getattr(device, "type", device) == "cuda"
    return time.process_time if torch.get_num_threads() == 1 and not on_gpu else time.perf_counter


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
    from labkit.hooks import SpecVerified, TokensAppended

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


def aggregate(workload: str, name: str, rounds: list[dict[str, RunStats]]) -> Row:
    """Sum engine ``name`` ("<method> k=<k>") over its rounds, against each round's "plain" run."""
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
    return Row(workload, name, k, acceptance_mle(drafted, accepted), acceptance_rate(drafted, accepted),
               len(drafted) / max(request_steps, 1), propose_step_s / (k * plain_step_s),
               sum(r.decode_tokens for r in runs) / max(request_steps, 1),
               (spec_step_s - propose_step_s) / plain_step_s,
               sum(p.decode_s for p in plain) / max(sum(r.decode_s for r in runs), 1e-9), f"{same}/{len(runs)}",
               tuple(drafted), request_steps, sum(accepted),
               sum(a + (1 if a < d else 0) for d, a in zip(drafted, accepted)))
