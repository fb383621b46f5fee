"""labkit vs ``transformers`` ``generate`` on this CPU: batch 1, batch 16 and the bandwidth roofline.

    python -m bench.cpu_engine                    # about 7 minutes on the 2-core lab machine
    python -m bench.cpu_engine --quick            # about 3 minutes
    python -m bench.cpu_engine --dtypes float32   # one dtype only

Each dtype runs both engines in it: float32 (the dtype in which labkit must equal ``transformers``
token for token) and bfloat16 (half the weight bytes; on CPUs with AMX a bf16 matmul costs about
the same for 2 to 16 rows, see ``bench.linear_rows``).

Same process, same weights in the same dtype, same prompts, greedy, a fixed number of new tokens
(``ignore_eos`` on our side, no EOS on theirs). Every round runs labkit, ``generate`` and a
bandwidth probe, alternating the order, and the tables give medians over rounds; ratios are taken
inside a round.

Roofline. A batch-1 decode step must read every weight once (all layers and the LM head; the
embedding lookup reads one row), so with read bandwidth B (bytes/s) and W weight bytes it cannot
beat B / W tokens per second (Williams et al., "Roofline", CACM 2009). B is measured in the same
round, on the same clock, as the fastest of a few read kernels (``sum``, ``mv``, vector x matrix) over
a tensor as large as the weights (``bench.common.measure_read_bandwidth``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch

from bench.common import (
    Section,
    TokenClock,
    add_dtypes_option,
    clock_name,
    environment_rows,
    hf_model,
    interleaved,
    left_padded,
    mean_gap,
    measure_read_bandwidth,
    median,
    report,
    set_clock,
    set_threads,
    timed,
    token_times,
)

TARGET_BATCH1 = 1.3     # batch-1 decode >= 1.3x HF generate
TARGET_BATCHED = 1.2    # batch 16 >= 1.2x HF generate
TARGET_ROOFLINE = 0.70  # ~70 % of the bandwidth roofline at batch 1


@dataclass(frozen=True)
class Systems:
    """The two engines under test, sharing nothing but the weights on disk."""

    llm: object           # labkit.LLM
    hf: object            # transformers LlamaForCausalLM
    pad_id: int
    weight_bytes: int     # bytes one batch-1 decode step must read
    dtype: str            # both engines' dtype


@dataclass(frozen=True)
class RunResult:
    seconds: float
    num_tokens: int
    decode_s_per_token: float   # batch 1 only (nan otherwise): mean gap between new tokens
    token_ids: list[list[int]]


# ----------------------------------------------------------------------------- set-up

def load_systems(model: str | None, dtype: str = "float32") -> Systems:
    """Both engines in ``dtype`` (float32: the parity dtype; bfloat16: half the weight bytes)."""
    from labkit import LLM, EngineConfig
    from labkit.model.llama import decode_weight_bytes

    llm = LLM(model=model, config=EngineConfig(device="cpu", dtype=dtype), progress=False)
    hf = hf_model(llm.engine.model_dir, dtype=getattr(torch, dtype))
    weight_bytes = decode_weight_bytes(llm.engine.runner.model)
    return Systems(llm, hf, int(hf.generation_config.pad_token_id), weight_bytes, dtype)


def prompt_sets(tokenizer, batch: int) -> tuple[list[list[int]], list[list[int]]]:
    """(batch-1 prompts, one batch of ``batch`` prompts) as chat-templated token ids.

    Batch 1 alternates held-out chat and code prompts; the batch mixes chat, code and copy-heavy
    prompts (longer, 100-400 tokens) so prompt lengths differ as they do in real traffic.
    """
    from labkit.traces import load_prompts

    chat, code = load_prompts("chat", "heldout"), load_prompts("code", "heldout")
    singles = [p for pair in zip(chat, code) for p in pair]
    mixed = [p for trio in zip(load_prompts("chat", "train"), load_prompts("code", "train"),
                               load_prompts("copy", "train")) for p in trio][:batch]
    encode = tokenizer.encode_prompt
    return [encode(p) for p in singles], [encode(p) for p in mixed]


# ----------------------------------------------------------------------------- one run each

def run_labkit(llm, prompts: list[list[int]], max_tokens: int) -> RunResult:
    from labkit import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    times, subscriber = token_times(llm.engine) if len(prompts) == 1 else ([], None)
    try:
        seconds, outs = timed(lambda: llm.generate(prompts, params))
    finally:
        llm.engine.hooks.unsubscribe(subscriber)
    return RunResult(seconds, sum(len(o.token_ids) for o in outs), mean_gap(times), [o.token_ids for o in outs])


def run_hf(hf, prompts: list[list[int]], max_tokens: int, pad_id: int) -> RunResult:
    """``generate`` on a left-padded batch with an explicit attention mask."""
    ids, mask = left_padded(prompts, pad_id)
    clock = TokenClock() if len(prompts) == 1 else None
    with torch.inference_mode():
        seconds, seq = timed(lambda: hf.generate(ids, attention_mask=mask, max_new_tokens=max_tokens,
                                                 do_sample=False, streamer=clock))
    new = seq[:, ids.shape[1]:].tolist()
    return RunResult(seconds, sum(len(t) for t in new), mean_gap(clock.times) if clock else float("nan"), new)


def warm_up(systems: Systems, prompt: list[int]) -> None:
    run_labkit(systems.llm, [prompt], 4)
    run_hf(systems.hf, [prompt], 4, systems.pad_id)


# ----------------------------------------------------------------------------- batch 1

def batch1_rounds(systems: Systems, prompts: list[list[int]], rounds: int, max_tokens: int) -> list[dict]:
    """Round r serves prompt r (cycling): labkit, HF and a bandwidth probe, order alternating."""
    results = []
    for r in range(rounds):
        prompt = prompts[r % len(prompts)]
        runs = {"labkit": lambda: run_labkit(systems.llm, [prompt], max_tokens),
                "hf": lambda: run_hf(systems.hf, [prompt], max_tokens, systems.pad_id),
                "bandwidth": lambda: measure_read_bandwidth(systems.weight_bytes, repeats=3)}
        results += interleaved(runs, 1, start=r)
    return results


def batch1_section(systems: Systems, results: list[dict], max_tokens: int) -> Section:
    def rate(name):
        return [r[name].num_tokens / r[name].seconds for r in results]

    def decode(name):
        return [1.0 / r[name].decode_s_per_token for r in results]

    roofline = [r["bandwidth"] / systems.weight_bytes for r in results]   # tokens/s
    dtype = systems.dtype
    rows = []
    for name, label in (("labkit", "labkit"), ("hf", "transformers generate")):
        pct = [d / b for d, b in zip(decode(name), roofline)]
        rows.append([label, f"{median(rate(name)):.2f}", f"{median(decode(name)):.2f}",
                     f"{100 * median(pct):.0f} %"])
    gen_ratio = median([a / b for a, b in zip(rate("labkit"), rate("hf"))])
    dec_ratio = median([a / b for a, b in zip(decode("labkit"), decode("hf"))])
    rows.append(["**ratio labkit / transformers**", f"**{gen_ratio:.2f}x**", f"**{dec_ratio:.2f}x**", ""])
    equal = sum(r["labkit"].token_ids == r["hf"].token_ids for r in results)
    bw = median([r["bandwidth"] for r in results])
    notes = [f"{len(results)} rounds, one prompt each (held-out chat and code, cycling), {max_tokens} new tokens, "
             "greedy; values are medians over rounds, ratios are medians of per-round ratios",
             f"times on the {clock_name()} clock (see Environment); generate tokens/s = new tokens / time of "
             "the whole call (prefill included); decode tokens/s = 1 / mean gap between consecutive new "
             "tokens (prefill excluded)",
             f"roofline: {systems.weight_bytes / 1e6:.0f} MB of {dtype} weights per decode token (all layers + LM "
             f"head) / {bw / 1e9:.1f} GB/s measured read bandwidth (median, same rounds) = "
             f"{bw / systems.weight_bytes:.1f} tokens/s",
             f"greedy tokens identical to transformers in {equal}/{len(results)} rounds",
             f"targets: decode >= {TARGET_BATCH1}x transformers, about "
             f"{100 * TARGET_ROOFLINE:.0f} % of the roofline"]
    headers = ["batch 1", "generate tokens/s", "decode tokens/s", "decode % of roofline"]
    return Section(f"Batch 1 ({dtype}): labkit vs transformers generate", headers, rows, notes)


# ----------------------------------------------------------------------------- batch N

def batched_rounds(systems: Systems, prompts: list[list[int]], rounds: int, max_tokens: int) -> list[dict]:
    runs = {"labkit": lambda: run_labkit(systems.llm, prompts, max_tokens),
            "hf": lambda: run_hf(systems.hf, prompts, max_tokens, systems.pad_id)}
    return interleaved(runs, rounds)


def batched_section(results: list[dict], prompts: list[list[int]], max_tokens: int, dtype: str) -> Section:
    def rate(name):
        return [r[name].num_tokens / r[name].seconds for r in results]

    ratio = median([a / b for a, b in zip(rate("labkit"), rate("hf"))])
    rows = [["labkit", f"{median(rate('labkit')):.1f}"],
            ["transformers generate (padded)", f"{median(rate('hf')):.1f}"],
            ["**ratio labkit / transformers**", f"**{ratio:.2f}x**"]]
    last = results[-1]
    equal = sum(a == b for a, b in zip(last["labkit"].token_ids, last["hf"].token_ids))
    lens = sorted(len(p) for p in prompts)
    notes = [f"{len(prompts)} prompts at once (chat, code and copy-heavy; {lens[0]}-{lens[-1]} prompt tokens), "
             f"{max_tokens} new tokens each, greedy; {len(results)} interleaved rounds, medians",
             f"tokens/s = all new tokens / time of the call on the {clock_name()} clock (prefill included)",
             "transformers: one left-padded batch with an explicit attention_mask; labkit: continuous "
             "batching over a paged KV cache (all requests fit in one step's token budget)",
             f"greedy tokens identical to transformers for {equal}/{len(prompts)} requests ({dtype}; padded "
             "batched matmuls may round differently, so a late divergence is possible)",
             f"target: >= {TARGET_BATCHED}x transformers"]
    return Section(f"Batch {len(prompts)} ({dtype}): labkit vs transformers generate", ["batch", "tokens/s"],
                   rows, notes)


# ----------------------------------------------------------------------------- main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds and tokens (about a minute)")
    p.add_argument("--tiny", action="store_true", help="smoke mode: a few tokens, one round (seconds)")
    p.add_argument("--model", default=None, help="local HF Llama directory (default: SmolLM2-135M-Instruct)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1, see bench/common.py)")
    p.add_argument("--clock", choices=["auto", "cpu", "wall"], default="auto",
                   help="auto: process CPU time with one thread, else wall time (see bench/common.py)")
    p.add_argument("--batch", type=int, default=16)
    add_dtypes_option(p, "float32,bfloat16", "comma-separated; each runs both engines in that dtype (float32 is "
                      "the parity dtype)")
    p.add_argument("--rounds", type=int, default=None, help="batch-1 rounds (default 8, quick 4)")
    p.add_argument("--batched-rounds", type=int, default=None, help="batch-N rounds (default 3, quick 2)")
    p.add_argument("--max-tokens", type=int, default=None, help="new tokens per request (default 64, quick 32)")
    args = p.parse_args(argv)
    size = "tiny" if args.tiny else "quick" if args.quick else "full"
    defaults = {"full": (8, 3, 64), "quick": (4, 2, 32), "tiny": (2, 1, 4)}[size]
    args.rounds = args.rounds or defaults[0]
    args.batched_rounds = args.batched_rounds or defaults[1]
    args.max_tokens = args.max_tokens or defaults[2]
    if args.tiny:
        args.batch = min(args.batch, 4)
    return args


def run(args: argparse.Namespace) -> list[Section]:
    threads = set_threads(args.threads)
    set_clock(args.clock, threads)
    env = Section("Environment", ["item", "value"], environment_rows(threads))
    sections = [env]
    for dtype in args.dtypes:
        systems = load_systems(args.model, dtype)
        singles, batch = prompt_sets(systems.llm.tokenizer, args.batch)
        warm_up(systems, singles[0])
        b1 = batch1_rounds(systems, singles, args.rounds, args.max_tokens)
        bn = batched_rounds(systems, batch, args.batched_rounds, args.max_tokens)
        sections += [batch1_section(systems, b1, args.max_tokens),
                     batched_section(bn, batch, args.max_tokens, dtype)]
        del systems
    return sections


def main(argv: list[str] | None = None) -> list[Section]:
    return report("labkit vs transformers on CPU", "bench.cpu_engine", argv, run(parse_args(argv)))


if __name__ == "__main__":
    main()
