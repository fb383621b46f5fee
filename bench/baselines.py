"""Acceptance: the "before" systems measured against the "after" ones, in one engine.

    python -m bench.baselines            # Azure traces on the simulated GPU + the real model on this CPU
    python -m bench.baselines --quick    # 400 Azure requests, 16 short real-model requests
    python -m bench.baselines --tiny     # smoke mode: seconds to a minute, numbers meaningless

Part 1, simulated model (``LLM(model="sim")``: the real scheduler and KV bookkeeping, a roofline cost
model for the forward pass, so a 2,000-request trace with 4k-token contexts runs in seconds). The
Azure LLM inference trace 2023 (conversation and code; Patel et al., "Splitwise", ISCA 2024, CC-BY
4.0), first 2,000 requests with prompt + output <= 4,096 tokens, all arriving at t = 0,
``max_model_len=4096``, ``block_size=16``, ``max_num_seqs=32``. Reported, as means over engine steps:

- KV waste, paged vs contiguous (max-length reservation, split into reserved-for-later, internal and
  external fragmentation);
- batch occupancy, continuous vs static; static's decode-step occupancy next to what the lengths
  alone predict (``labkit.replay.static_decode_occupancy``: batches of 32 in arrival order, each
  until its longest request ends); and occupancy over the steps that began with requests still
  waiting, because once the queue is empty the drain tail (fewer and fewer requests left) pulls the
  all-steps mean down, most for the code trace whose outputs are short.

Two diagnostic rows follow the three systems: continuous batching with a token budget of 8,192
(with the default 1,024, the code trace's ~1,100-token prompts admit about one request per step, so
the budget, not the scheduler, caps occupancy), and static batching with a budget that prefills a
whole batch in one step (the lock-step decode that ``static_decode_occupancy`` assumes; with chunked
prefill, decodes start at staggered steps and fewer steps are decode-only).

Part 2, the real model (SmolLM2-135M, fp32) on this CPU: 64-request synthetic heavy-tailed traces
(``labkit.traces.synthetic_trace``, seed 0, all at t = 0), twice: output lengths log-normal with
sigma 1.0, and with the tail of the Azure 2023 code trace (sigma from its P99/P50), because how much
continuous batching gains depends on how unequal the output lengths in a batch are. Useful tokens/s (the trace's output
tokens / wall seconds, and / CPU seconds of this process) for continuous and static batching in the
same engine, and for ``transformers`` ``generate`` run as static padded batches of the same size (left
padding, explicit attention mask, each batch until its longest request ends). Greedy, ``ignore_eos``,
one intra-op thread by default (see ``bench/common.py``). On a shared machine CPU seconds track the
work; wall seconds also count the neighbours.
Targets: continuous >= 2.5x static in the same engine, >= 3x ``generate`` static batches.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, replace
from pathlib import Path

from bench.common import Section, add_dtypes_option, hf_model, left_padded, load_average, markdown, set_threads

AZURE_CONFIG = dict(max_model_len=4096, block_size=16, max_num_seqs=32)
AZURE_LIMITS = {"full": 2000, "quick": 400, "tiny": 60}
TARGET_PAGED_WASTE, TARGET_CONTIGUOUS_WASTE = 4.0, 60.0          # percent
TARGET_CONTINUOUS_OCCUPANCY, TARGET_STATIC_AGREEMENT = 85.0, 5.0  # percent, points
TARGET_VS_STATIC, TARGET_VS_HF = 2.5, 3.0


# ============================================================================ part 1: simulated

@dataclass(frozen=True)
class SimRun:
    """Run-level means of one replay (percentages 0..100)."""

    stats: dict
    occupancy_while_waiting: float | None   # mean over steps that began with requests waiting
    wall_s: float


def azure_trace(kind: str, limit: int) -> list:
    """The first ``limit`` requests (prompt + output <= 4,096), all moved to t = 0."""
    from labkit.traces import load_azure_trace

    trace = load_azure_trace(kind, limit=limit, max_total_tokens=AZURE_CONFIG["max_model_len"])
    return [replace(r, arrival_s=0.0) for r in trace]


def run_sim(trace: list, **config) -> SimRun:
    from labkit import LLM, EngineConfig
    from labkit.replay import replay

    llm = LLM(model="sim", config=EngineConfig(**AZURE_CONFIG, **config), progress=False)
    busy_while_waiting: list[float] = []
    waiting_before = [len(trace)]               # every request is queued before the first step

    def on_step(engine, _steps: int) -> None:
        last = engine.metrics.last
        if waiting_before[0] > 0:
            busy_while_waiting.append(last.batch_occupancy_perc)
        waiting_before[0] = last.num_requests_waiting

    result = replay(llm.engine, trace, on_step=on_step)
    assert result.stats["num_finished_requests"] == len(trace) and result.num_clipped == 0
    mean_waiting = sum(busy_while_waiting) / len(busy_while_waiting) if busy_while_waiting else None
    return SimRun(result.stats, mean_waiting, result.wall_s)


WHOLE_BATCH_BUDGET = AZURE_CONFIG["max_num_seqs"] * AZURE_CONFIG["max_model_len"]   # any batch's prompts
BIG_BUDGET = 8192


def sim_runs(kind: str, limit: int) -> tuple[list, dict[str, SimRun]]:
    """The three systems of the acceptance check (default token budget, 1,024), then two diagnostics:
    continuous with a budget that stops limiting admissions, and static with every batch's prompts
    prefilled in one step (the lock-step that static_decode_occupancy assumes)."""
    trace = azure_trace(kind, limit)
    runs = {"paged, continuous": run_sim(trace),
            "contiguous, continuous": run_sim(trace, kv_cache="contiguous"),
            "paged, static": run_sim(trace, scheduler="static"),
            f"paged, continuous, budget {BIG_BUDGET}": run_sim(trace, max_num_batched_tokens=BIG_BUDGET),
            f"paged, static, budget {WHOLE_BATCH_BUDGET}": run_sim(trace, scheduler="static",
                                                                 max_num_batched_tokens=WHOLE_BATCH_BUDGET)}
    return trace, runs


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def verdict(ok: bool) -> str:
    return "yes" if ok else "**no**"


def sim_section(kind: str, limit: int) -> Section:
    from labkit.replay import static_decode_occupancy

    trace, runs = sim_runs(kind, limit)
    predicted = static_decode_occupancy([r.output_len for r in trace], AZURE_CONFIG["max_num_seqs"])
    rows = [sim_row(name, run) for name, run in runs.items()]
    return Section(f"Azure 2023 {kind} trace on the simulated GPU ({len(trace)} requests)", SIM_HEADERS, rows,
                   sim_checks(runs, predicted) + sim_notes(trace, runs))


def check(claim: str, ok: bool) -> str:
    return f"{claim}: {verdict(ok)}"


def sim_checks(runs: dict[str, SimRun], predicted: float) -> list[str]:
    """The issue's acceptance lines, on the default-budget runs."""
    paged, static = runs["paged, continuous"], runs["paged, static"]
    waste_paged = paged.stats["mean_kv_waste_perc"]
    waste_contiguous = runs["contiguous, continuous"].stats["mean_kv_waste_perc"]
    occupancy = paged.stats["mean_batch_occupancy_perc"]
    static_decode = static.stats["mean_decode_occupancy_perc"]
    return [
        check(f"paged waste {pct(waste_paged)} < {TARGET_PAGED_WASTE:.0f}%", waste_paged < TARGET_PAGED_WASTE),
        check(f"contiguous waste {pct(waste_contiguous)} > {TARGET_CONTIGUOUS_WASTE:.0f}%",
              waste_contiguous > TARGET_CONTIGUOUS_WASTE),
        check(f"continuous occupancy {pct(occupancy)} >= {TARGET_CONTINUOUS_OCCUPANCY:.0f}% (while requests "
              f"wait: {pct(paged.occupancy_while_waiting)})", occupancy >= TARGET_CONTINUOUS_OCCUPANCY),
        check(f"static decode occupancy {pct(static_decode)} vs {pct(predicted)} predicted from the lengths "
              f"alone, within {TARGET_STATIC_AGREEMENT:.0f} points",
              abs(static_decode - predicted) <= TARGET_STATIC_AGREEMENT),
    ]


