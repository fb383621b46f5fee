"""The ways to write an fp32 ``x @ Wᵀ`` on the CPU, and the gate that says which give which bits.

``F.linear`` is not batch-invariant: MKL's one-row kernel (a gemv) sums in one order, and a few rows in
another (on the AMD EPYC measured: 1-3 rows differ from 4 and more on one thread, 1-11 on two; on a Xeon
with AMX: 1, 2-15 and 16+). Two forms are invariant, and `labkit.kernels.tuning.fp32` chooses between them:

- ``F.linear, padded`` (`Form.PADDED`): ``F.linear`` on at least ``m`` rows, a smaller batch padded with
  zero rows, where ``m`` is the least row count from which ``F.linear`` gives every row the same bits at
  every row count and position, found on this CPU for each weight shape and thread count (`pad_rows`, on
  `order_probe`). Its bits are those transformers' ``F.linear`` computes for the batch of ``m`` rows; the
  padding costs a few rows of compute in a memory-bound product.
- labkit's C kernel (`Form.NATIVE`, ``labkit.kernels.native``, offered only where it builds): row-invariant
  by construction, and admitted only if the gate confirms it (`kernel_admitted`: the same bits at every
  row count 1..17 and position, and as accurate as ``F.linear``). Its bits differ from transformers' in
  the last places, as MKL's differ from one CPU to the next; greedy parity with transformers is
  token-level in fp32 and tested with whatever the probe chooses (tests/engine/test_parity.py).

The other forms ((W @ xᵀ)ᵀ, "of a pair") and the exactness gate `exact_forms` (does a form return bits
``F.linear`` gives at some row count?) stay for ``bench.linear_rows``, which measures every form, and for
forcing one.
"""

from __future__ import annotations

from enum import Enum
from typing import Callable

import torch
import torch.nn.functional as F

from labkit.kernels import native
from labkit.kernels.invariance import order_pattern
from labkit.kernels.tuning.timing import with_threads

MAX_ROWS = 16                    # row counts up to which the gate checks a form row by row
PAD_CHECK_ROWS = (32, 64, 256)   # row counts past MAX_ROWS + 1 where `pad_rows` checks F.linear too


class Form(str, Enum):
    """One way to write x @ Wᵀ for x [T, in] and W [out, in] as the model stores it; the value is the
    name tables and reports print, and what ``LABKIT_LINEAR_FORM`` and the disk cache hold."""
    F_LINEAR = "F.linear"
    W_XT = "(W @ xᵀ)ᵀ"
    F_LINEAR_PAIR = "F.linear of a pair"          # one row computed as two copies of itself
    W_XT_PAIR = "(W @ xᵀ)ᵀ of a pair"
    NATIVE = "C kernel"                           # labkit.kernels.native: only where it builds on this machine
    PADDED = "F.linear, padded"

    def __str__(self) -> str:
        return self.value


def _pair(fn: Callable) -> Callable:
    """One row computed as two copies of itself (a multi-row kernel's order for a single row)."""
    return lambda x, w: fn(x.expand(2, -1), w)[:1] if x.shape[0] == 1 else fn(x, w)


