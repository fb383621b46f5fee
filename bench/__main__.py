"""``python -m bench`` (``make bench``): every CPU benchmark in sequence, markdown on stdout.

    python -m bench                      # about 15 minutes on the 2-core lab machine
    python -m bench --quick              # about 5 minutes (``make bench-quick``)
    python -m bench --only spec          # one of: cpu_engine, baselines, spec

1. ``bench.cpu_engine``: labkit vs ``transformers`` ``generate`` at batch 1 and 16, and batch-1
   decode against the memory-bandwidth roofline.
2. ``bench.baselines``: the "before" systems against the "after" ones — contiguous vs paged KV,
   static vs continuous batching.
3. ``bench.spec``: speculative decoding speed-up vs k next to the Leviathan prediction.
4. ``bench.scheduler_overhead``: the engine's host time per step (deciding, sampling, bookkeeping,
   stats, events) vs running requests on the simulated accelerator, and the concurrency where it
   saturates, with the engine's host-path optimisation off and on; the host path per
   request with the persistent batch and async scheduling, and async vs sync on the real model.
5. ``bench.llama_cpp_peer``: labkit fp32 / bf16 / ``weights="q4_1"`` next to llama.cpp F32 / BF16 / Q4_1,
   one thread, batch 1 and 16; skipped with a message when ``llama_cpp`` is not installed.
6. ``bench.load_memory``: load time and resident memory, labkit vs ``transformers``, each in a fresh
   process.
7. ``bench.prefill_attention``: batch-invariant prefill attention (each row against its own prefix)
   against one causal SDPA call, per layer and as a share of the prefill forward.
8. ``bench.bf16_forms``: a 512-token bf16 prefill and a batch-1 decode step with each bf16 product form
   the row-invariance gate offers on this CPU, and the form the choice rule keeps.
9. ``bench.shared_weights``: a decode step with the weights mapped from a class's shared cache (the
   hub's one copy of the model) against one with the process's own copy, batch 1 and 16.

The GPU benchmark is separate: ``python bench/gpu.py`` (``make bench-gpu``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time

from bench.common import command_line, load_average

BENCHMARKS = {
    "cpu_engine": "labkit vs transformers generate, and the bandwidth roofline",
    "baselines": "before vs after: KV layout and batching policy",
    "spec": "speculative decoding vs the Leviathan prediction",
    "scheduler_overhead": "host time per step vs running requests, optimisation off/on",
    "llama_cpp_peer": "labkit fp32 / bf16 / q4_1 next to llama.cpp F32 / BF16 / Q4_1 (optional: needs llama-cpp-python)",
    "load_memory": "load time and peak memory, labkit vs transformers",
    "prefill_attention": "what batch invariance costs in prefill attention, against one causal SDPA call",
    "bf16_forms": "bf16 prefill and decode with each row-invariant bf16 product form this CPU offers",
    "shared_weights": "a decode step with a class's shared weights vs the process's own copy",
}
SKIPPED = {"baselines": "no --tiny or --model mode, and it runs the default model only",
           "llama_cpp_peer": "it runs the default model's GGUF files only (no --model)",
           "shared_weights": "a class's shared cache holds the default model only (no --tiny or --model mode)"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="fewer rounds, prompts and tokens")
    size.add_argument("--tiny", action="store_true", help="smoke mode: seconds, numbers meaningless")
    p.add_argument("--only", default=",".join(BENCHMARKS), help="comma-separated: " + ", ".join(BENCHMARKS))
    p.add_argument("--model", default=None, help="local HF Llama directory (default: SmolLM2-135M-Instruct)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1, see bench/common.py)")
    args = p.parse_args(argv)
    args.only = [b for b in args.only.split(",") if b]
    unknown = sorted(set(args.only) - set(BENCHMARKS))
    if unknown:
        p.error(f"unknown benchmarks {unknown}; choose from {list(BENCHMARKS)}")
    return args


def flags_for(name: str, args: argparse.Namespace) -> list[str] | None:
    """The command-line flags one benchmark takes; None when it has no mode for these arguments."""
    size = ["--quick"] if args.quick else ["--tiny"] if args.tiny else []
    if name == "baselines":      # no --tiny or --model: the smallest run is --quick
        return None if args.tiny or args.model else size + ["--threads", str(args.threads)]
    if name == "llama_cpp_peer":
        return None if args.model else size
    if name == "shared_weights":
        return None if args.tiny or args.model else size + ["--threads", str(args.threads)]
    return size + ["--threads", str(args.threads)] + (["--model", args.model] if args.model else [])


def run_one(name: str, args: argparse.Namespace) -> None:
    flags = flags_for(name, args)
    print(f"\n---\n\n_{BENCHMARKS[name]}_\n", flush=True)
    if flags is None:
        print(f"# {name}\n\n_skipped: {SKIPPED[name]}_\n", flush=True)
        return
    if name == "baselines":     # the others print their own title and command
        print(f"# Baselines\n\ncommand: `{command_line('bench.' + name, flags)}`\n", flush=True)
    module = importlib.import_module(f"bench.{name}")
    started = time.perf_counter()
    (module.cli if name == "baselines" else module.main)(flags)
    print(f"_bench.{name} took {time.perf_counter() - started:.0f} s_\n", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(f"# labkit CPU benchmarks\n\ncommand: `{command_line('bench', argv)}` — load average at start: "
          f"{load_average()}\n", flush=True)
    t0 = time.perf_counter()
    for name in args.only:
        run_one(name, args)
    print(f"_all benchmarks took {time.perf_counter() - t0:.0f} s (wall); load average at end: "
          f"{load_average()}_", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