SIM_HEADERS = ["system", "KV waste", "reserved-unused", "internal frag.", "external frag.", "occupancy (all steps)",
               "occupancy (queue not empty)", "occupancy (decode-only steps)", "token budget use", "steps",
               "sim. output tok/s (model time)"]


def sim_row(name: str, run: SimRun) -> list[str]:
    s = run.stats
    return [name, pct(s["mean_kv_waste_perc"]), pct(s["mean_kv_reserved_unused_perc"]),
            pct(s["mean_kv_internal_frag_perc"]), pct(s["mean_kv_external_frag_perc"]),
            pct(s["mean_batch_occupancy_perc"]), pct(run.occupancy_while_waiting),
            pct(s["mean_decode_occupancy_perc"]), pct(s["mean_token_budget_perc"]), str(s["num_steps"]),
            f"{s['num_output_tokens'] / (s['mean_model_s'] * s['num_steps']):.0f}"]


def sim_notes(trace: list, runs: dict[str, SimRun]) -> list[str]:
    p = sorted(r.prompt_len for r in trace)
    o = sorted(r.output_len for r in trace)
    wall = sum(run.wall_s for run in runs.values())
    return [f"prompt tokens median {p[len(p) // 2]} (max {p[-1]}), output tokens median {o[len(o) // 2]} "
            f"(max {o[-1]}); all requests arrive at t = 0",
            "simulated: Llama-3-8B (bf16) on an A100-80GB profile (datasheet rates x 0.7); KV pool = 90% of "
            "memory minus weights; contiguous reserves max_model_len = 4,096 slots per request, first fit",
            "means weight every engine step equally; 'queue not empty' = steps that began with requests "
            "waiting; 'decode-only steps' is what static_decode_occupancy predicts; token budget use = "
            "scheduled tokens / max_num_batched_tokens (1,024 unless the row says otherwise)",
            "sim. output tok/s (model time) = output tokens / simulated model seconds; it leaves out the "
            "scheduler's CPU time, which the virtual clock also charges but which depends on this machine's load",
            f"wall time for the {len(runs)} replays: {wall:.1f} s"]


