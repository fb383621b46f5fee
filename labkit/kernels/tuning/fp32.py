"""Which way to write an fp32 ``x @ Wᵀ`` on this CPU: one batch-invariant form for every row count,
chosen by a timing probe on the CPU at hand, never from a table.

Batch invariance first. A row's product must have the same bits at every row count and batch
position: a decode step's row count changes whenever a request joins or leaves, async scheduling
admits a request one step later than the synchronous engine does (it plans step N+1 before step N's
stop tokens are known), a prompt may be cut into chunks, and speculative decoding verifies k + 1 rows
at once. If a row's bits followed the row count, each of these could flip a greedy near-tie (seen:
async scheduling changed the greedy output of 2 of 8 prompts on a Xeon where the probe had chosen a
different PyTorch form at 7 rows than at 8). The forms and the gate that admits them are in
`labkit.kernels.tuning.forms`.

The probe (`probe_shapes`) times the invariant forms that serve every registered shape over a sweep
through the model's own weights at decode row counts and at prefill sizes together, and keeps
``F.linear, padded`` unless the C kernel is faster by more than the margin (`timing.choose`). The choice
is cached on disk per CPU, torch version and thread count (`labkit.kernels.tuning.cache`). The table
still answers per (shape, rows, threads), with one form in every row of it.

Tests and demonstrations can fix the choice: ``with forced(Form.F_LINEAR): ...`` (or the environment
variable ``LABKIT_LINEAR_FORM=F.linear``) skips the probe.
"""

from __future__ import annotations

import os
import threading
import warnings
from contextlib import contextmanager
from typing import Iterator

import torch

from labkit.kernels import native
from labkit.kernels.tuning import cache, forms, timing, walks
from labkit.kernels.tuning.forms import FORMS, INVARIANT, MAX_ROWS, Form, candidates, kernel_admitted, pad_rows

PREFILL = MAX_ROWS + 1          # the table's key for "more rows than MAX_ROWS" (prefill)
ROWS = range(1, PREFILL + 1)    # the table's row counts
DEFAULT_FORM = Form.F_LINEAR    # a weight no model registered, and the last resort
ENV = "LABKIT_LINEAR_FORM"
SUBJECT = "float32"             # the cache key's subject (`cache.machine_key`)

_lock = threading.Lock()
_table: dict[tuple, Form] = {}           # (shape, rows, threads) -> form
_groups: dict[tuple, list] = {}          # shape -> a sample of the model's fp32 weights of that shape
_timings: dict[tuple, dict] = {}         # (shape, rows, threads) -> {form: seconds}, as probed
_forced: list[Form] = []


def invariant_forms(shapes: list[tuple[int, int]]) -> list[Form]:
    """The batch-invariant forms (INVARIANT, in order) that serve every shape on this CPU and thread count."""
    return [form for form in INVARIANT if all(
        (pad_rows(*shape) is not None) if form is Form.PADDED else kernel_admitted(*shape) for shape in shapes)]


def probe_shapes(shapes: list[tuple[int, int]], threads: int) -> dict[tuple, dict[int, Form]]:
    """Time the batch-invariant forms on one sweep through samples of every shape in turn (as a decode
    step interleaves its layers' matrices) at DECODE_ROWS, and on a smaller sample at PREFILL_ROWS, and
    keep the faster over them all (``choose``: ``F.linear, padded`` unless the kernel beats it by more
    than the margin); record and return {shape: {rows: that form}} for every row count."""
    names = invariant_forms(shapes)
    if not names:
        # Still a working engine, with the scheduler able to change a near-tie token: say so.
        warnings.warn("no batch-invariant linear form serves every weight shape on this CPU (F.linear varies past "
                      f"{MAX_ROWS + 1} rows and labkit's C kernel is unavailable or refused): using F.linear, so "
                      "a row's last bits may depend on its batch", RuntimeWarning, stacklevel=2)
        names = [DEFAULT_FORM]
    pick = names[0]
    if len(names) > 1:
        samples = {shape: timing.probe_weights(_groups[shape]) for shape in shapes}
        sweep = [samples[shape][k] for k in range(max(map(len, samples.values())))
                 for shape in shapes if k < len(samples[shape])]
        prefill = [timing.probe_weights(_groups[shape], timing.PREFILL_BYTES)[0] for shape in shapes]
        total = dict.fromkeys(names, 0.0)
        for weights, rows_list in ((sweep, timing.DECODE_ROWS), (prefill, timing.PREFILL_ROWS)):
            for rows in rows_list:
                times = timing.time_forms(weights, rows, {name: FORMS[name] for name in names})
                _timings[(shapes[0], rows, threads)] = times
                for name in names:
                    total[name] += times[name]
        pick = timing.choose(total, names)
    return {shape: dict.fromkeys(ROWS, pick) for shape in shapes}


