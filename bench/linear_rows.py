"""What one step's weight sweep costs for T rows, for each way to write x·Wᵀ on this CPU.

    python -m bench.linear_rows                   # fp32 and bf16, 1 and 2 threads, T = 1, 2, 4, 6, 8, 12, 16
    python -m bench.linear_rows --threads 1 --rows 1,2,5 --dtypes bfloat16

A decode step multiplies T rows (T = batch size, or k + 1 when verifying k drafts) by every weight
matrix of the model. Memory-bound, T rows should cost about what one row costs, since the weights
are read once either way; how close a formulation gets depends on the BLAS kernel it lands in.
``labkit.model.llama.linear`` picks between ``F.linear(x, W)`` and ``(W @ xᵀ)ᵀ`` by dtype, T and the
CPU (the rule is printed under each table); this table is the evidence for that choice on the
machine at hand. The weights are the default model's, fused as the engine holds them (qkv,
o, gate_up, down per layer, then the LM head).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from bench.common import Section, add_dtypes_option, interleaved, median, report, set_clock, set_threads, timed

FORMULATIONS = {
    "F.linear(x, W)": lambda x, w: F.linear(x, w),
    "(W @ xᵀ)ᵀ": lambda x, w: torch.mm(w, x.t()).t(),
}


def model_weights(model: str | None) -> list[torch.Tensor]:
    from labkit import LLM, EngineConfig

    config = EngineConfig(device="cpu", dtype="float32", num_blocks=4)
    net = LLM(model=model, config=config, progress=False).engine.runner.model
    weights = [w for layer in net.layers for w in (layer.qkv_proj, layer.o_proj, layer.gate_up_proj, layer.down_proj)]
    return weights + [net.lm_head]


def sweep(weights: list[torch.Tensor], fn, rows: int):
    inputs = {w.shape[1]: torch.randn(rows, w.shape[1]).to(w.dtype) for w in weights}
    return lambda: timed(lambda: [fn(inputs[w.shape[1]], w) for w in weights])[0]


def rows_section(weights: list[torch.Tensor], threads: int, rows: list[int], rounds: int) -> Section:
    set_threads(threads)
    clock = set_clock("auto", threads)
    from labkit.model import llama

    formulations = dict(FORMULATIONS, **{"labkit linear()": llama.linear})
    table, one_row = [], {}
    for t in rows:
        results = interleaved({name: sweep(weights, fn, t) for name, fn in formulations.items()}, rounds)
        ms = {name: 1e3 * median([r[name] for r in results]) for name in formulations}
        one_row = one_row or ms
        best = min(ms, key=ms.get)
        table.append([str(t)] + [f"{ms[n]:.1f} ({ms[n] / one_row[n]:.2f}x)" for n in formulations] + [best])
    dtype = weights[0].dtype
    name = str(dtype).removeprefix("torch.")
    if dtype == torch.bfloat16:
        paired = sorted({tuple(w.shape) for w in weights if llama._one_row_needs_pair(w)})
        multi = "(W @ xᵀ)ᵀ (AMX)" if llama.has_amx() else "F.linear (no AMX)"
        rule = (f"labkit linear() uses {multi} for bf16 T in 2..16; one row goes through F.linear, except for "
                f"shapes whose one-row result differs from the multi-row one on this CPU (computed as two "
                f"copies): {', '.join(map(str, paired)) or 'none'}")
    else:
        first, last = llama._MM_ROWS.get(dtype, (0, -1))
        rule = f"labkit linear() uses (W @ xᵀ)ᵀ for {name} T in {first}..{last}"
    notes = [f"ms per sweep of all weights ({clock} clock), median of {rounds} interleaved rounds; in brackets: "
             "relative to the same formulation at T = 1", rule]
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
