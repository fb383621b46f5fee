"""Lab 04's experiments on the real model: speed-up vs k, per workload, and per batch size.

Every engine is built once (``Engines``) and warmed up; plain greedy and the speculative engines
serve the same prompts in rounds whose order reverses from round to round (a neighbour's load then
hits both sides of a ratio), and ``speedup.aggregate`` turns the runs into ``Row``s with α, c,
verify cost, the measured speed-up and both predictions.

    engines = Engines()
    rows = sweep_k(engines, "ngram", "copy", ks=[1, 2, 4, 8], num_prompts=1, max_tokens=32)
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.labs.lab04_speculative.speedup import (
    Clock,
    Row,
    RunStats,
    Timers,
    aggregate,
    default_clock,
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
LAB_CONFIG = {"device": "auto", "dtype": "auto", "num_blocks": 64, "max_num_batched_tokens": 1024}
# Batch experiment: 16 copy-heavy prompts (3,459 tokens) prefill in one step and decode side by side.
BATCH_CONFIG = {"device": "auto", "dtype": "auto", "num_blocks": 320, "max_num_batched_tokens": 4096,
                "max_num_seqs": 16}


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
    def clock(self) -> Clock:
        if self._clock is None:
            device = getattr(self.get("plain").engine.runner, "device", None)
            self._clock = default_clock(device)
        return self._clock

    def get(self, method: str, k: int = 0):
        from labkit import SpecConfig

        if method != "plain" and method not in METHODS:
            raise ValueError(f"method must be 'plain' or one of {list(METHODS)}, got {method!r}")
        name = engine_name(method, k)
        if name not in self.llms:
            spec = None if method == "plain" else SpecConfig(num_speculative_tokens=k, **METHODS[method])
            llm = make_llm(self.model, spec, self.config)
            llm.generate([[1, 2, 3, 4]], _warmup_params())       # first calls allocate and pick kernels
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


def measure_rounds(engines: Engines, names: list[str], batches: list[list[list[int]]],
                   max_tokens: int) -> list[dict[str, RunStats]]:
    """One round per batch of prompts: every engine serves it; the order reverses each round."""
    rounds = []
    for i, batch in enumerate(batches):
        order = names if i % 2 == 0 else names[::-1]
        rounds.append({name: run_batch(engines.get(*_split(name)), batch, max_tokens, engines.timed(name))
                       for name in order})
    return rounds


def _split(name: str) -> tuple[str, int]:
    method, _, k = name.partition(" k=")
    return method, int(k or 0)


# ----------------------------------------------------------------------------- the three experiments

def sweep_k(engines: Engines, method: str, workload: str, ks: list[int], num_prompts: int,
            max_tokens: int) -> list[Row]:
    """Speed-up vs k for one method on one workload (single stream)."""
    names = ["plain"] + [engine_name(method, k) for k in ks]
    batches = [[p] for p in engines.encode(workload, num_prompts)]
    rounds = measure_rounds(engines, names, batches, max_tokens)
    return [aggregate(workload, name, rounds) for name in names[1:]]


def workload_matrix(engines: Engines, methods: list[str], workloads: list[str], k: int, num_prompts: int,
                    max_tokens: int) -> list[Row]:
    """Every method at one k on every workload (single stream)."""
    names = ["plain"] + [engine_name(m, k) for m in methods]
    rows = []
    for workload in workloads:
        rounds = measure_rounds(engines, names, [[p] for p in engines.encode(workload, num_prompts)], max_tokens)
        rows += [aggregate(workload, name, rounds) for name in names[1:]]
    return rows


@dataclass(frozen=True)
class BatchRow:
    batch: int
    row: Row
    plain_step_s: float      # mean plain decode step at this batch size
    spec_step_s: float       # mean speculative decode step


def batch_effect(engines: Engines, method: str, k: int, workload: str, batch_sizes: list[int],
                 max_tokens: int, min_requests: int = 4) -> list[BatchRow]:
    """Speed-up at several batch sizes. Batch size b serves the first max(b, ``min_requests``)
    prompts of the workload in groups of b, so small batches see the same requests (batch 1 and
    batch 4 both serve prompts 0-3: one at a time, or all four together)."""
    names = ["plain", engine_name(method, k)]
    out = []
    for b in batch_sizes:
        prompts = engines.encode(workload, max(b, min_requests), split=None)
        rounds = measure_rounds(engines, names, [prompts[i:i + b] for i in range(0, len(prompts), b)], max_tokens)
        plain, spec = [r["plain"] for r in rounds], [r[names[1]] for r in rounds]
        out.append(BatchRow(b, aggregate(f"batch {b}", names[1], rounds), _mean_step(plain), _mean_step(spec)))
    return out


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