# ----------------------------------------------------------------------------- the table and its cache entry
# One entry per thread count, {"576x1536": {"1": "C kernel", ..., "17": "C kernel", "pad": 3}, ...}: the form
# at each row count (by its value) and `pad_rows`, for every shape a model registered here.

def _shape_key(shape: tuple[int, int]) -> str:
    return f"{shape[0]}x{shape[1]}"


def _holds(entry, shapes: list[tuple[int, int]]) -> bool:
    """Whether a cache entry names a form this machine runs at every row count of every shape."""
    runnable = {form.value for form in candidates()}
    return isinstance(entry, dict) and all(
        isinstance(entry.get(_shape_key(shape)), dict) and
        all(entry[_shape_key(shape)].get(str(t)) in runnable for t in ROWS) for shape in shapes)


def _probed_entry(shapes: list[tuple[int, int]], threads: int) -> dict:
    chosen = probe_shapes(shapes, threads)
    return {_shape_key(shape): {**{str(t): form.value for t, form in chosen[shape].items()},
                                "pad": forms.known_pad_rows(shape, threads)} for shape in shapes}


def _merged(standing, probed: dict) -> dict:
    """The shapes another model registered stay in the entry beside the ones probed now."""
    return {**standing, **probed} if isinstance(standing, dict) else probed


def _fill(threads: int) -> None:
    """Make sure the table holds every registered shape at every row count for ``threads``: from the disk
    cache when it has them all, else by probing them together."""
    with _lock:
        shapes = sorted(_groups)
        if all((shape, 1, threads) in _table for shape in shapes):
            return
        entry = cache.cached_or_probe(cache.machine_key(threads, SUBJECT), lambda: _probed_entry(shapes, threads),
                                      lambda found: _holds(found, shapes), merge=_merged)
        for shape in shapes:
            chosen = entry[_shape_key(shape)]
            for t in ROWS:
                _table[(shape, t, threads)] = Form(chosen[str(t)])
            if isinstance(chosen.get("pad"), int):
                forms.learn_pad_rows(shape, threads, chosen["pad"])     # as found when the table was probed


def prepare(weights: list[torch.Tensor]) -> None:
    """Register a model's fp32 CPU weights by shape and fill the table for the current thread count
    and for one thread (what the labs and benchmarks time with): read from the disk cache, or probed
    once, about 10 s per thread count for the default model. Other thread counts are filled the first
    time a product runs with them. Then the C kernel's walk (`walks.prepare`)."""
    if _forced or os.environ.get(ENV):
        return
    groups: dict[tuple, list] = {}
    for w in weights:
        if isinstance(w, torch.Tensor) and w.dtype == torch.float32 and w.device.type == "cpu" and w.dim() == 2:
            groups.setdefault(tuple(w.shape), []).append(w)
    for shape, ws in groups.items():
        _groups.setdefault(shape, timing.probe_weights(ws))
    for threads in sorted({torch.get_num_threads(), 1}):
        timing.with_threads(threads, lambda: _fill(threads))
    walks.prepare([w for ws in _groups.values() for w in ws])


# ----------------------------------------------------------------------------- the products

def _runnable(name: str, asked: str) -> Form:
    """The form called ``name``, where this machine runs it; else a ValueError that begins with ``asked``."""
    try:
        form = Form(name)
    except ValueError:
        form = None
    if form not in candidates():
        note = f" ({Form.NATIVE} is not available here: {native.why_unavailable()})" if form is Form.NATIVE else ""
        raise ValueError(f"{asked}: choose one of {', '.join(candidates())}{note}")
    return form