# ============================================================================ part 2: real model

@dataclass(frozen=True)
class RealSetup:
    name: str
    num_requests: int
    max_num_seqs: int
    prompt_len: tuple      # LogNormalLengths(median, sigma, min, max)
    output_len: tuple

    @classmethod
    def for_run(cls, size: str) -> list["RealSetup"]:
        """The real-model traces: the synthetic default (sigma 1.0), and the same with the output-length
        tail of the Azure 2023 code trace, the heavier of the two real traces."""
        if size == "tiny":
            return [cls("tiny", 4, 2, (8, 0.5, 4, 16), (3, 0.5, 2, 5))]
        if size == "quick":
            return [cls("log-normal outputs, sigma 1.0", 16, 8, (48, 1.0, 4, 128), (16, 1.0, 2, 64))]
        sigma = azure_output_sigma("code")
        return [cls("log-normal outputs, sigma 1.0", 64, 16, (48, 1.0, 4, 512), (32, 1.0, 2, 256)),
                cls(f"Azure-code output tail, sigma {sigma:.2f}", 64, 16, (48, 1.0, 4, 512), (32, sigma, 2, 512))]


def azure_output_sigma(kind: str) -> float:
    """Log-normal sigma with the P99/P50 ratio of the real trace's generated tokens: P99/P50 = exp(2.326 sigma).
    From the derived statistics shipped in data/traces (the trace itself stays in ../shared)."""
    import json
    import math

    stats = json.loads((Path(__file__).resolve().parents[1] / "data" / "traces" / "azure_2023_stats.json").read_text())
    gen = stats["kinds"][kind]["generated_tokens"]
    return math.log(gen["p99"] / gen["p50"]) / 2.326


@dataclass(frozen=True)
class RealRun:
    seconds: float              # wall clock
    cpu_s: float                # this process's CPU time: what the work cost, whatever the neighbours did
    tokens_computed: int        # output tokens each system generated, including past a request's end
    steps: int                  # forward passes (engine steps; generate: prefill + decode per batch)
    outputs: list[list[int]]


def real_workload(llm, setup: RealSetup) -> tuple[list, list[list[int]]]:
    """(trace, prompts): lengths from the trace, tokens cut from the team's real-text prompt sets."""
    from labkit.replay import prompt_tokens, text_corpus
    from labkit.traces import synthetic_trace

    trace = synthetic_trace(setup.num_requests, seed=0, prompt_len=setup.prompt_len, output_len=setup.output_len)
    corpus = text_corpus(llm.engine)
    return trace, [prompt_tokens(llm.engine, r.prompt_len, i, corpus) for i, r in enumerate(trace)]


