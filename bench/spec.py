"""Speculative decoding on this CPU: measured speed-up beside the Leviathan prediction.

    python -m bench.spec             # n-gram, the shipped draft and the 4-bit copy, k in {1, 2, 4, 6},
                                     # with an fp32 target and then a bf16 one (about 15 minutes)
    python -m bench.spec --quick
    python -m bench.spec --dtypes bfloat16 --methods ngram,int4

Why two dtypes. The formula counts a verification step (k + 1 tokens) as one plain step. In fp32 on
this CPU it is not: MKL's matmul on 2-7 rows costs up to twice one row, so the verify pass costs
1.1-2.4 plain steps. In bf16 the AMX matmul costs the same for 2 to 16 rows, so verification is
close to free, and the measured speed-up meets the textbook prediction. Both keep the output
identical to plain greedy: the reference attention computes verification rows exactly as decoding
would (``labkit/attention/cpu_batched.py``).

Single stream, greedy, same process. For every prompt, plain greedy and each (method, k) run once,
in an order that reverses from prompt to prompt; a workload's speed-up is the plain decode time
over the speculative decode time summed over its prompts (both produce the same tokens, which
the table checks). Decode time = every engine step after the prefill step, plus the proposer call
that ends the prefill step (it drafts for the first decode step): prefill is the same work
either way. Times are on the process CPU clock with one thread (see
``bench/common.py``: on this shared machine wall time mostly measures the neighbours).

How α (per-token acceptance, maximum likelihood), c (draft cost per token) and the verify cost are
measured, and why the measurement and the textbook formula differ, is written once, next to the
code that measures them (shared with lab 04): ``labkit/labs/lab04_speculative/speedup.py``.
"""

from __future__ import annotations

import argparse

from bench.common import Section, add_dtypes_option, clock_name, interleaved, now, report, set_clock, set_threads
from labkit.labs.lab04_speculative.speedup import (  # noqa: F401  (re-exported: tests and callers use bench.spec.*)
    CPU_CONFIG,
    Row,
    RunStats,
    Timers,
    acceptance_mle,
    acceptance_rate,
    aggregate,
    make_llm,
    run_one,
)

WORKLOADS = (("copy", "copy-heavy editing"), ("code", "code"), ("chat", "open chat"))
METHODS = {   # --methods name: (table title, SpecConfig fields)
    "ngram": ("n-gram prompt lookup", dict(method="ngram")),
    "draft": ("draft model (the shipped distilled draft, data/drafts/)", dict(method="draft")),
    "int4": ("draft model = a 4-bit copy of the target (labkit.model.quant)",
             dict(method="draft", draft_model="target-int4")),
}
TARGET_SPEEDUP = 1.5     # >= 1.5x on one realistic workload at the best k
PREDICTION_TOLERANCE = 0.15


# ----------------------------------------------------------------------------- engines

def make_engines(model: str | None, methods: list[str], ks: list[int],
                 config: dict | None = None) -> tuple[dict, list[str]]:
    """{"plain": LLM, "ngram k=1": LLM, ...} and a note per method that could not be built."""
    from labkit import SpecConfig

    engines, skipped = {"plain": make_llm(model, None, config)}, []
    for method in methods:
        try:
            for k in ks:
                spec = SpecConfig(num_speculative_tokens=k, **METHODS[method][1])
                engines[f"{method} k={k}"] = make_llm(model, spec, config)
        except Exception as exc:  # an optional method that cannot be built is reported, not fatal
            engines = {n: e for n, e in engines.items() if not n.startswith(method)}
            skipped.append(f"{method}: skipped ({type(exc).__name__}: {exc})")
    return engines, skipped


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def table_row(row: Row) -> list[str]:
    slower = " (slower)" if row.speedup < 1 else ""
    return [row.workload, str(row.k), _fmt(row.alpha), _fmt(row.accepted_over_drafted),
            f"{100 * row.proposal_rate:.0f} %", _fmt(row.c, ".3f"),
            f"{row.tokens_per_step:.2f} / {_fmt(row.predicted_tokens_per_step)}", f"{row.verify_cost:.2f}",
            f"**{row.speedup:.2f}x**{slower}", f"{_fmt(row.prediction)}x", f"{_fmt(row.adjusted_prediction)}x",
            row.identical]


HEADERS = ["workload", "k", "α (per-token MLE)", "accepted / drafted", "proposal rate", "c",
           "tokens / step: measured / formula", "verify cost (plain steps)", "speed-up measured",
           "Leviathan prediction", "prediction, measured proposal rate + verify cost", "output identical"]


def method_section(method: str, rows: list[Row], max_tokens: int, num_prompts: int, dtype: str) -> Section:
    notes = [f"{num_prompts} held-out prompt(s) per workload, greedy, up to {max_tokens} new tokens (EOS "
             "honoured; speculative and plain runs produce the same tokens, see the last column)",
             f"speed-up = plain decode time / speculative decode time ({clock_name()} clock, first token to "
             "last), summed over the workload's prompts; plain and speculative runs interleave, order "
             "reversing per prompt",
             "Leviathan prediction = (1 − α^(k+1)) / ((1 − α)(k·c + 1)) (Leviathan et al. 2023, Thm 3.8) "
             "with the α and c measured in the same runs",
             "proposal rate = verification steps / decode steps (a step without drafts is a plain step); "
             "verify cost = (speculative step time − proposer time) / plain decode step time",
             "prediction with measured proposal rate + verify cost = E[tokens / step] from α (steps without "
             "drafts emit 1 token; a step with d drafts emits (1 − α^(d+1)) / (1 − α) on average) / (verify cost "
             "+ k·c): the same model, with the two things the textbook formula assumes away on a CPU"]
    notes += verdicts(rows)
    body = [table_row(r) for r in rows]
    return Section(f"Speculative decoding: {method} = {METHODS[method][0]} ({dtype} target, single stream, greedy)",
                   HEADERS, body, notes)


