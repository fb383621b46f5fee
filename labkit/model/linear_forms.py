"""Which way to write an fp32 ``x @ Wᵀ`` on this CPU: one batch-invariant form for every row count,
chosen by a timing probe on the CPU at hand, never from a table.

Batch invariance first. A row's product must have the same bits at every row count and batch
position: a decode step's row count changes whenever a request joins or leaves, async scheduling
admits a request one step later than the synchronous engine does (it plans step N+1 before step N's
stop tokens are known), a prompt may be cut into chunks, and speculative decoding verifies k + 1 rows
at once. If a row's bits followed the row count, each of these could flip a greedy near-tie (seen:
async scheduling changed the greedy output of 2 of 8 prompts on a Xeon where the probe had chosen a
different PyTorch form at 7 rows than at 8). ``F.linear`` itself is not invariant: MKL's one-row
kernel (a gemv) sums in one order, and a few rows in another (on the AMD EPYC measured: 1-3 rows
differ from 4 and more on one thread, 1-11 on two; on a Xeon with AMX: 1, 2-15 and 16+).

Two forms are invariant, and the probe times them on this CPU and keeps the faster (`probe_shapes`):

- ``F.linear, padded``: ``F.linear`` on at least ``m`` rows, a smaller batch padded with zero rows,
  where ``m`` is the least row count from which ``F.linear`` gives every row the same bits at every
  row count and position, found on this CPU for each weight shape and thread count (`pad_rows`, on
  `order_probe`). Its bits are those transformers' ``F.linear`` computes for the batch of ``m``
  rows; the padding costs a few rows of compute in a memory-bound product.
- labkit's C kernel (``labkit.model.native``, offered only where it builds): row-invariant by
  construction, and admitted only if the gate confirms it (`kernel_admitted`: the same bits at
  every row count 1..17 and position, and as accurate as ``F.linear``). Its bits differ from
  transformers' in the last places, as MKL's differ from one CPU to the next; greedy parity with
  transformers is token-level in fp32 and tested with whatever the probe chooses
  (tests/test_parity.py).

``F.linear, padded`` is kept unless the kernel is faster by more than the margin, over a sweep
through the model's own weights at decode row counts and at prefill sizes together. The choice is
cached on disk per CPU, torch version and thread count (``$LABKIT_CACHE/linear_forms.json``).
The table still answers per (shape, rows, threads), with one form in every row of it.

The other forms ((W @ xᵀ)ᵀ, "of a pair") and the exactness gate `exact_forms` (does a form return bits
``F.linear`` gives at some row count?) stay for ``bench.linear_rows``, which measures every form, and
for forcing. bf16 keeps its own rule in ``labkit.model.llama``.

Tests and demonstrations can fix the choice: ``with forced("F.linear"): ...`` (or the environment
variable ``LABKIT_LINEAR_FORM=F.linear``) skips the probe; ``choose`` is a pure function of a timing
table and the candidate forms.
"""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from labkit.model import invariance, native
from labkit.model.cache_dir import cache_root, shared_root
from labkit.model.cpu_features import describe_cpu

MAX_ROWS = 16               # row counts up to which the gate checks the C kernel row by row
PREFILL = MAX_ROWS + 1      # the table's key for "more rows than MAX_ROWS" (prefill)
DECODE_ROWS = (1, 2, 4, 8, 16)   # decode batches and verification rows the probe times
PREFILL_ROWS = (64, 256)    # prefill sizes the probe times
PAD_CHECK_ROWS = (32, 64, 256)   # row counts past MAX_ROWS + 1 where `pad_rows` checks F.linear too
PREFILL_BYTES = 8 << 20     # per shape: compute-bound at these row counts, so a small sample shows it
# Weight bytes of each shape in the probe's sweep: all of them for the default model. A 16 MiB sample
# per shape stayed in the cache (480 MiB of L3 on the AMX Xeon this was measured on) and chose
# F.linear at 4-8 rows, where in the model's full sweep it took 1.2x as long as (W @ xᵀ)ᵀ: which
# kernel streams weights better is only seen when the weights stream. So the first load on a machine
# spends ~10 s per thread count probing (then the disk cache answers).
PROBE_BYTES = 1 << 30
MARGIN = 0.03               # another form must beat F.linear by more than this to replace it
PROBE_ROUNDS = 2            # interleaved rounds after a warm-up; the minimum of each form counts
DEFAULT_FORM = "F.linear"
FORMS_VERSION = 6           # part of the cache key: bump when FORMS or the gate change
ENV = "LABKIT_LINEAR_FORM"


