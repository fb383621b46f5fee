"""Which form every bf16 CPU product takes on this CPU: one row-invariant form for every row count.

A row must get the same bits at every row count (speculative verification, a decode row sharing a step
with a prefill, the tail a prefix-cache hit recomputes; tests/kernels/test_form_invariance.py), so there is one
form for all of them, never a mix:

- labkit's C kernel (`Bf16Form.NATIVE`), row-invariant by construction, wherever the kernels build: with
  AVX512_BF16 through its dot-product instruction, elsewhere with the weights widened to fp32 in registers
  (``native.bf16_kind``), so it reads half the bytes of the fp32 product on every CPU;
- PyTorch's product (`Bf16Form.TORCH`, ``ops.torch_ops._bf16_torch``), where the gate (`bf16_torch_refused`,
  `labkit.kernels.invariance`) finds that this CPU gives a row the same bits at every row count and position
  (refused where, as on a Xeon with AMX, oneDNN gives tail rows other bits);
- both offered: the faster as timed once on this CPU (`choose_bf16`); neither: `Bf16Form.UPCAST`, the fp32
  form of the widened weights, rounded to bf16 (exact, slower), with a warning.
"""

from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass
from enum import Enum
from typing import Callable

import torch

from labkit.kernels import invariance, native
from labkit.kernels.tuning import cache, timing, walks

BF16_ROWS = (1, 2, 4, 8, 16)      # row counts the bf16 probe times on the sweep (and PREFILL_ROWS on a sample)
BF16_ENV = "LABKIT_BF16_KERNEL"   # 1 or 0 asks for the kernel or PyTorch's form (tests, demonstrations)
SUBJECT = "bfloat16"                                   # the cache key's subject of the timed choice
GATE_SUBJECT = "bfloat16 PyTorch row invariance"       # ... and of the gate's verdict on PyTorch's form


class Bf16Form(str, Enum):
    """A bf16 product form; the value is the name reports print."""
    NATIVE = "C kernel"
    TORCH = "PyTorch"
    UPCAST = "fp32 product"          # the last resort: bf16 weights widened, the fp32 form, rounded to bf16

    def __str__(self) -> str:
        return self.value


@dataclass
class _Registered:
    weights: list[torch.Tensor]              # a sample of the first model's bf16 weights, for timing
    shapes: list[tuple[int, int]]            # every registered weight shape, for the gate
    torch_form: Callable                     # PyTorch's bf16 product (``ops.torch_ops._bf16_torch``)


_lock = threading.Lock()
_registered: _Registered | None = None
_choice: dict[int, bool] = {}                # threads -> whether bf16 products use the kernel (both offered)
_timings: dict[int, dict] = {}               # threads -> {form: {rows: seconds}}, as probed in this process
_refused: dict[int, str | None] = {}         # threads -> why PyTorch's form is not offered (None: it is)
_warned: set[str] = set()


def register(weights: list[torch.Tensor], torch_form: Callable) -> bool:
    """Register a model's bf16 CPU weights and PyTorch's bf16 product (the first model's sample and
    product are kept; every model's shapes are gated); False if there were none."""
    global _registered
    ws = [w for w in weights if isinstance(w, torch.Tensor) and w.dtype == torch.bfloat16 and w.dim() == 2]
    if not ws:
        return False
    shapes = {tuple(w.shape) for w in ws}
    if _registered is None:
        _registered = _Registered(timing.probe_weights(ws), sorted(shapes), torch_form)
    else:
        _registered.shapes = sorted(set(_registered.shapes) | shapes)
    return True


def prepare_bf16(weights: list[torch.Tensor], torch_form: Callable) -> None:
    """Register a model's bf16 CPU weights and PyTorch's bf16 product, set the C kernel's walk, and decide
    for the current thread count and for one thread which form serves bf16 products (disk cache, or
    checked and timed once: a few seconds)."""
    if not register(weights, torch_form):
        return
    if native.has_bf16():
        walks.prepare(_registered.weights)
    for threads in sorted({torch.get_num_threads(), 1}):
        bf16_form(threads)


def choose_bf16(times: dict[Bf16Form, dict[int, float]], margin: float = timing.MARGIN) -> bool:
    """Whether the C kernel serves bf16: it must be faster than PyTorch's form by more than ``margin``
    over the probed row counts together (``times``: {Bf16Form.NATIVE | Bf16Form.TORCH: {rows: seconds}}).
    One choice for every row count, prefill included, never a mix: PyTorch's bf16 rows and the kernel's
    differ in their last bits."""
    kernel, torch_form = sum(times[Bf16Form.NATIVE].values()), sum(times[Bf16Form.TORCH].values())
    return kernel * (1 + margin) < torch_form


def _probe(threads: int) -> bool:
    forms = {Bf16Form.NATIVE: native.linear_rows, Bf16Form.TORCH: _registered.torch_form}
    best: dict[Bf16Form, dict[int, float]] = {form: {} for form in forms}
    prefill = [timing.probe_weights(_registered.weights, timing.PREFILL_BYTES)[0]]
    for weights, rows_list in ((_registered.weights, BF16_ROWS), (prefill, timing.PREFILL_ROWS)):
        for rows in rows_list:
            for form, seconds in timing.time_forms(weights, rows, forms).items():
                best[form][rows] = seconds
    _timings[threads] = best
    return choose_bf16(best)


