"""The gate every product form passes before it is offered on this CPU: a row gets the same bits at
every row count and at every position in the batch.

Why it matters. A request's rows are computed in batches whose size the scheduler decides: a decode
row shares a step with 0..15 others, a prefix-cache hit recomputes only the tail of a prompt (one row
after a whole-block hit, a few after a partial one) where the first run computed the whole prompt at
once, chunked prefill cuts a prompt into pieces, speculative verification computes k + 1 rows. If a
product's bits followed the row count, any of these could flip a greedy near-tie, and "the scheduler
never changes a token" would hold on one CPU and not the next. Whether a BLAS kernel is invariant is a
property of the CPU and the library, not of the code: oneDNN on an AMX Xeon blocks rows differently
from AVX-512 (PyTorch's bf16 product gave a 48-token prompt other bits after a prefix-cache hit there,
and the same bits here, on an AMD EPYC with AVX512_BF16). So it is decided on the machine at hand.

The check (``first_difference``): on two inputs (the order probe's rows, which reveal how a kernel
splits its sums, and random rows), compute ``COUNT`` rows at once, then

    every prefix   fn(x[:t])        == full[:t]          t in COUNTS (1..17, then sizes around blocks)
    every window   fn(x[s:s + t])   == full[s:s + t]     (s, t) in WINDOWS (a cache hit's tail)

and report the first mismatch. ``forms`` callers cache the answer per CPU, torch version and thread count.
"""

from __future__ import annotations

from typing import Callable

import torch

COUNTS = (*range(1, 18), 20, 24, 31, 32, 33, 47, 48, 49, 64)
COUNT = 100
# (start, rows): the tail a prefix-cache hit recomputes (whole-block hits at 16, 32, 48; a partial one),
# a chunk boundary, and rows deep inside the batch.
WINDOWS = ((16, 1), (32, 1), (48, 1), (47, 2), (48, 3), (32, 17), (5, 40), (64, 36), (99, 1))


def probe_inputs(in_features: int, dtype: torch.dtype, seed: int = 0) -> list[torch.Tensor]:
    """Two [COUNT, in_features] inputs: the order probe's rows (one row of ones at distinct scales) and
    random rows."""
    scales = torch.tensor([1.0, 2.0, 3.0, -1.0, 0.5, 5.0, -3.0, 1.5])
    ones = scales.repeat((COUNT + 7) // 8)[:COUNT, None] * torch.ones(COUNT, in_features)
    g = torch.Generator().manual_seed(seed * 1009 + in_features)
    return [ones.to(dtype), torch.randn(COUNT, in_features, generator=g).to(dtype)]


def first_difference(fn: Callable[[torch.Tensor], torch.Tensor], inputs: list[torch.Tensor]) -> str | None:
    """None if ``fn`` (rows -> rows) gives every row the same bits at every count and position checked;
    else a sentence naming the first count or window that differs."""
    with torch.inference_mode():
        for which, xs in zip(("order-probe", "random"), inputs):
            full = fn(xs).contiguous()
            for t in COUNTS:
                if not torch.equal(fn(xs[:t].contiguous()), full[:t]):
                    return f"{which} rows: the first {t} rows alone differ from the same rows among {len(xs)}"
            for s, t in WINDOWS:
                if not torch.equal(fn(xs[s:s + t].contiguous()), full[s:s + t]):
                    return f"{which} rows: rows {s}..{s + t - 1} alone differ from the same rows among {len(xs)}"
    return None


def order_pattern(out_features: int, in_features: int) -> tuple[torch.Tensor, torch.Generator]:
    """An fp32 weight whose products reveal the order a kernel sums in, and the generator that drew it.

    Row n is all ones except +2**26 and -2**26 at two random columns: in fp32, 2**26 + 1 rounds back to
    2**26, so the row's sum is exactly its count of ones only where the two large terms cancel before
    the ones between them are absorbed. Two kernels that split the reduction differently disagree on
    many rows; the same split agrees on all. (Random data hid the difference: real down-projection
    inputs found it after 40 tokens, randn rows in 1 of 32 checks.)"""
    g = torch.Generator().manual_seed(26)
    w = torch.ones(out_features, in_features)
    rows = torch.arange(out_features)
    big = torch.randint(0, in_features, (out_features,), generator=g)
    cancel = (big + torch.randint(1, in_features, (out_features,), generator=g)) % in_features
    w[rows, big], w[rows, cancel] = 2.0 ** 26, -2.0 ** 26
    return w, g


def order_weight(out_features: int, in_features: int, dtype: torch.dtype) -> torch.Tensor:
    """`order_pattern`'s weight in ``dtype``, mixed with small random values so the random rows' sums do
    not cancel to round numbers."""
    w, g = order_pattern(out_features, in_features)
    w += torch.randn(out_features, in_features, generator=g) * 0.01
    return w.to(dtype)


def linear_difference(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], shape: tuple[int, int],
                      dtype: torch.dtype) -> str | None:
    """``first_difference`` for a product ``fn(x, w)`` through a weight of ``shape`` in ``dtype``."""
    w = order_weight(*shape, dtype)
    return first_difference(lambda x: fn(x, w), probe_inputs(shape[1], dtype))
