"""Up to how many rows labkit's C kernels walk a weight sequentially rather than in tiles.

Both walks give the same bits (tests/kernels/test_native_kernel.py); which is faster at a few rows depends on how
the CPU streams memory, so each crossover is timed once per CPU on the model's own weights and cached
(`cache.kernel_key`: the CPU and the kernel's build, not the dtype or torch). ``native.linear_rows`` gets
its crossover from `prepare` (fp32 or bf16 weights), ``native.q8_rows`` from `prepare_q8` (the LM head).
"""

from __future__ import annotations

from enum import Enum
from typing import Callable

import torch

from labkit.kernels import native
from labkit.kernels.tuning import cache, timing

WALK_ROWS = (1, 2, 4, 8, 16)    # row counts the two walks are timed at
LINEAR_SUBJECT = "C kernel: sequential walk up to rows"        # the cache key's subject for `linear_rows`
Q8_SUBJECT = "C kernel: Q8_0 sequential walk up to rows"       # ... and for `q8_rows`


class Walk(str, Enum):
    TILES = "tiles"                  # the kernel's tiles at every row count
    SEQUENTIAL = "sequential"        # one sequential pass over the weight, up to the crossover


def prepare(sweep: list[torch.Tensor]) -> None:
    """Set up to how many rows ``native.linear_rows`` walks the weights sequentially: from the disk cache,
    or timed once on a sweep through ``sweep`` (the first model's probe sample, fp32 or bf16; a few seconds)."""
    if not native.available() or not sweep:
        return
    set_crossover(LINEAR_SUBJECT, native.set_sequential_rows, lambda: time_walks(sweep))


def prepare_q8(codes: torch.Tensor, scales: torch.Tensor) -> None:
    """Set up to how many rows ``native.q8_rows`` walks its weights sequentially: from the disk cache, or
    timed once on ``codes`` and ``scales`` (the LM head; a second or two)."""
    if not native.available():
        return
    set_crossover(Q8_SUBJECT, native.set_q8_sequential_rows, lambda: time_q8_walks(codes, scales))


def set_crossover(subject: str, set_walk: Callable[[int], None], time_walks: Callable[[], dict]) -> None:
    """Set a kernel's crossover (``set_walk``) from the disk cache, or from ``time_walks()``."""
    rows = cache.cached_or_probe(cache.kernel_key(subject), lambda: sequential_up_to(time_walks()), _is_row_count)
    set_walk(rows)


def _is_row_count(found) -> bool:
    return isinstance(found, int) and not isinstance(found, bool) and found >= 0


def sequential_up_to(times: dict[int, dict[Walk, float]], margin: float = timing.MARGIN) -> int:
    """The largest timed row count up to which the sequential walk beat the tiles by more than the margin
    at every timed count (``times``: {rows: {Walk: seconds}}); 0 if it never did."""
    best = 0
    for rows in sorted(times):
        if timing.choose(times[rows], [Walk.TILES, Walk.SEQUENTIAL], margin) is not Walk.SEQUENTIAL:
            break
        best = rows
    return best


def time_walks(sweep: list[torch.Tensor], set_walk: Callable[[int], None] = native.set_sequential_rows,
               product: Callable = native.linear_rows, dtype: torch.dtype | None = None) -> dict[int, dict[Walk, float]]:
    """{rows: {walk: seconds for one sweep through ``sweep``}} at WALK_ROWS, interleaved rounds: ``product``
    (default `linear_rows`) with its walk set by ``set_walk``, inputs in ``dtype`` (default the weights')."""
    def walking(max_rows: int) -> Callable:
        def fn(x, w):
            set_walk(max_rows)
            return product(x, w)
        return fn
    walks = {Walk.TILES: walking(0), Walk.SEQUENTIAL: walking(max(WALK_ROWS))}
    try:
        return {rows: timing.time_forms(sweep, rows, walks, dtype=dtype) for rows in WALK_ROWS}
    finally:
        set_walk(0)


def time_q8_walks(codes: torch.Tensor, scales: torch.Tensor) -> dict[int, dict[Walk, float]]:
    """`time_walks` for ``native.q8_rows`` over one Q8_0 weight."""
    return time_walks([codes], native.set_q8_sequential_rows, lambda x, w: native.q8_rows(x, w, scales), torch.float32)