def form_name(shape: tuple[int, int], rows: int, threads: int | None = None) -> Form:
    """The form ``labkit.kernels.ops.torch_ops.linear`` uses for an fp32 CPU product of this shape and row count."""
    if _forced:
        return _forced[-1]
    env = os.environ.get(ENV)
    if env:
        return _runnable(env, f"{ENV}={env!r}")
    if rows < 1:
        return DEFAULT_FORM
    rows = min(rows, PREFILL)
    threads = torch.get_num_threads() if threads is None else threads
    form = _table.get((shape, rows, threads))
    if form is None:
        if shape not in _groups:
            return DEFAULT_FORM          # a weight no model registered (e.g. a test's random matrix)
        _fill(threads)
        form = _table[(shape, rows, threads)]
    return form


def product(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weightᵀ in the form chosen for this shape, row count and thread count."""
    return FORMS[form_name(tuple(weight.shape), x.shape[0])](x, weight)


def invariant_product(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weightᵀ in fp32 in a batch-invariant form, whether or not a model registered this shape (the
    fp32 fallback of the bf16 and 4-bit products): the chosen form for a registered shape, else labkit's C
    kernel where it builds, else ``F.linear, padded`` (which raises where F.linear has no invariant row count)."""
    if tuple(weight.shape) in _groups or _forced or os.environ.get(ENV):
        return product(x, weight)
    return FORMS[Form.NATIVE if native.available() else Form.PADDED](x, weight)


@contextmanager
def forced(name: str) -> Iterator[None]:
    """Use one form (a `Form`, or its name) for every fp32 CPU product inside the block, at any row count
    (tests, demos)."""
    _forced.append(_runnable(name, f"unknown linear form {str(name)!r}"))
    try:
        yield
    finally:
        _forced.pop()


# ----------------------------------------------------------------------------- reports

def table(threads: int | None = None) -> dict[tuple, dict[int, Form]]:
    """{shape: {rows: form}} known for a thread count (the current one by default)."""
    threads = torch.get_num_threads() if threads is None else threads
    out: dict[tuple, dict[int, Form]] = {}
    for (shape, rows, n), form in sorted(_table.items()):
        if n == threads:
            out.setdefault(shape, {})[rows] = form
    return out


def timings(threads: int | None = None) -> dict[tuple, dict[Form, float]]:
    """{(shape, rows): {form: seconds}} from probes run in this process (empty when the table came
    from the disk cache)."""
    threads = torch.get_num_threads() if threads is None else threads
    return {(s, r): v for (s, r, n), v in _timings.items() if n == threads}


def describe(threads: int | None = None) -> str:
    """One line per shape: the form, e.g. ``576x1536: C kernel at every row count``, or the row ranges each
    form covers where a table was forced to mix them (``576x1536: F.linear 1-6, (W @ xᵀ)ᵀ 7-16``)."""
    lines = []
    for shape, rows in table(threads).items():
        if len(set(rows.values())) == 1:
            lines.append(f"{shape[0]}x{shape[1]}: {rows[min(rows)]} at every row count")
            continue
        runs: list[list] = []
        for t in sorted(r for r in rows if r <= MAX_ROWS):
            if runs and runs[-1][0] is rows[t] and runs[-1][2] == t - 1:
                runs[-1][2] = t
            else:
                runs.append([rows[t], t, t])
        spans = ", ".join(f"{n} {a}" if a == b else f"{n} {a}-{b}" for n, a, b in runs)
        prefill = f", {rows[PREFILL]} above {MAX_ROWS}" if PREFILL in rows else ""
        lines.append(f"{shape[0]}x{shape[1]}: {spans}{prefill}")
    return "; ".join(lines)


def forget() -> None:
    """Drop the in-process table and registered weights (tests; the disk cache stays)."""
    with _lock:
        _table.clear()
        _groups.clear()
        _timings.clear()
        forms.forget_pad_rows()
