"""How a probe times product forms on this CPU, and the rule that keeps the faster one.

Every probe here (the fp32 form, the bf16 form, the C kernels' walks) sweeps a sample of the model's own
weights, as a decode step streams them, at the row counts a step multiplies; forms are timed in
interleaved rounds (A B, B A, ...) after a warm-up, and each keeps its fastest round. A form replaces the
default only if it is faster by more than `MARGIN`: a near tie is noise on a shared machine.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

import torch

DECODE_ROWS = (1, 2, 4, 8, 16)   # decode batches and verification rows the probes time
PREFILL_ROWS = (64, 256)         # prefill sizes the probes time
PREFILL_BYTES = 8 << 20          # per shape: compute-bound at these row counts, so a small sample shows it
# Weight bytes of each shape in the fp32 probe's sweep: all of them for the default model. A 16 MiB sample
# per shape stayed in the cache (480 MiB of L3 on the AMX Xeon this was measured on) and chose
# F.linear at 4-8 rows, where in the model's full sweep it took 1.2x as long as (W @ xᵀ)ᵀ: which
# kernel streams weights better is only seen when the weights stream. So the first load on a machine
# spends ~10 s per thread count probing (then the disk cache answers).
PROBE_BYTES = 1 << 30
MARGIN = 0.03                    # another form must beat the default by more than this to replace it
PROBE_ROUNDS = 2                 # interleaved rounds after a warm-up; the minimum of each form counts
Name = TypeVar("Name", bound=str)
R = TypeVar("R")


def choose(timings: dict[Name, float], exact: list[Name], margin: float = MARGIN) -> Name:
    """The fastest form among the exact ones (``timings``: seconds per form; forms without a time are
    skipped), except that the first exact form (the default: ``F.linear``, what transformers computes) is
    kept unless another is faster by more than ``margin`` (a fraction): a near tie is noise on a shared
    machine, and should not flip the choice from one probe to the next. Raises if no exact form was timed."""
    timed = [name for name in exact if name in timings]
    if not timed:
        raise ValueError(f"no exact form was timed: exact {exact}, timed {sorted(timings)}")
    best = min(timed, key=lambda name: (timings[name], timed.index(name)))
    return timed[0] if timings[timed[0]] <= timings[best] * (1 + margin) else best


def _clock() -> Callable[[], float]:
    # One thread: the process CPU clock (a neighbour's load does not count). More: wall time.
    return time.process_time if torch.get_num_threads() == 1 else time.perf_counter


def probe_weights(weights: list[torch.Tensor], budget: int = PROBE_BYTES) -> list[torch.Tensor]:
    """The first tensors of a same-shape group up to ``budget`` bytes (at least one, cut to its first
    rows if it alone is larger): each timed call sweeps them in turn, so the product streams its
    weights as a decode step does, in a few milliseconds."""
    chosen, size = [], 0
    for w in weights:
        nbytes = w.numel() * w.element_size()
        if size + nbytes > budget:
            if not chosen:
                chosen.append(w[:max(budget // (w.shape[1] * w.element_size()), 1)])
            break
        chosen.append(w)
        size += nbytes
    return chosen


def time_forms(weights: list[torch.Tensor], rows: int, forms: dict[Name, Callable], rounds: int = PROBE_ROUNDS,
               dtype: torch.dtype | None = None) -> dict[Name, float]:
    """{form: seconds for one sweep of ``weights`` at ``rows`` rows} for each of ``forms`` ({name: fn(x, w)}),
    the minimum over interleaved rounds (A B, B A, ...) after one warm-up sweep of each; the inputs take
    ``dtype`` (default: the weights' dtype)."""
    names = list(forms)
    clock = _clock()
    g = torch.Generator().manual_seed(rows)
    inputs = {w.shape[1]: torch.randn(rows, w.shape[1], generator=g).to(dtype or w.dtype) for w in weights}
    pairs = [(inputs[w.shape[1]], w) for w in weights]
    best = {name: float("inf") for name in names}
    with torch.inference_mode():
        for r in range(rounds + 1):
            for name in (names if r % 2 == 0 else names[::-1]):
                fn = forms[name]
                t0 = clock()
                for x, w in pairs:
                    fn(x, w)
                if r:                        # round 0 warms up
                    best[name] = min(best[name], clock() - t0)
    return best


def with_threads(threads: int, fn: Callable[[], R]) -> R:
    """``fn()`` run with ``threads`` PyTorch threads, the current count restored after."""
    current = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fn()
    finally:
        torch.set_num_threads(current)