def order_probe(out_features: int, in_features: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A bf16 weight whose products reveal the order a kernel sums in, and the input row of ones.

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
    return w.to(torch.bfloat16), torch.ones(1, in_features, dtype=torch.bfloat16)


def _pair(fn: Callable) -> Callable:
    """One row computed as two copies of itself (a multi-row kernel's order for a single row)."""
    return lambda x, w: fn(x.expand(2, -1), w)[:1] if x.shape[0] == 1 else fn(x, w)


def _w_xt(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.mm(w, x.t()).t()


PAIR = " of a pair"
NATIVE = "C kernel"         # labkit.model.native: a candidate only where it builds on this machine
PADDED = "F.linear, padded"
_pad: dict[tuple, int | None] = {}      # (shape, threads) -> `pad_rows`


def _padded(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """F.linear on at least `pad_rows` rows: fewer rows are padded with zero rows (batch-invariant)."""
    m = pad_rows(*w.shape)
    if m is None:
        raise RuntimeError(f"F.linear is not batch-invariant for a {tuple(w.shape)} weight on this CPU")
    rows = x.shape[0]
    if rows >= m:
        return F.linear(x, w)
    return F.linear(torch.cat((x, x.new_zeros(m - rows, x.shape[1]))), w)[:rows]

# Candidate forms: each computes x @ Wᵀ for x [T, in] and W [out, in] as the model stores it.
FORMS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "F.linear": F.linear,
    "(W @ xᵀ)ᵀ": _w_xt,
    "F.linear" + PAIR: _pair(F.linear),
    "(W @ xᵀ)ᵀ" + PAIR: _pair(_w_xt),
    NATIVE: native.linear_rows,
    PADDED: _padded,
}
# Forms that sum in an order of their own, admitted by the gate's second rule (row invariance).
OWN_ORDER = frozenset({NATIVE})
# The batch-invariant forms the probe chooses between, the default first.
INVARIANT = (PADDED, NATIVE)


def candidates() -> list[str]:
    """The forms this machine can run: all of FORMS, less the C kernel where it does not build."""
    return [name for name in FORMS if name != NATIVE or native.available()]

_lock = threading.Lock()
_table: dict[tuple, str] = {}            # (shape, rows, threads) -> form name
_groups: dict[tuple, list] = {}          # shape -> the model's fp32 weights of that shape
_timings: dict[tuple, dict] = {}         # (shape, rows, threads) -> {form: seconds}, as probed
_forced: list[str] = []


# ----------------------------------------------------------------------------- exactness gate

def probe_rows(in_features: int, rows: int = 24) -> torch.Tensor:
    """Input rows for the order probe: the all-ones row at distinct scales (2 and 3 change the sums'
    magnitudes, -1 their sign), so each row's result is its own."""
    scales = torch.tensor([1.0, 2.0, 3.0, -1.0, 0.5, 5.0, -3.0, 1.5])
    return scales.repeat((rows + 7) // 8)[:rows, None] * torch.ones(rows, in_features)


def exact_forms(out_features: int, in_features: int, max_rows: int = MAX_ROWS,
                forms: dict | None = None) -> dict[int, list[str]]:
    """{rows: forms that pass the gate at that row count} for an fp32 weight of this shape, with the
    current thread count. Two rules:

    1. A form passes at T rows if each of its T result rows, on the order probe, has bits that
       ``F.linear`` gives that row at some row count from 1 to max_rows + 1 (so ``F.linear`` itself
       always passes). Pair forms are candidates for one row only.
    2. A form that sums in an order of its own (``OWN_ORDER``: the C kernel) passes at every row count
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
                          t == 1 or not name.endswith(PAIR)) and all(
                          row.contiguous().numpy().tobytes() in seen[i] for i, row in enumerate(fn(xs[:t], w))))]
    return out


def _own_order_admitted(fn: Callable, w: torch.Tensor, xs: torch.Tensor) -> bool:
    """Rule 2 on the order-probe weight ``w`` and its probe rows ``xs``."""
    return _row_invariant(fn, w, xs) and _as_accurate(fn, *w.shape, len(xs))


def kernel_admitted(out_features: int, in_features: int) -> bool:
    """Whether labkit's C kernel builds here and passes rule 2 for a weight of this shape."""
    if NATIVE not in candidates():
        return False
    w, _ = order_probe(out_features, in_features)
    with torch.inference_mode():
        return _own_order_admitted(native.linear_rows, w.float(), probe_rows(in_features, MAX_ROWS + 1))


def pad_rows(out_features: int, in_features: int, threads: int | None = None) -> int | None:
    """The least row count m (1..MAX_ROWS + 1) from which ``F.linear`` gives each row of a weight of this
    shape the same bits at every row count and batch position, on this CPU and thread count; None if
    there is none. Checked once per shape and thread count on `order_probe` and on random rows, at
    every row count up to MAX_ROWS + 1 and at PAD_CHECK_ROWS (about a second for the default model)."""
    threads = torch.get_num_threads() if threads is None else threads
    key = ((out_features, in_features), threads)
    if key not in _pad:
        current = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            _pad[key] = _least_invariant_rows(out_features, in_features)
        finally:
            torch.set_num_threads(current)
    return _pad[key]


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


# ----------------------------------------------------------------------------- timing

def choose(timings: dict[str, float], exact: list[str], margin: float = MARGIN) -> str:
    """The fastest form among the exact ones (``timings``: seconds per form; forms without a time are
    skipped), except that the first exact form (``F.linear``, what transformers computes) is kept
    unless another is faster by more than ``margin`` (a fraction): a near tie is noise on a shared
    machine, and should not flip the choice from one probe to the next. Raises if no exact form was
    timed."""
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


def time_forms(weights: list[torch.Tensor], rows: int, names: list[str], rounds: int = PROBE_ROUNDS,
               forms: dict | None = None, dtype: torch.dtype | None = None) -> dict[str, float]:
    """{form: seconds for one sweep of ``weights`` at ``rows`` rows}, the minimum over interleaved
    rounds (A B, B A, ...), after one warm-up sweep of each; ``forms`` (default FORMS) names the
    functions, the inputs take ``dtype`` (default: the weights' dtype)."""
    forms = FORMS if forms is None else forms
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


# ----------------------------------------------------------------------------- the table

def cache_path() -> Path:
    return cache_root() / "linear_forms.json"


def machine_key(threads: int) -> str:
    kernel = NATIVE if native.available() else f"no {NATIVE}"
    return (f"{describe_cpu()} | torch {torch.__version__} | {threads} thread(s) | float32 | {kernel} | "
            f"forms v{FORMS_VERSION}")


def _read_cache() -> dict:
    """The timings on disk: a class's shared cache (timed once by the hub's set-up, read-only), with this
    user's own over it."""
    shared = shared_root()
    data: dict = {}
    for path in ([shared / cache_path().name] if shared is not None else []) + [cache_path()]:
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(found, dict):
            data.update(found)
    return data


def _write_cache(data: dict) -> None:
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass    # a read-only cache only costs a probe next time


# A choice timed while other work loaded the machine (the 1-minute load average at or above the number of
# cores, i.e. besides this timing at least cores - 1 busy) may be the load's, not the CPU's: it is used,
# marked provisional in the cache, and timed again by the first process that finds the machine quiet.
# (A bf16 choice timed beside a CI run once picked PyTorch's form and kept it; on the quiet machine the C
# kernel was 1.4x faster.)
PROVISIONAL = " | timed while busy"


def _busy() -> bool:
    try:
        return os.getloadavg()[0] >= (os.cpu_count() or 1)
    except (OSError, AttributeError):
        return False


def _usable(data: dict, key: str) -> bool:
    """Whether the cached choice under ``key`` stands: not timed while busy, or the machine is busy still."""
    return not data.get(key + PROVISIONAL) or _busy()


def _store(data: dict, key: str, value, busy: bool) -> None:
    data[key] = value
    if busy:
        data[key + PROVISIONAL] = True
    else:
        data.pop(key + PROVISIONAL, None)


def invariant_forms(shapes: list[tuple[int, int]]) -> list[str]:
    """The batch-invariant forms (INVARIANT, in order) that serve every shape on this CPU and thread count."""
    return [name for name in INVARIANT if all(
        (pad_rows(*shape) is not None) if name == PADDED else kernel_admitted(*shape) for shape in shapes)]


def probe_shapes(shapes: list[tuple[int, int]], threads: int) -> dict[tuple, dict[int, str]]:
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
        samples = {shape: probe_weights(_groups[shape]) for shape in shapes}
        sweep = [samples[shape][k] for k in range(max(map(len, samples.values())))
                 for shape in shapes if k < len(samples[shape])]
        prefill = [probe_weights(_groups[shape], PREFILL_BYTES)[0] for shape in shapes]
        total = dict.fromkeys(names, 0.0)
        for weights, rows_list in ((sweep, DECODE_ROWS), (prefill, PREFILL_ROWS)):
            for rows in rows_list:
                times = time_forms(weights, rows, names)
                _timings[(shapes[0], rows, threads)] = times
                for name in names:
                    total[name] += times[name]
        pick = choose(total, names)
    return {shape: dict.fromkeys(range(1, PREFILL + 1), pick) for shape in shapes}


def _fill(threads: int) -> None:
    """Make sure the table holds every registered shape at 1..MAX_ROWS rows for ``threads``: from the
    disk cache when it has them all, else by probing them together."""
    with _lock:
        shapes = sorted(_groups)
        if all((shape, 1, threads) in _table for shape in shapes):
            return
        key = machine_key(threads)
        data = _read_cache()
        stored = data.get(key, {}) if _usable(data, key) else {}
        names = {shape: f"{shape[0]}x{shape[1]}" for shape in shapes}
        if not all(isinstance(stored.get(names[shape]), dict) and
                   all(stored[names[shape]].get(str(t)) in candidates() for t in range(1, PREFILL + 1))
                   for shape in shapes):
            busy = _busy()
            probed = probe_shapes(shapes, threads)
            data = _read_cache()    # another process may have written meanwhile
            entry = data.get(key, {}) if _usable(data, key) else {}
            for shape in shapes:
                entry[names[shape]] = {str(t): form for t, form in probed[shape].items()}
                entry[names[shape]]["pad"] = _pad.get((shape, threads))
            _store(data, key, entry, busy)
            _write_cache(data)
            stored = entry
        for shape in shapes:
            for t in range(1, PREFILL + 1):
                _table[(shape, t, threads)] = stored[names[shape]][str(t)]
            pad = stored[names[shape]].get("pad")
            if isinstance(pad, int) and (shape, threads) not in _pad:
                _pad[(shape, threads)] = pad      # `pad_rows`, as found when the table was probed


def prepare(weights: list[torch.Tensor]) -> None:
    """Register a model's fp32 CPU weights by shape and fill the table for the current thread count
    and for one thread (what the labs and benchmarks time with): read from the disk cache, or probed
    once, about 10 s per thread count for the default model. Other thread counts are filled the first
    time a product runs with them."""
    if _forced or os.environ.get(ENV):
        return
    groups: dict[tuple, list] = {}
    for w in weights:
        if isinstance(w, torch.Tensor) and w.dtype == torch.float32 and w.device.type == "cpu" and w.dim() == 2:
            groups.setdefault(tuple(w.shape), []).append(w)
    for shape, ws in groups.items():
        _groups.setdefault(shape, probe_weights(ws))
    current = torch.get_num_threads()
    for threads in sorted({current, 1}):
        torch.set_num_threads(threads)
        try:
            _fill(threads)
        finally:
            torch.set_num_threads(current)
    _fill_walk([w for ws in _groups.values() for w in ws])


WALK_KEY = "C kernel: sequential walk up to rows"
WALK_ROWS = (1, 2, 4, 8, 16)    # row counts the two walks are timed at


def _fill_walk(sweep: list[torch.Tensor]) -> None:
    """Set up to how many rows the C kernel walks the weights sequentially (``native.set_sequential_rows``):
    from the disk cache, or timed once on a sweep through ``sweep`` (the first model's probe sample, fp32
    or bf16; a few seconds). The walks give the same bits. One choice per CPU: it is about how this CPU
    streams memory, not the dtype."""
    if NATIVE not in candidates() or not sweep:
        return
    _set_walk(WALK_KEY, native.set_sequential_rows, lambda: _time_walks(sweep))


Q8_WALK_KEY = "C kernel: Q8_0 sequential walk up to rows"


def prepare_q8(codes: torch.Tensor, scales: torch.Tensor) -> None:
    """Set up to how many rows ``native.q8_rows`` walks its weights sequentially: from the disk cache, or
    timed once on ``codes`` and ``scales`` (the LM head; a second or two), as `_fill_walk` does for
    `linear_rows`. The walks give the same bits."""
    if not native.available():
        return
    _set_walk(Q8_WALK_KEY, native.set_q8_sequential_rows, lambda: _time_q8_walks(codes, scales))


def _set_walk(name: str, set_walk: Callable[[int], None], time_walks: Callable[[], dict]) -> None:
    """Set a kernel's walk crossover (``set_walk``) from the disk cache, or from ``time_walks()`` stored
    there (provisionally if the machine is busy). One choice per CPU: it is about how the CPU streams
    memory, not the dtype."""
    with _lock:
        key = f"{describe_cpu()} | {NATIVE} v{native.VERSION} | {name}"
        data = _read_cache()
        rows = data.get(key)
        if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0 or not _usable(data, key):
            busy = _busy()
            rows = sequential_up_to(time_walks())
            data = _read_cache()
            _store(data, key, rows, busy)
            _write_cache(data)
        set_walk(rows)


def _time_q8_walks(codes: torch.Tensor, scales: torch.Tensor) -> dict[int, dict[str, float]]:
    """`_time_walks` for ``native.q8_rows`` over one Q8_0 weight."""
    return _time_walks([codes], native.set_q8_sequential_rows, lambda x, w: native.q8_rows(x, w, scales), torch.float32)


def sequential_up_to(times: dict[int, dict[str, float]], margin: float = MARGIN) -> int:
    """The largest timed row count up to which the sequential walk beat the tiles by more than the margin
    at every timed count (``times``: {rows: {"tiles" | "sequential": seconds}}); 0 if it never did."""
    best = 0
    for rows in sorted(times):
        if choose(times[rows], ["tiles", "sequential"], margin) != "sequential":
            break
        best = rows
    return best


def _time_walks(sweep: list[torch.Tensor], set_walk: Callable[[int], None] = native.set_sequential_rows,
                product: Callable = native.linear_rows, dtype: torch.dtype | None = None) -> dict[int, dict[str, float]]:
    """{rows: {walk: seconds for one sweep through ``sweep``}} at WALK_ROWS, interleaved rounds: ``product``
    (default `linear_rows`) with its walk set by ``set_walk``, inputs in ``dtype`` (default the weights')."""
    def walking(max_rows: int) -> Callable:
        def fn(x, w):
            set_walk(max_rows)
            return product(x, w)
        return fn
    forms = {"tiles": walking(0), "sequential": walking(MAX_ROWS)}
    try:
        return {rows: time_forms(sweep, rows, list(forms), forms=forms, dtype=dtype) for rows in WALK_ROWS}
    finally:
        set_walk(0)


def form_name(shape: tuple[int, int], rows: int, threads: int | None = None) -> str:
    """The form ``labkit.model.llama.linear`` uses for an fp32 CPU product of this shape and row count."""
    if _forced:
        return _forced[-1]
    env = os.environ.get(ENV)
    if env:
        if env not in candidates():
            raise ValueError(f"{ENV}={env!r}: choose one of {', '.join(candidates())}{_native_note(env)}")
        return env
    if rows < 1:
        return DEFAULT_FORM
    rows = min(rows, PREFILL)
    threads = torch.get_num_threads() if threads is None else threads
    name = _table.get((shape, rows, threads))
    if name is None:
        if shape not in _groups:
            return DEFAULT_FORM          # a weight no model registered (e.g. a test's random matrix)
        _fill(threads)
        name = _table[(shape, rows, threads)]
    return name


def product(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weightᵀ in the form chosen for this shape, row count and thread count."""
    return FORMS[form_name(tuple(weight.shape), x.shape[0])](x, weight)


def invariant_product(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weightᵀ in fp32 in a batch-invariant form, whether or not a model registered this shape (the
    fp32 fallback of the bf16 and 4-bit products): the chosen form for a registered shape, else labkit's C
    kernel where it builds, else ``F.linear, padded`` (which raises where F.linear has no invariant row count)."""
    if tuple(weight.shape) in _groups or _forced or os.environ.get(ENV):
        return product(x, weight)
    return native.linear_rows(x, weight) if native.available() else _padded(x, weight)


def table(threads: int | None = None) -> dict[tuple, dict[int, str]]:
    """{shape: {rows: form}} known for a thread count (the current one by default)."""
    threads = torch.get_num_threads() if threads is None else threads
    out: dict[tuple, dict[int, str]] = {}
    for (shape, rows, n), name in sorted(_table.items()):
        if n == threads:
            out.setdefault(shape, {})[rows] = name
    return out


def timings(threads: int | None = None) -> dict[tuple, dict[str, float]]:
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
            if runs and runs[-1][0] == rows[t] and runs[-1][2] == t - 1:
                runs[-1][2] = t
            else:
                runs.append([rows[t], t, t])
        spans = ", ".join(f"{n} {a}" if a == b else f"{n} {a}-{b}" for n, a, b in runs)
        prefill = f", {rows[PREFILL]} above {MAX_ROWS}" if PREFILL in rows else ""
        lines.append(f"{shape[0]}x{shape[1]}: {spans}{prefill}")
    return "; ".join(lines)


# ----------------------------------------------------------------------------- bf16: which form

BF16_ROWS = (1, 2, 4, 8, 16)    # row counts the bf16 probe times on the sweep (and PREFILL_ROWS on a sample)
BF16_ENV = "LABKIT_BF16_KERNEL"  # 1 or 0 asks for the kernel or PyTorch's form (tests, demonstrations)
TORCH_BF16 = "PyTorch"           # PyTorch's bf16 product (``llama._bf16_torch``)
UPCAST = "fp32 product"          # the last resort: bf16 weights widened, the fp32 form, rounded to bf16
_bf16: dict[str, object] = {}    # "weights": a sample of the model's bf16 weights; "torch": its PyTorch form
_bf16_choice: dict[int, bool] = {}    # threads -> whether bf16 products use the kernel (both offered)
_bf16_timings: dict[int, dict] = {}   # threads -> {form: {rows: seconds}}, as probed in this process
_bf16_refused: dict[int, str | None] = {}   # threads -> why PyTorch's form is not offered (None: it is)
_warned: set[str] = set()


def choose_bf16(times: dict[str, dict[int, float]], margin: float = MARGIN) -> bool:
    """Whether the C kernel serves bf16: it must be faster than PyTorch's form by more than ``margin``
    over the probed row counts together (``times``: {"C kernel" | "PyTorch": {rows: seconds}}). One
    choice for every row count, prefill included, never a mix: PyTorch's bf16 rows and the kernel's
    differ in their last bits, and a row must get the same bits at every row count (speculative
    verification, and a decode row sharing a step with a prefill; tests/test_form_invariance.py)."""
    kernel, torch_form = sum(times[NATIVE].values()), sum(times[TORCH_BF16].values())
    return kernel * (1 + margin) < torch_form


def _probe_bf16(threads: int) -> bool:
    forms = {NATIVE: native.linear_rows, TORCH_BF16: _bf16["torch"]}
    best: dict[str, dict[int, float]] = {name: {} for name in forms}
    prefill = [probe_weights(_bf16["weights"], PREFILL_BYTES)[0]]
    for weights, rows_list in ((_bf16["weights"], BF16_ROWS), (prefill, PREFILL_ROWS)):
        for rows in rows_list:
            for name, seconds in time_forms(weights, rows, list(forms), forms=forms).items():
                best[name][rows] = seconds
    _bf16_timings[threads] = best
    return choose_bf16(best)


def _with_threads(threads: int, fn: Callable):
    current = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fn()
    finally:
        torch.set_num_threads(current)


def _fill_bf16(threads: int) -> None:
    with _lock:
        if threads in _bf16_choice:
            return
        key = machine_key(threads).replace("float32", "bfloat16")     # the version counts too
        data = _read_cache()
        if isinstance(data.get(key), bool) and _usable(data, key):
            _bf16_choice[threads] = data[key]
            return
        busy = _busy()
        choice = _with_threads(threads, lambda: _probe_bf16(threads))
        data = _read_cache()
        _store(data, key, choice, busy)
        _write_cache(data)
        _bf16_choice[threads] = choice


def bf16_torch_refused(threads: int | None = None) -> str | None:
    """Why PyTorch's bf16 product is not offered on this CPU at this thread count (a row's bits change
    with the row count or position: `labkit.model.invariance`), or None where it passes. Checked once per
    CPU, torch version and thread count on every registered weight shape (about 3 s for the default
    model), then read from the disk cache."""
    threads = torch.get_num_threads() if threads is None else threads
    if "torch" not in _bf16:
        return None
    with _lock:
        if threads not in _bf16_refused:
            shapes = list(_bf16["shapes"])
            key = machine_key(threads).replace("float32", "bfloat16 PyTorch row invariance")
            data = _read_cache()
            cached = data.get(key)
            if isinstance(cached, dict) and cached.get("shapes") == [list(s) for s in shapes]:
                _bf16_refused[threads] = cached.get("refused")
            else:
                def gate() -> str | None:
                    for shape in shapes:
                        why = invariance.linear_difference(_bf16["torch"], shape, torch.bfloat16)
                        if why is not None:
                            return f"{shape[0]}x{shape[1]}: {why}"
                    return None
                _bf16_refused[threads] = _with_threads(threads, gate)
                data = _read_cache()
                data[key] = {"shapes": [list(s) for s in shapes], "refused": _bf16_refused[threads]}
                _write_cache(data)
    return _bf16_refused[threads]


def bf16_offered(threads: int | None = None) -> list[str]:
    """The bf16 product forms this CPU offers, each giving a row the same bits at every row count: the
    C kernel (row-invariant by construction, where it builds with a bf16 dot product) and PyTorch's form
    where `bf16_torch_refused` finds no difference."""
    offered = [NATIVE] if native.has_bf16() else []
    return offered + ([TORCH_BF16] if bf16_torch_refused(threads) is None else [])


def warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def bf16_form(threads: int | None = None) -> str:
    """The form every bf16 CPU product takes at this thread count (one form at every row count):

    - the offered forms (`bf16_offered`); both: the faster as timed once on this CPU (`choose_bf16`);
    - ``LABKIT_BF16_KERNEL=1`` / ``0`` asks for the kernel / PyTorch's form, granted where offered;
    - neither offered: ``UPCAST`` (exact and row-invariant through the fp32 form, slower), with a warning.
    """
    threads = torch.get_num_threads() if threads is None else threads
    env = os.environ.get(BF16_ENV)
    if "torch" not in _bf16:          # no model registered its weights: nothing to check against
        return NATIVE if env == "1" and native.has_bf16() else TORCH_BF16
    offered = bf16_offered(threads)
    if env in ("0", "1"):
        want = NATIVE if env == "1" else TORCH_BF16
        if want in offered:
            return want
        warn_once(f"{BF16_ENV}={env} asks for {want}, which this CPU does not offer "
                   f"({native.why_unavailable() if want == NATIVE else bf16_torch_refused(threads)})")
    if not offered:
        warn_once(f"no row-invariant bf16 product on this CPU (PyTorch's: {bf16_torch_refused(threads)}; "
                   f"labkit's C kernel: {native.why_unavailable() or 'no bf16 dot product'}): bf16 products "
                   "run as fp32 products of the widened weights, rounded to bf16 (exact, slower)")
        return UPCAST
    if len(offered) == 1:
        return offered[0]
    if threads not in _bf16_choice:
        _fill_bf16(threads)
    return NATIVE if _bf16_choice[threads] else TORCH_BF16


def prepare_bf16(weights: list[torch.Tensor], torch_form: Callable) -> None:
    """Register a model's bf16 CPU weights and PyTorch's bf16 product, and decide for the current
    thread count and for one thread which form serves bf16 products (disk cache, or checked and timed
    once: a few seconds)."""
    ws = [w for w in weights if isinstance(w, torch.Tensor) and w.dtype == torch.bfloat16 and w.dim() == 2]
    if not ws:
        return
    _bf16.setdefault("weights", probe_weights(ws))
    _bf16["shapes"] = sorted(set(_bf16.get("shapes", ())) | {tuple(w.shape) for w in ws})
    _bf16.setdefault("torch", torch_form)
    if native.has_bf16():
        _fill_walk(_bf16["weights"])
    for threads in sorted({torch.get_num_threads(), 1}):
        bf16_form(threads)


def timed_while_busy(kind: str, threads: int) -> bool:
    """Whether the cached choice of ``kind`` ("float32" or "bfloat16") at ``threads`` was timed while the
    machine was busy (provisional: timed again once it is quiet)."""
    key = machine_key(threads) if kind == "float32" else machine_key(threads).replace("float32", "bfloat16")
    return bool(_read_cache().get(key + PROVISIONAL))


def bf16_report(threads: int | None = None) -> str:
    """Which bf16 form serves products here, why, and whether its timing was taken while busy (benchmarks)."""
    threads = torch.get_num_threads() if threads is None else threads
    form = bf16_form(threads)
    refused = bf16_torch_refused(threads)
    why = (f"; PyTorch's refused ({refused})" if refused else
           "; the only form offered" if len(bf16_offered(threads)) == 1 else
           "; both offered, the faster as timed" + (" (timed while busy: provisional)"
                                                    if timed_while_busy("bfloat16", threads) else ""))
    return form + why


def bf16_uses_kernel(threads: int | None = None) -> bool:
    """Whether bf16 CPU products (every row count) go through the C kernel at this thread count."""
    return bf16_form(threads) == NATIVE


def bf16_timings(threads: int | None = None) -> dict[str, dict[int, float]]:
    """{form: {rows: seconds}} of the bf16 probe run in this process (empty when read from the disk cache)."""
    return _bf16_timings.get(torch.get_num_threads() if threads is None else threads, {})


def _native_note(name: str) -> str:
    return f" ({NATIVE} is not available here: {native.why_unavailable()})" if name == NATIVE else ""


@contextmanager
def forced(name: str) -> Iterator[None]:
    """Use one form for every fp32 CPU product inside the block, at any row count (tests, demos)."""
    if name not in candidates():
        raise ValueError(f"unknown linear form {name!r}: choose one of {', '.join(candidates())}{_native_note(name)}")
    _forced.append(name)
    try:
        yield
    finally:
        _forced.pop()


def forget() -> None:
    """Drop the in-process table and registered weights (tests; the disk cache stays)."""
    with _lock:
        _table.clear()
        _groups.clear()
        _timings.clear()
        _bf16.clear()
        _bf16_choice.clear()
        _bf16_timings.clear()
        _bf16_refused.clear()
        _pad.clear()