def _w_xt(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.mm(w, x.t()).t()


def _padded(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """F.linear on at least `pad_rows` rows: fewer rows are padded with zero rows (batch-invariant)."""
    m = pad_rows(*w.shape)
    if m is None:
        raise RuntimeError(f"F.linear is not batch-invariant for a {tuple(w.shape)} weight on this CPU")
    rows = x.shape[0]
    if rows >= m:
        return F.linear(x, w)
    return F.linear(torch.cat((x, x.new_zeros(m - rows, x.shape[1]))), w)[:rows]


FORMS: dict[Form, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    Form.F_LINEAR: F.linear,
    Form.W_XT: _w_xt,
    Form.F_LINEAR_PAIR: _pair(F.linear),
    Form.W_XT_PAIR: _pair(_w_xt),
    Form.NATIVE: native.linear_rows,
    Form.PADDED: _padded,
}
PAIRS = frozenset({Form.F_LINEAR_PAIR, Form.W_XT_PAIR})   # candidates for one row only (gate rule 1)
OWN_ORDER = frozenset({Form.NATIVE})        # sum in an order of their own: admitted by rule 2 (row invariance)
INVARIANT = (Form.PADDED, Form.NATIVE)      # the batch-invariant forms the probe chooses between, the default first


def candidates() -> list[Form]:
    """The forms this machine can run: all of FORMS, less the C kernel where it does not build."""
    return [form for form in FORMS if form is not Form.NATIVE or native.available()]


# ----------------------------------------------------------------------------- the gate

def order_probe(out_features: int, in_features: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`invariance.order_pattern`'s weight in bf16 (exact: ones and powers of two), and the input row of
    ones: a product's bits then show the order its kernel sums in."""
    w, _ = order_pattern(out_features, in_features)
    return w.to(torch.bfloat16), torch.ones(1, in_features, dtype=torch.bfloat16)


def probe_rows(in_features: int, rows: int = 24) -> torch.Tensor:
    """Input rows for the order probe: the all-ones row at distinct scales (2 and 3 change the sums'
    magnitudes, -1 their sign), so each row's result is its own."""
    scales = torch.tensor([1.0, 2.0, 3.0, -1.0, 0.5, 5.0, -3.0, 1.5])
    return scales.repeat((rows + 7) // 8)[:rows, None] * torch.ones(rows, in_features)


def exact_forms(out_features: int, in_features: int, max_rows: int = MAX_ROWS,
                forms: dict | None = None) -> dict[int, list]:
    """{rows: forms that pass the gate at that row count} for an fp32 weight of this shape, with the
    current thread count (``forms``: {name: fn(x, w)}, default FORMS). Two rules:

    1. A form passes at T rows if each of its T result rows, on the order probe, has bits that
       ``F.linear`` gives that row at some row count from 1 to max_rows + 1 (so ``F.linear`` itself
       always passes). Pair forms (PAIRS) are candidates for one row only.
    2. A form that sums in an order of its own (OWN_ORDER: the C kernel) passes at every row count
       if it is row-invariant, which ``F.linear`` is not: on the order probe and on random rows, each
       row has the same bits at every row count 1..max_rows + 1 and at every position in the batch;
       and it is as accurate as ``F.linear`` (`_as_accurate`). Speculative verification and batching
       then give a row exactly what a one-row step gives it."""
    forms = FORMS if forms is None else forms
    w, _ = order_probe(out_features, in_features)
    w = w.float()
    xs = probe_rows(in_features, max_rows + 1)
    with torch.inference_mode():
        seen: list[set[bytes]] = [set() for _ in range(len(xs))]
        for u in range(1, len(xs) + 1):
            for i, row in enumerate(F.linear(xs[:u], w)):
                seen[i].add(row.numpy().tobytes())
        invariant = {name for name in forms if name in OWN_ORDER and _own_order_admitted(forms[name], w, xs)}
        out = {}
        for t in range(1, max_rows + 1):
            out[t] = [name for name, fn in forms.items()
                      if fn is F.linear or name in invariant or (name not in OWN_ORDER and (
                          t == 1 or name not in PAIRS) and all(
                          row.contiguous().numpy().tobytes() in seen[i] for i, row in enumerate(fn(xs[:t], w))))]
    return out


def _own_order_admitted(fn: Callable, w: torch.Tensor, xs: torch.Tensor) -> bool:
    """Rule 2 on the order-probe weight ``w`` and its probe rows ``xs``."""
    return _row_invariant(fn, w, xs) and _as_accurate(fn, *w.shape, len(xs))


def kernel_admitted(out_features: int, in_features: int) -> bool:
    """Whether labkit's C kernel builds here and passes rule 2 for a weight of this shape."""
    if Form.NATIVE not in candidates():
        return False
    w, _ = order_probe(out_features, in_features)
    with torch.inference_mode():
        return _own_order_admitted(native.linear_rows, w.float(), probe_rows(in_features, MAX_ROWS + 1))


def _row_invariant(fn: Callable, w: torch.Tensor, probe: torch.Tensor) -> bool:
    """Each row's bits are the same at every row count and batch position, on the order probe and on
    random rows (the probe's rows are one row at several scales; random rows catch a kernel that
    reads the wrong row)."""
    g = torch.Generator().manual_seed(len(probe))
    for xs in (probe, torch.randn(probe.shape, generator=g)):
        full = fn(xs, w).contiguous()
        if any(not torch.equal(fn(xs[:t], w), full[:t]) for t in range(1, len(xs))):
            return False
        if any(not torch.equal(fn(xs[i:i + 1], w), full[i:i + 1]) for i in range(len(xs))):
            return False
    return True


def _as_accurate(fn: Callable, out_features: int, in_features: int, rows: int) -> bool:
    """On random data, the form's largest error against a float64 product is at most twice
    ``F.linear``'s (plus a float32 ulp of the result's scale): a new order must not be a worse one."""
    g = torch.Generator().manual_seed(out_features * 31 + in_features)
    x, w = torch.randn(rows, in_features, generator=g), torch.randn(out_features, in_features, generator=g)
    exact = x.double() @ w.double().t()
    err = (fn(x, w).double() - exact).abs().max().item()
    ref = (F.linear(x, w).double() - exact).abs().max().item()
    return err <= 2 * ref + exact.abs().max().item() * 2.0 ** -23


# ----------------------------------------------------------------------------- the padded form's row count

_pad: dict[tuple, int | None] = {}      # (shape, threads) -> `pad_rows`, found here or read from the cache


def pad_rows(out_features: int, in_features: int, threads: int | None = None) -> int | None:
    """The least row count m (1..MAX_ROWS + 1) from which ``F.linear`` gives each row of a weight of this
    shape the same bits at every row count and batch position, on this CPU and thread count; None if
    there is none. Checked once per shape and thread count on `order_probe` and on random rows, at
    every row count up to MAX_ROWS + 1 and at PAD_CHECK_ROWS (about a second for the default model)."""
    threads = torch.get_num_threads() if threads is None else threads
    key = ((out_features, in_features), threads)
    if key not in _pad:
        _pad[key] = with_threads(threads, lambda: _least_invariant_rows(out_features, in_features))
    return _pad[key]


def known_pad_rows(shape: tuple[int, int], threads: int) -> int | None:
    """`pad_rows` as far as this process knows it, without checking (None where it was not checked)."""
    return _pad.get((shape, threads))


def learn_pad_rows(shape: tuple[int, int], threads: int, rows: int) -> None:
    """Take ``rows`` (read from the disk cache) as `pad_rows`, unless this process has found it already."""
    _pad.setdefault((shape, threads), rows)


def forget_pad_rows() -> None:
    _pad.clear()


def _least_invariant_rows(out_features: int, in_features: int) -> int | None:
    w, _ = order_probe(out_features, in_features)
    w = w.float()
    counts = [*range(1, MAX_ROWS + 2), *PAD_CHECK_ROWS]
    n = counts[-1]
    g = torch.Generator().manual_seed(in_features)
    least = 1
    with torch.inference_mode():
        for xs in (probe_rows(in_features, n), torch.randn(n, in_features, generator=g)):
            full = F.linear(xs, w)
            for t in counts[:-1]:
                if not torch.equal(F.linear(xs[:t], w), full[:t]):
                    least = max(least, t + 1)
            if least > MAX_ROWS + 1:
                return None
            # the same bits at every position of a batch of `least` rows (first and last row of a window)
            for i in range(0, n - least + 1, 7):
                window = F.linear(xs[i:i + least], w)
                if not (torch.equal(window[0], full[i]) and torch.equal(window[-1], full[i + least - 1])):
                    return None
    return least