def verdicts(rows: list[Row]) -> list[str]:
    """Plain-language lines: best k per workload, slower cases, prediction gaps."""
    lines = []
    for workload in dict.fromkeys(r.workload for r in rows):
        best = max((r for r in rows if r.workload == workload), key=lambda r: r.speedup)
        mark = "meets" if best.speedup >= TARGET_SPEEDUP else "misses"
        lines.append(f"{workload}: best k = {best.k} at {best.speedup:.2f}x ({mark} the "
                     f"{TARGET_SPEEDUP}x target)")
    slower = [f"{r.workload} k={r.k} ({r.speedup:.2f}x)" for r in rows if r.speedup < 1]
    if slower:
        lines.append("SLOWER than plain greedy: " + ", ".join(slower))
    for label, attr in (("Leviathan prediction", "prediction"),
                        ("prediction with measured proposal rate + verify cost", "adjusted_prediction")):
        scored = [r for r in rows if getattr(r, attr)]
        off = [f"{r.workload} k={r.k}" for r in scored if abs(r.speedup / getattr(r, attr) - 1) > PREDICTION_TOLERANCE]
        lines.append(f"within {100 * PREDICTION_TOLERANCE:.0f} % of the {label}: {len(scored) - len(off)}/{len(scored)} "
                     "rows" + (f"; off: {', '.join(off)}" if off else ""))
    return lines


# ----------------------------------------------------------------------------- main

def workload_prompts(tokenizer, name: str, count: int) -> list[list[int]]:
    from labkit.traces import load_prompts

    return [tokenizer.encode_prompt(p) for p in load_prompts(name, "heldout")[:count]]


def measure(engines: dict, timers: dict[str, Timers], prompts: list[list[int]], max_tokens: int,
            start: int) -> list[dict[str, RunStats]]:
    """One interleaved round per prompt over all engines."""
    rounds = []
    for i, prompt in enumerate(prompts):
        runs = {name: (lambda llm=llm, t=timers[name]: run_one(llm, prompt, max_tokens, t))
                for name, llm in engines.items()}
        rounds += interleaved(runs, 1, start=start + i)
    return rounds


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one prompt per workload, fewer tokens")
    p.add_argument("--tiny", action="store_true", help="smoke mode: a few tokens (seconds)")
    p.add_argument("--model", default=None)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1, see bench/common.py)")
    p.add_argument("--clock", choices=["auto", "cpu", "wall"], default="auto",
                   help="auto: process CPU time with one thread, else wall time")
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated: " + ", ".join(METHODS))
    p.add_argument("--ks", default="1,2,4,6")
    add_dtypes_option(p, "float32,bfloat16", "comma-separated target dtypes, each a full run (float32: the parity "
                      "dtype; bfloat16: on AMX verifying k+1 tokens costs about one plain step)")
    p.add_argument("--workloads", default=",".join(w for w, _ in WORKLOADS))
    p.add_argument("--prompts", type=int, default=None, help="prompts per workload (default 2, quick 1)")
    p.add_argument("--max-tokens", type=int, default=None, help="default 96, quick 48")
    args = p.parse_args(argv)
    size = "tiny" if args.tiny else "quick" if args.quick else "full"
    prompts, tokens = {"full": (2, 96), "quick": (1, 48), "tiny": (1, 6)}[size]
    args.prompts, args.max_tokens = args.prompts or prompts, args.max_tokens or tokens
    args.methods = [m for m in args.methods.split(",") if m]
    if set(args.methods) - set(METHODS):
        p.error(f"unknown methods {sorted(set(args.methods) - set(METHODS))}; choose from {list(METHODS)}")
    args.ks = [int(k) for k in args.ks.split(",")]
    args.workloads = [w for w in args.workloads.split(",") if w]
    return args


def run(args: argparse.Namespace) -> list[Section]:
    set_clock(args.clock, set_threads(args.threads))
    sections = []
    for dtype in args.dtypes:
        sections += spec_sections(args.model, args.methods, args.ks, args.workloads, args.prompts, args.max_tokens,
                                  dict(CPU_CONFIG, dtype=dtype))
    return sections


def spec_sections(model: str | None, methods: list[str], ks: list[int], workloads: list[str],
                  num_prompts: int, max_tokens: int, config: dict | None = None) -> list[Section]:
    """Build the engines, warm them up, measure every workload; one table per method."""
    engines, skipped = make_engines(model, methods, ks, config)
    timers = {name: Timers.attach(llm.engine, now) for name, llm in engines.items()}
    tokenizer = engines["plain"].tokenizer
    measure(engines, timers, workload_prompts(tokenizer, "chat", 1), 4, start=0)      # warm-up
    rows: dict[str, list[Row]] = {}
    for w, (name, label) in enumerate(wl for wl in WORKLOADS if wl[0] in workloads):
        rounds = measure(engines, timers, workload_prompts(tokenizer, name, num_prompts), max_tokens, start=w)
        for engine_name in engines:
            if engine_name != "plain":
                rows.setdefault(engine_name.split()[0], []).append(aggregate(label, engine_name, rounds))
    dtype = (config or CPU_CONFIG).get("dtype", "auto")
    sections = [method_section(m, rs, max_tokens, num_prompts, dtype) for m, rs in rows.items()]
    if skipped:
        sections.append(Section("Speculative decoding: skipped methods", ["method"], [[s] for s in skipped]))
    return sections


def main(argv: list[str] | None = None) -> list[Section]:
    return report("Speculative decoding on CPU", "bench.spec", argv, run(parse_args(argv)))


if __name__ == "__main__":
    main()