def _uses_kernel_as_timed(threads: int) -> bool:
    """Where both forms are offered: whether the kernel was the faster (disk cache, or timed once)."""
    with _lock:
        if threads not in _choice:
            _choice[threads] = cache.cached_or_probe(
                cache.machine_key(threads, SUBJECT), lambda: timing.with_threads(threads, lambda: _probe(threads)),
                lambda found: isinstance(found, bool))
        return _choice[threads]


def bf16_torch_refused(threads: int | None = None) -> str | None:
    """Why PyTorch's bf16 product is not offered on this CPU at this thread count (a row's bits change
    with the row count or position: `labkit.kernels.invariance`), or None where it passes. Checked once per
    CPU, torch version and thread count on every registered weight shape (about 3 s for the default
    model), then read from the disk cache."""
    threads = torch.get_num_threads() if threads is None else threads
    if _registered is None:
        return None
    with _lock:
        if threads not in _refused:
            shapes = [list(shape) for shape in _registered.shapes]
            verdict = cache.cached_or_probe(
                cache.machine_key(threads, GATE_SUBJECT),
                lambda: {"shapes": shapes, "refused": timing.with_threads(threads, _gate)},
                lambda found: isinstance(found, dict) and found.get("shapes") == shapes, timed=False)
            _refused[threads] = verdict.get("refused")
    return _refused[threads]


def _gate() -> str | None:
    for shape in _registered.shapes:
        why = invariance.linear_difference(_registered.torch_form, shape, torch.bfloat16)
        if why is not None:
            return f"{shape[0]}x{shape[1]}: {why}"
    return None


def bf16_offered(threads: int | None = None) -> list[Bf16Form]:
    """The bf16 product forms this CPU offers, each giving a row the same bits at every row count: the
    C kernel (wherever it builds, at the instruction-set level it was built for) and PyTorch's form where
    `bf16_torch_refused` finds no difference."""
    offered = [Bf16Form.NATIVE] if native.has_bf16() else []
    return offered + ([Bf16Form.TORCH] if bf16_torch_refused(threads) is None else [])


def warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def bf16_form(threads: int | None = None) -> Bf16Form:
    """The form every bf16 CPU product takes at this thread count (one form at every row count):

    - the offered forms (`bf16_offered`); both: the faster as timed once on this CPU (`choose_bf16`);
    - ``LABKIT_BF16_KERNEL=1`` / ``0`` asks for the kernel / PyTorch's form, granted where offered;
    - neither offered: ``UPCAST`` (exact and row-invariant through the fp32 form, slower), with a warning.
    """
    threads = torch.get_num_threads() if threads is None else threads
    env = os.environ.get(BF16_ENV)
    if _registered is None:          # no model registered its weights: nothing to check against
        return Bf16Form.NATIVE if env == "1" and native.has_bf16() else Bf16Form.TORCH
    offered = bf16_offered(threads)
    if env in ("0", "1"):
        want = Bf16Form.NATIVE if env == "1" else Bf16Form.TORCH
        if want in offered:
            return want
        warn_once(f"{BF16_ENV}={env} asks for {want}, which this CPU does not offer "
                  f"({native.why_unavailable() if want is Bf16Form.NATIVE else bf16_torch_refused(threads)})")
    if not offered:
        warn_once(f"no row-invariant bf16 product on this CPU (PyTorch's: {bf16_torch_refused(threads)}; "
                  f"labkit's C kernel: {native.why_unavailable() or 'no bf16 dot product'}): bf16 products "
                  "run as fp32 products of the widened weights, rounded to bf16 (exact, slower)")
        return Bf16Form.UPCAST
    if len(offered) == 1:
        return offered[0]
    return Bf16Form.NATIVE if _uses_kernel_as_timed(threads) else Bf16Form.TORCH


def bf16_uses_kernel(threads: int | None = None) -> bool:
    """Whether bf16 CPU products (every row count) go through the C kernel at this thread count."""
    return bf16_form(threads) is Bf16Form.NATIVE


def bf16_report(threads: int | None = None) -> str:
    """Which bf16 form serves products here, why, and whether its timing was taken while busy (benchmarks)."""
    threads = torch.get_num_threads() if threads is None else threads
    form = bf16_form(threads)
    refused = bf16_torch_refused(threads)
    why = (f"; PyTorch's refused ({refused})" if refused else
           "; the only form offered" if len(bf16_offered(threads)) == 1 else
           "; both offered, the faster as timed" + (" (timed while busy: provisional)"
                                                    if cache.timed_while_busy(SUBJECT, threads) else ""))
    return f"{form}{why}"


def bf16_timings(threads: int | None = None) -> dict[Bf16Form, dict[int, float]]:
    """{form: {rows: seconds}} of the bf16 probe run in this process (empty when read from the disk cache)."""
    return _timings.get(torch.get_num_threads() if threads is None else threads, {})


def forget() -> None:
    """Drop the registered weights and the choices made in this process (tests; the disk cache stays)."""
    global _registered
    with _lock:
        _registered = None
        _choice.clear()
        _timings.clear()
        _refused.clear()
