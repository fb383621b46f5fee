"""What one step's weight sweep costs for T rows, for each way to write x·Wᵀ on this CPU.

    python -m bench.linear_rows                   # fp32 and bf16, 1 and 2 threads, T = 1, 2, 4, 6, 8, 12, 16
    python -m bench.linear_rows --threads 1 --rows 1,2,5 --dtypes bfloat16

A decode step multiplies T rows (T = batch size, or k + 1 when verifying k drafts) by every weight
matrix of the model. Memory-bound, T rows should cost about what one row costs, since the weights
are read once either way; how close a formulation gets depends on the BLAS kernel it lands in.
``labkit.kernels.ops.torch_ops.linear`` picks the form per weight shape and T: for fp32 by a timing probe among
the forms that pass an exactness gate (``labkit.kernels.linear_forms``, its table printed under the
fp32 tables), for bf16 by the rule printed under the bf16 tables. This table is the evidence on the
machine at hand. The weights are the default model's, fused as the engine holds them (qkv, o,
gate_up, down per layer, then the LM head).

Two more forms are measured and never chosen, because each needs a second copy of every weight and
sums in an order ``F.linear`` never uses (the gate says so in the notes): ``x @ Wᵀ`` from a
contiguous transposed copy, and oneDNN's prepacked linear (``torch.ops.mkldnn._linear_pointwise``).
Under each table: the read roofline of this CPU with these threads (the best of a few kernels that read
a tensor as large as the weights once, ``bench.common.read_kernels``), measured in the same interleaved
rounds as the one-row sweeps, and the share of it each form reaches at one row, taken round by round (this
machine's memory rate drifts between minutes; a roofline measured apart from the sweeps does not describe
them).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from bench.common import (
    Section,
    add_dtypes_option,
    interleaved,
    load_average,
    median,
    read_kernels,
    report,
    set_clock,
    set_threads,
    timed,
)
from labkit.kernels import native
from labkit.kernels.cpu_features import describe_cpu, has_amx

TARGET_VS_BEST = 1.1     # no row count slower than 1.1x the best available form
TARGET_READ_SHARE = 0.85  # labkit's one-row sweep reads at least 85 % of the read roofline, at any thread count
READ = "read: "           # the read kernels' names in the interleaved rounds

FORMULATIONS = {
    "F.linear(x, W)": lambda x, w: F.linear(x, w),
    "(W @ xᵀ)ᵀ": lambda x, w: torch.mm(w, x.t()).t(),
}


class Copies:
    """Forms that read a prepared copy of each weight (made once per weight, outside the timing)."""

    def __init__(self, prepare):
        self.prepare, self.copies = prepare, {}

    def get(self, w: torch.Tensor):
        key = (w.data_ptr(), tuple(w.shape), w.dtype)
        if key not in self.copies:
            self.copies[key] = self.prepare(w)
        return self.copies[key]


def extra_forms(weights: list[torch.Tensor]) -> tuple[dict, list[str]]:
    """Measured-only forms: a transposed contiguous copy, and oneDNN's prepacked weight (when this torch
    build has the op and packs this dtype on this CPU: its bf16 packing needs AVX-512BW/VL/DQ or
    AVX-NE-CONVERT); and a note for each form left out, saying why."""
    transposed = Copies(lambda w: w.t().contiguous())
    forms = {"x @ Wᵀ, transposed copy": lambda x, w: torch.mm(x, transposed.get(w))}
    if not (hasattr(torch.ops.mkldnn, "_reorder_linear_weight") and torch.backends.mkldnn.is_available()):
        return forms, ["oneDNN prepacked: not measured (this torch build has no oneDNN linear packing)"]
    packed = Copies(lambda w: torch.ops.mkldnn._reorder_linear_weight(w, 1))
    try:
        packed.get(weights[0])
    except RuntimeError as exc:
        reason = str(exc).strip().splitlines()[0]
        return forms, [f"oneDNN prepacked: not measured for {str(weights[0].dtype).removeprefix('torch.')} "
                       f"on this CPU ({reason})"]
    forms["oneDNN prepacked"] = lambda x, w: torch.ops.mkldnn._linear_pointwise(
        x, packed.get(w), None, "none", [None], "")
    return forms, []


def model_weights(model: str | None) -> list[torch.Tensor]:
    from labkit import LLM, EngineConfig

    config = EngineConfig(device="cpu", dtype="float32", num_blocks=4)
    return LLM(model=model, config=config, progress=False).engine.runner.model.linear_weights()


def sweep(weights: list[torch.Tensor], fn, rows: int):
    inputs = {w.shape[1]: torch.randn(rows, w.shape[1]).to(w.dtype) for w in weights}
    return lambda: timed(lambda: [fn(inputs[w.shape[1]], w) for w in weights])[0]


def gate_note(weights: list[torch.Tensor], forms: dict) -> str:
    """Which measured forms pass the fp32 exactness gate, on every weight shape, at 1 and at 2..16 rows."""
    from labkit.kernels import linear_forms

    verdicts = {name: [True, True] for name in forms}
    for shape in sorted({tuple(w.shape) for w in weights}):
        exact = linear_forms.exact_forms(*shape, forms=forms)
        for name in forms:
            verdicts[name][0] &= name in exact[1]
            verdicts[name][1] &= all(name in exact[t] for t in exact if t > 1)
    words = {(True, True): "exact", (False, False): "not exact", (True, False): "exact at 1 row only",
             (False, True): "exact at 2..16 rows only"}
    kernel = ""
    native_form = linear_forms.Form.NATIVE
    if native_form in linear_forms.candidates():
        shapes = sorted({tuple(w.shape) for w in weights})
        ok = all(native_form in linear_forms.exact_forms(*shape)[1] for shape in shapes)
        kernel = (f"; {native_form} (its own order): {'row-invariant and as accurate as F.linear, admitted' if ok else 'refused'}"
                  " by the gate's second rule")
    return ("exactness gate (each row's bits are bits F.linear gives it at some row count, on the order probe, "
            "every weight shape): " + "; ".join(f"{name}: {words[tuple(v)]}" for name, v in verdicts.items()) + kernel)


def _bf16_probe_note(threads: int) -> str:
    from labkit.kernels import linear_forms

    times = linear_forms.bf16_timings(threads)
    if not times:
        return "read from the disk cache"
    kernel, torch_form = times[linear_forms.Bf16Form.NATIVE], times[linear_forms.Bf16Form.TORCH]
    return ", ".join(f"{t}: {1e3 * kernel[t]:.1f} / {1e3 * torch_form[t]:.1f}" for t in sorted(kernel))


def read_runs(nbytes: int) -> tuple[dict, int]:
    """The read kernels as interleaved runs (each returns its seconds) over one float32 tensor of about
    ``nbytes`` (far beyond the caches, like the weight sweep it is compared with), and that tensor's bytes."""
    x = torch.ones(max(nbytes // 4096, 1) * 1024, dtype=torch.float32)
    runs = {}
    for name, kernel in read_kernels(x).items():
        kernel()
        runs[READ + name] = lambda kernel=kernel: timed(kernel)[0]
    return runs, x.numel() * x.element_size()


def read_note(results: list[dict], nbytes: int, read_bytes: int, threads: int, forms: list[str]) -> str:
    """The read roofline of each round (its best read kernel), and each form's one-row sweep of ``nbytes`` as
    a share of its own round's roofline: medians over the rounds, with the range of labkit's share."""
    kernels = [k for k in results[0] if k.startswith(READ)]
    roofs = [max(read_bytes / r[k] for k in kernels) for r in results]
    shares = {f: [nbytes / r[f] / roof for r, roof in zip(results, roofs)] for f in forms}
    rates = {k.removeprefix(READ): median([read_bytes / r[k] for r in results]) for k in kernels}
    own = sorted(shares["labkit linear()"])
    met = "met" if median(own) >= TARGET_READ_SHARE else "not met"
    listed = ", ".join(f"{f} {nbytes / median([r[f] for r in results]) / 1e9:.1f} GB/s = "
                       f"{100 * median(shares[f]):.0f} %" for f in forms)
    kernel_rates = ", ".join(f"{k} {v / 1e9:.1f}" for k, v in rates.items())
    return (f"read roofline, {threads} thread(s), in the same rounds as the one-row sweeps: "
            f"{median(roofs) / 1e9:.1f} GB/s (median of each round's best read kernel; medians: {kernel_rates} "
            f"GB/s over {read_bytes / 1e6:.0f} MB); one-row sweep of {nbytes / 1e6:.0f} MB as a share of its "
            f"round's roofline (median): {listed}; labkit linear() {100 * own[0]:.0f}–{100 * own[-1]:.0f} % "
            f"over the rounds; target: at least {100 * TARGET_READ_SHARE:.0f} % ({met})")


def rows_section(weights: list[torch.Tensor], threads: int, rows: list[int], rounds: int) -> Section:
    set_threads(threads)
    clock = set_clock("auto", threads)
    from labkit.kernels import linear_forms
    from labkit.kernels.ops import torch_ops

    dtype = weights[0].dtype
    name = str(dtype).removeprefix("torch.")
    if dtype == torch.float32:
        linear_forms.prepare(weights)       # the probe's table for this thread count (cached on disk)
    else:
        linear_forms.prepare_bf16(weights, torch_ops._bf16_torch)    # the C kernel or not (cached on disk)
    extras, left_out = extra_forms(weights)
    formulations = dict(FORMULATIONS, **extras, **{"labkit linear()": torch_ops.linear})
    table, one_row, vs_best, read_rounds, read_bytes = [], {}, {}, [], 0
    nbytes = sum(w.numel() * w.element_size() for w in weights)
    for t in rows:
        runs = {name: sweep(weights, fn, t) for name, fn in formulations.items()}
        if t == 1:
            reads, read_bytes = read_runs(nbytes)
            runs.update(reads)
        results = interleaved(runs, rounds)
        if t == 1:
            read_rounds = results
        ms = {name: 1e3 * median([r[name] for r in results]) for name in formulations}
        one_row = one_row or ms
        vs_best[t] = ms["labkit linear()"] / min(ms[n] for n in FORMULATIONS)
        best = min(ms, key=ms.get)
        table.append([str(t)] + [f"{ms[n]:.1f} ({ms[n] / one_row[n]:.2f}x)" for n in formulations] + [best])
    notes = [f"ms per sweep of all weights ({clock} clock), median of {rounds} interleaved rounds; in brackets: "
             "relative to the same formulation at T = 1",
             f"cpu: {describe_cpu()}; torch {torch.__version__}; load average {load_average()} at the end",
             *left_out]
    worst = max(vs_best, key=vs_best.get)
    notes.append(f"labkit linear() / the faster of {' and '.join(FORMULATIONS)} at each T: at most "
                 f"{vs_best[worst]:.2f}x (T = {worst}); target: <= {TARGET_VS_BEST}x at every T")
    if dtype == torch.bfloat16 and linear_forms.bf16_uses_kernel(threads):
        kind = ("AVX512_BF16 dot products" if native.bf16_kind() == "dot" else
                "bf16 weights widened to fp32 in registers")
        timed = linear_forms.bf16_timings(threads)
        notes.append(f"labkit linear() uses labkit's C kernel ({kind}, row-invariant) for bf16 at every T: "
                     f"{linear_forms.bf16_report(threads)}" +
                     (f" (one-time probe, ms per sweep, kernel / PyTorch, by rows: {_bf16_probe_note(threads)})"
                      if timed else ""))
    elif dtype == torch.bfloat16:
        paired = sorted({tuple(w.shape) for w in weights if torch_ops._one_row_needs_pair(w)})
        multi = "(W @ xᵀ)ᵀ (AMX)" if has_amx() else "F.linear (no AMX)"
        notes.append(f"labkit linear() uses {multi} for bf16 T in 2..16; one row goes through F.linear, except for "
                     f"shapes whose one-row result differs from the multi-row one on this CPU (computed as two "
                     f"copies): {', '.join(map(str, paired)) or 'none'}; labkit's C kernel: "
                     f"{'not faster here' if native.has_bf16() else 'not built here'}")
    else:
        notes.append(f"labkit linear() for float32, chosen by the probe on this CPU ({threads} thread(s)), "
                     f"by weight shape and rows: {linear_forms.describe(threads)}")
        notes.append(gate_note(weights, dict(FORMULATIONS, **extras)))
    if read_rounds:
        notes.append(read_note(read_rounds, nbytes, read_bytes, threads, list(formulations)))
    return Section(f"Weight sweep vs rows, {name}, {threads} thread(s)", ["rows T", *formulations, "fastest"],
                   table, notes)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rows", default="1,2,4,6,8,12,16")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--model", default=None)
    add_dtypes_option(p, "float32,bfloat16", "comma-separated weight dtypes")
    args = p.parse_args(argv)
    args.threads = [int(t) for t in args.threads.split(",")]
    args.rows = [int(t) for t in args.rows.split(",")]
    return args


def main(argv: list[str] | None = None) -> list[Section]:
    args = parse_args(argv)
    weights = model_weights(args.model)
    return report("Weight sweep vs rows", "bench.linear_rows", argv,
                  (rows_section([w.to(dtype) for w in weights], t, args.rows, args.rounds)
                   for dtype in map(lambda name: getattr(torch, name), args.dtypes) for t in args.threads))


if __name__ == "__main__":
    main()
