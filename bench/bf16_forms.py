"""The bf16 trade between forms on this CPU: a 512-token prefill and a batch-1 decode step with each bf16
product form the row-invariance gate offers here, forced in turn, in one process.

    python -m bench.bf16_forms              # 3 interleaved rounds
    python -m bench.bf16_forms --quick      # two rounds (part of `make bench`)
    python -m bench.bf16_forms --tiny       # smoke mode (seconds; numbers meaningless)

Why: the engine takes one form for every row count (a row's bits must not depend on how many rows share
its product), so the choice rule weighs decode and prefill together. Where the forms trade (on an AMX
Xeon PyTorch's oneDNN product prefilled 512 tokens in 0.50 s against 1.55 s for labkit's kernel, while
labkit's kernel decoded in 20.7 ms against 35.8 ms), this table shows the trade and which form the rule
keeps. Timed on the process CPU clock, one thread; medians of interleaved rounds, min-max beside them.
"""

from __future__ import annotations

import argparse
import os

from bench.common import (
    Section,
    environment_rows,
    interleaved,
    load_average,
    median,
    now,
    report,
    set_clock,
    set_threads,
)

ARMS = {"C kernel": "1", "PyTorch": "0"}


def run(args) -> list[Section]:
    from labkit import LLM, EngineConfig, SamplingParams
    from labkit.kernels import linear_forms as lf

    threads = set_threads(args.threads)
    set_clock("auto", threads)
    env = Section("Environment", ["item", "value"], environment_rows(threads))
    llm = LLM(model=args.model, config=EngineConfig(dtype="bfloat16", device="cpu", max_num_batched_tokens=2048,
                                                    enable_prefix_caching=False), progress=False)
    env.rows.append(["bf16 form the engine chose", lf.bf16_report(threads)])
    offered = lf.bf16_offered(threads)
    prompt_len, steps = (32, 4) if args.tiny else (512, 32)
    vocab = llm.engine.vocab_size
    long_prompt = [(7 * i + 11) % (vocab - 100) + 100 for i in range(prompt_len)]
    one = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    many = SamplingParams(temperature=0.0, max_tokens=steps + 1, ignore_eos=True)

    def arm(name: str):
        def timed_arm() -> tuple[float, float]:
            os.environ[lf.BF16_ENV] = ARMS[name]
            try:
                t0 = now()
                llm.generate([long_prompt], one)
                prefill = now() - t0
                t0 = now()
                llm.generate([long_prompt[:16]], many)
                decode = (now() - t0) / (steps + 1)
            finally:
                os.environ.pop(lf.BF16_ENV, None)
            return prefill, decode
        return timed_arm

    runs = {name: arm(name) for name in ARMS if name in offered}
    for fn in runs.values():
        fn()                                   # warm-up
    rounds = interleaved(runs, args.rounds)
    rows = []
    for name in runs:
        pre = [r[name][0] for r in rounds]
        dec = [r[name][1] for r in rounds]
        rows.append([name, f"{median(pre) * 1e3:.0f} ({min(pre) * 1e3:.0f}-{max(pre) * 1e3:.0f})",
                     f"{median(dec) * 1e3:.1f} ({min(dec) * 1e3:.1f}-{max(dec) * 1e3:.1f})"])
    refused = [f"{name}: not offered here ({lf.bf16_torch_refused(threads) if name == 'PyTorch' else 'no bf16 kernel'})"
               for name in ARMS if name not in offered]
    table = Section(f"bf16 forms: {prompt_len}-token prefill and batch-1 decode", [
        "form", f"prefill {prompt_len} tokens, ms (min-max)", "decode, ms per token incl. a 16-token prefill (min-max)"],
        rows, [f"{args.rounds} interleaved rounds, {threads} thread(s), {'process CPU' if threads == 1 else 'wall'} clock; load average now: {load_average()}",
               *refused])
    return [env, table]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--model", default=None, help="model directory (default: the lab model)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="two rounds")
    size.add_argument("--tiny", action="store_true", help="smoke mode: seconds, numbers meaningless")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    args = p.parse_args(argv)
    if args.tiny or args.quick:
        args.rounds = 1 if args.tiny else 2
    return args


def main(argv: list[str] | None = None) -> list[Section]:
    return report("bf16 product forms on this CPU", "bench.bf16_forms", argv, run(parse_args(argv)))


if __name__ == "__main__":
    main()