def run_engine(model: str | None, scheduler: str, setup: RealSetup, trace: list, prompts: list[list[int]],
               dtype: str = "float32") -> RealRun:
    from labkit import LLM, EngineConfig, SamplingParams

    longest = max(r.prompt_len + r.output_len for r in trace)
    config = EngineConfig(scheduler=scheduler, max_num_seqs=setup.max_num_seqs, max_model_len=1024, dtype=dtype,
                          num_blocks=setup.max_num_seqs * (-(-longest // 16) + 1), max_num_batched_tokens=2048)
    llm = LLM(model, config=config, progress=False)
    llm.generate(prompts[:2], SamplingParams(max_tokens=2, ignore_eos=True))       # warm-up
    llm.engine.reset_metrics()
    params = [SamplingParams(temperature=0.0, max_tokens=r.output_len, ignore_eos=True) for r in trace]
    t0, c0 = time.perf_counter(), time.process_time()
    outs = llm.generate(prompts, params)
    seconds, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    stats = llm.engine.stats()
    assert stats["num_preemptions"] == 0
    return RealRun(seconds, cpu_s, sum(r.output_len for r in trace), stats["num_steps"],
                   [o.token_ids for o in outs])


def run_hf_static(hf, setup: RealSetup, trace: list, prompts: list[list[int]]) -> RealRun:
    """``generate`` on arrival-order batches of ``max_num_seqs``, each until its longest request ends."""
    import torch

    pad = int(hf.generation_config.pad_token_id)
    seconds, cpu_s, computed, steps, outputs = 0.0, 0.0, 0, 0, []
    ids, mask = left_padded(prompts[:2], pad)
    with torch.inference_mode():
        hf.generate(ids, attention_mask=mask, max_new_tokens=2, do_sample=False)          # warm-up
    for i in range(0, len(prompts), setup.max_num_seqs):
        batch = trace[i:i + setup.max_num_seqs]
        ids, mask = left_padded(prompts[i:i + setup.max_num_seqs], pad)
        longest = max(r.output_len for r in batch)
        t0, c0 = time.perf_counter(), time.process_time()
        with torch.inference_mode():
            out = hf.generate(ids, attention_mask=mask, max_new_tokens=longest, do_sample=False)
        seconds, cpu_s = seconds + time.perf_counter() - t0, cpu_s + time.process_time() - c0
        computed += len(batch) * longest
        steps += longest
        outputs += [out[j, ids.shape[1]:ids.shape[1] + r.output_len].tolist() for j, r in enumerate(batch)]
    return RealRun(seconds, cpu_s, computed, steps, outputs)


def real_sections(size: str, model: str | None = None, dtypes: tuple[str, ...] = ("float32",)) -> list[Section]:
    import torch

    from labkit import LLM, EngineConfig

    probe = LLM(model, config=EngineConfig(num_blocks=8), progress=False)
    sections = []
    for dtype in dtypes:
        hf = hf_model(Path(probe.engine.model_dir), dtype=getattr(torch, dtype))
        sections += [real_section(setup, probe, hf, model, dtype) for setup in RealSetup.for_run(size)]
    return sections


def real_section(setup: RealSetup, probe, hf, model: str | None, dtype: str = "float32") -> Section:
    trace, prompts = real_workload(probe, setup)
    useful = sum(r.output_len for r in trace)
    runs = {"labkit, continuous batching": run_engine(model, "continuous", setup, trace, prompts, dtype),
            "labkit, static batching": run_engine(model, "static", setup, trace, prompts, dtype),
            "transformers generate, static padded batches": run_hf_static(hf, setup, trace, prompts)}
    cont = runs["labkit, continuous batching"]
    rows = [real_row(name, run, cont, useful) for name, run in runs.items()]
    notes = real_checks(runs) + real_notes(trace, setup)
    headers = ["system", "wall s", "CPU s", "useful tok/s (wall)", "useful tok/s (CPU)", "tokens computed", "steps",
               "CPU ms / step", "continuous speed-up (wall / CPU)", "same tokens"]
    return Section(f"Real model on this CPU ({dtype}): {len(trace)} requests, {setup.name}", headers, rows, notes)


def real_row(name: str, run: RealRun, cont: RealRun, useful: int) -> list[str]:
    return [name, f"{run.seconds:.1f}", f"{run.cpu_s:.1f}", f"{useful / run.seconds:.1f}", f"{useful / run.cpu_s:.1f}",
            str(run.tokens_computed), str(run.steps), f"{1000 * run.cpu_s / run.steps:.0f}",
            f"{run.seconds / cont.seconds:.2f}x / {run.cpu_s / cont.cpu_s:.2f}x", f"{same_tokens(run, cont):.0%}"]


def real_checks(runs: dict[str, RealRun]) -> list[str]:
    cont = runs["labkit, continuous batching"]
    static, hf = runs["labkit, static batching"], runs["transformers generate, static padded batches"]
    lines = []
    for label, other, target in (("static (same engine)", static, TARGET_VS_STATIC),
                                 ("transformers static batches", hf, TARGET_VS_HF)):
        wall, cpu = other.seconds / cont.seconds, other.cpu_s / cont.cpu_s
        lines.append(check(f"continuous vs {label}: {wall:.2f}x wall, {cpu:.2f}x CPU; target >= {target}x",
                           min(wall, cpu) >= target))
    return lines


def same_tokens(run: RealRun, reference: RealRun) -> float:
    """Share of output tokens equal to labkit continuous batching's (greedy parity check)."""
    pairs = [(a, b) for x, y in zip(run.outputs, reference.outputs) for a, b in zip(x, y)]
    return sum(a == b for a, b in pairs) / len(pairs)


def real_notes(trace: list, setup: RealSetup) -> list[str]:
    import torch

    p = sorted(r.prompt_len for r in trace)
    o = sorted(r.output_len for r in trace)
    return [f"synthetic_trace(seed=0, prompt_len={tuple(setup.prompt_len)}, output_len={tuple(setup.output_len)}) "
            "(median, sigma, min, max of a clipped log-normal); "
            f"prompt tokens median {p[len(p) // 2]} (max {p[-1]}), output tokens median "
            f"{o[len(o) // 2]} (max {o[-1]}), all at t = 0; prompts cut from data/prompts text",
            *(["output sigma = ln(P99 / P50) / 2.326 of the Azure LLM inference trace 2023 (code) generated tokens, "
               "from data/traces/azure_2023_stats.json (CC-BY 4.0; Patel et al., Splitwise, ISCA 2024): the "
               "real trace's tail shape at a CPU-sized median"] if setup.name.startswith("Azure") else []),
            f"at most {setup.max_num_seqs} sequences in flight for every system; static batches in arrival order",
            "useful tokens/s = the trace's output tokens / wall s; 'tokens computed' includes what static "
            "batching generates past a request's end (transformers) — labkit static leaves those slots idle",
            "steps = forward passes; static steps / continuous steps is the speed-up if a step cost the same at "
            "any batch size (on a CPU a fuller batch costs more per step, so the time ratio is lower)",
            "'continuous speed-up' = this system's wall s / labkit continuous's; 'same tokens' = share of output "
            "tokens equal to labkit continuous's (greedy; batch-shape rounding can flip a near-tie, far more often "
            "in bf16)",
            "CPU s = this process's CPU time (time.process_time) over the run: on a shared machine it tracks the "
            "work done, while wall s also counts time the scheduler gave to neighbours",
            f"one run each, in the order listed; torch intra-op threads: {torch.get_num_threads()}; "
            f"load average at start: {load_average()}"]


# ============================================================================ entry point

def main(quick: bool = False, parts: tuple[str, ...] = ("sim", "real"), threads: int | None = 1,
         model: str | None = None, tiny: bool = False, dtypes: tuple[str, ...] = ("float32",)) -> list[Section]:
    """Run the benchmark, print markdown tables, return them. ``quick`` shrinks both parts; ``tiny``
    is a smoke run whose numbers mean nothing."""
    size = "tiny" if tiny else "quick" if quick else "full"
    sections = []
    if "sim" in parts:
        sections += sim_sections(size)
    if "real" in parts:
        set_threads(threads)
        sections += real_sections(size, model, dtypes)
    for section in sections:
        print(markdown(section), flush=True)
    return sections


def sim_sections(size: str) -> list[Section]:
    try:
        return [sim_section(kind, AZURE_LIMITS[size]) for kind in ("conv", "code")]
    except FileNotFoundError as exc:
        print(f"SKIPPED the Azure-trace part: {exc}\n", flush=True)
        return []


def cli(argv: list[str] | None = None) -> None:
    """Command line; takes the same flags as the other ``bench`` modules (``bench/__main__.py``)."""
    ap = argparse.ArgumentParser(prog="python -m bench.baselines", description=__doc__.split("\n\n")[0])
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="fewer requests, shorter outputs")
    size.add_argument("--tiny", action="store_true", help="smoke mode: seconds, numbers meaningless")
    ap.add_argument("--only", default="sim,real", help="comma-separated parts: sim, real")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads for the real-model part")
    ap.add_argument("--model", default=None, help="local HF Llama directory (default: SmolLM2-135M-Instruct)")
    add_dtypes_option(ap, "float32", "real-model part, comma-separated: float32 (the parity dtype) and/or bfloat16 "
                      "(on AMX a bf16 matmul costs about the same for 2 to 16 rows)")
    args = ap.parse_args(argv)
    main(args.quick, tuple(args.only.split(",")), args.threads, args.model, args.tiny, tuple(args.dtypes))


if __name__ == "__main__":
    cli()  # python -m bench.baselines [--quick | --tiny] [--only sim,real] [--threads N] [--model DIR]
