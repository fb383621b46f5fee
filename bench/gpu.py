"""One-command GPU benchmark for labkit; prints markdown tables.

    python bench/gpu.py                      # CUDA, full sizes (about 5 minutes on one GPU)
    python bench/gpu.py --device cpu --smoke # tiny sizes, seconds to a minute (checks the script)
    python bench/gpu.py --only parity,decode # a subset of sections

Sections: environment; Triton paged-attention kernel vs the batched PyTorch path (cpu_batched) at several batch sizes and
context lengths; greedy parity vs ``transformers``; throughput on a heavy-tailed trace vs
``transformers`` static batches and continuous batching; decode step time vs batch size;
speculative decoding (n-gram, and the default draft model when it is shipped). The engine
sections live in ``bench/engine_sections.py`` and ``bench/spec.py``.

Timing: CUDA events (kernel section) or wall clock around synchronised calls, after warm-up,
median of the timed calls. On CPU, Triton runs under its interpreter (numpy underneath), so kernel
times there only show the script works; the engine sections use the cpu_batched backend on CPU.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

from bench.common import Section, markdown  # noqa: E402
from labkit.attention import cpu_batched  # noqa: E402
from labkit.attention.metadata import AttentionMetadata  # noqa: E402


@dataclass(frozen=True)
class AttentionCase:
    kind: str          # "decode", "prefill" or "mixed"
    query_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]

    @property
    def batch(self) -> int:
        return len(self.seq_lens)


# ----------------------------------------------------------------------------- timing

def time_ms(fn: Callable[[], object], device: str, warmup: int, iters: int) -> float:
    """Median milliseconds of ``fn()`` over ``iters`` calls, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    if device != "cuda":
        return _median_wall_ms(fn, iters)
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _median_wall_ms(fn: Callable[[], object], iters: int) -> float:
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


# ----------------------------------------------------------------------------- environment

def load_triton_backend(device: str):
    """The Triton backend module, or None when triton is missing.

    On CPU the kernels can only run under Triton's interpreter, chosen when triton is first imported,
    so the variable is set before that import.
    """
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from labkit.attention import triton_paged
    return triton_paged if triton_paged.TRITON_AVAILABLE else None


def engine_backend(args: argparse.Namespace, backend) -> str:
    """The engine sections use the Triton kernel on CUDA (when installed), cpu_batched on CPU."""
    return "triton" if args.device == "cuda" and backend is not None else "cpu_batched"


def environment_section(args: argparse.Namespace, backend) -> Section:
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
    triton_version = "not installed"
    if backend is not None:
        import triton
        triton_version = triton.__version__
    shape = f"{args.num_heads} / {args.num_kv_heads} / {args.head_dim}"
    rows = [["device", gpu], ["torch", torch.__version__], ["triton", triton_version],
            ["TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "unset")],
            ["dtype", args.dtype], ["kernel section: heads / kv heads / head dim", shape],
            ["block size", str(args.block_size)], ["engine attention backend", engine_backend(args, backend)],
            ["model", args.model or "SmolLM2-135M-Instruct (default)"],
            ["CPU intra-op threads", str(torch.get_num_threads())],
            ["timing", f"median of {args.iters} after {args.warmup} warm-up"]]
    return Section("Environment", ["item", "value"], rows)


# ----------------------------------------------------------------------------- attention kernel

def attention_cases(smoke: bool) -> list[AttentionCase]:
    """Decode (one query token per sequence over a long context), prefill (whole prompts, no
    cache) and one mixed continuous-batching step (a prefill chunk plus decodes)."""
    decode_batches, contexts = ([1, 4], [32, 100]) if smoke else ([1, 8, 32, 128], [512, 2048, 8192])
    prefill_batches, prompts = ([1, 2], [16, 40]) if smoke else ([1, 4, 16], [512, 2048])
    cases = [AttentionCase("decode", (1,) * b, (c,) * b) for b in decode_batches for c in contexts]
    cases += [AttentionCase("prefill", (p,) * b, (p,) * b) for b in prefill_batches for p in prompts]
    chunk, ctx, decodes = (16, 50, 3) if smoke else (512, 2048, 32)
    cases.append(AttentionCase("mixed", (chunk,) + (1,) * decodes, (chunk,) + (ctx,) * decodes))
    return cases


def build_inputs(case: AttentionCase, args: argparse.Namespace, gen: torch.Generator):
    """Random query and caches; each sequence's blocks are drawn at random from one shared pool."""
    bs = args.block_size
    needed = [math.ceil(s / bs) for s in case.seq_lens]
    physical = torch.randperm(sum(needed), generator=gen).tolist()
    tables, slots, first = [], [], 0
    for n, s, q in zip(needed, case.seq_lens, case.query_lens):
        tables.append(physical[first:first + n])
        first += n
        slots += [tables[-1][p // bs] * bs + p % bs for p in range(s - q, s)]
    meta = AttentionMetadata.build(list(case.query_lens), list(case.seq_lens), tables, slots, bs, args.device)
    dtype = getattr(torch, args.dtype)
    cache_shape = (sum(needed), bs, args.num_kv_heads, args.head_dim)
    key_cache = torch.randn(cache_shape, generator=gen).to(args.device, dtype)
    value_cache = torch.randn(cache_shape, generator=gen).to(args.device, dtype)
    query_shape = (sum(case.query_lens), args.num_heads, args.head_dim)
    query = torch.randn(query_shape, generator=gen).to(args.device, dtype)
    return query, key_cache, value_cache, meta


def attention_row(case: AttentionCase, args: argparse.Namespace, backend, gen: torch.Generator) -> list[str]:
    query, key_cache, value_cache, meta = build_inputs(case, args, gen)
    scale = 1.0 / math.sqrt(args.head_dim)
    call_ref = lambda: cpu_batched.paged_attention(query, key_cache, value_cache, meta, scale)  # noqa: E731
    ref_ms = time_ms(call_ref, args.device, args.warmup, args.iters)
    cells = [case.kind, str(case.batch), _context_label(case), str(sum(case.query_lens)), f"{ref_ms:.3f}"]
    if backend is None:
        return cells + ["-", "-", "-"]
    call_kernel = lambda: backend.paged_attention(query, key_cache, value_cache, meta, scale)  # noqa: E731
    max_diff = (call_kernel().float() - call_ref().float()).abs().max().item()
    kernel_ms = time_ms(call_kernel, args.device, args.warmup, args.iters)
    speedup = "-" if _interpreted() else f"{ref_ms / kernel_ms:.2f}x"
    return cells + [f"{kernel_ms:.3f}", speedup, f"{max_diff:.1e}"]


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _context_label(case: AttentionCase) -> str:
    lens = sorted(set(case.seq_lens))
    return str(lens[0]) if len(lens) == 1 else "/".join(map(str, lens))


def attention_section(args: argparse.Namespace, backend) -> Section:
    """Kernel vs reference time (and max difference) per case."""
    gen = torch.Generator().manual_seed(0)
    rows = [attention_row(case, args, backend, gen) for case in attention_cases(args.smoke)]
    notes = ["reference = labkit.attention.cpu_batched (gather by block table + one masked SDPA, batched); "
             "triton = labkit.attention.triton_paged; speed-up = reference ms / triton ms",
             "max abs diff = largest |triton - reference| over the output, same inputs"]
    if backend is None:
        notes.append("triton is not installed: kernel columns skipped")
    elif _interpreted():
        notes.append("TRITON_INTERPRET=1: the kernel ran in Triton's numpy interpreter; its times are "
                     "not kernel performance, so no speed-up is shown")
    headers = ["case", "batch", "context", "query tokens", "reference ms", "triton ms", "speed-up",
               "max abs diff"]
    return Section("Paged attention: Triton kernel vs reference", headers, rows, notes)


# ----------------------------------------------------------------------------- engine sections

def _bench(args: argparse.Namespace, backend):
    from bench.engine_sections import EngineBench

    if getattr(args, "_engine_bench", None) is None:   # one HF model load shared by the sections
        args._engine_bench = EngineBench(args.device, args.dtype, engine_backend(args, backend),
                                         args.model, args.smoke)
    return args._engine_bench


def parity(args: argparse.Namespace, backend) -> Section:
    from bench.engine_sections import parity_section
    return parity_section(_bench(args, backend))


def throughput(args: argparse.Namespace, backend) -> Section:
    from bench.engine_sections import throughput_section
    return throughput_section(_bench(args, backend))


def decode(args: argparse.Namespace, backend) -> Section:
    from bench.engine_sections import decode_steps_section
    return decode_steps_section(_bench(args, backend))


def speculative(args: argparse.Namespace, backend) -> list[Section]:
    """Single-stream greedy speed-up for n-gram lookup and the default draft (skipped if absent)."""
    from bench.spec import spec_sections

    ks, workloads, prompts, tokens = ([2], ["chat"], 1, 6) if args.smoke else ([2, 4, 6], ["chat", "code"], 2, 128)
    config = {"device": args.device, "dtype": args.dtype, "attention_backend": engine_backend(args, backend),
              "num_blocks": 64}
    return spec_sections(args.model, ["ngram", "draft"], ks, workloads, prompts, tokens, config)


# ----------------------------------------------------------------------------- main

SECTIONS: dict[str, Callable[[argparse.Namespace, object], Section | list[Section]]] = {
    "environment": environment_section, "attention": attention_section, "parity": parity,
    "throughput": throughput, "decode": decode, "spec": speculative}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, few iterations (checks the script runs)")
    p.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections: " + ", ".join(SECTIONS))
    p.add_argument("--model", default=None, help="local HF Llama directory (default: SmolLM2-135M-Instruct)")
    p.add_argument("--dtype", choices=["float16", "bfloat16", "float32"], default=None,
                   help="default: bfloat16 on cuda, float32 on cpu")
    p.add_argument("--num-heads", type=int, default=9, help="default: SmolLM2-135M's 9 query heads")
    p.add_argument("--num-kv-heads", type=int, default=3)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--iters", type=int, default=None)
    p.add_argument("--threads", type=int, default=None,
                   help="CPU intra-op threads (default: 1 with --device cpu, see bench/common.py)")
    args = p.parse_args(argv)
    args.dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    args.warmup = args.warmup if args.warmup is not None else (1 if args.smoke else 5)
    args.iters = args.iters if args.iters is not None else (2 if args.smoke else 20)
    args.only = [s for s in args.only.split(",") if s]
    unknown = sorted(set(args.only) - set(SECTIONS))
    if unknown:
        p.error(f"unknown sections {unknown}; choose from {list(SECTIONS)}")
    return args


def main(argv: list[str] | None = None) -> list[Section]:
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device visible; use --device cpu --smoke to check the script")
    if args.threads or args.device == "cpu":
        torch.set_num_threads(args.threads or 1)
    backend = load_triton_backend(args.device)
    printed = []
    for name in args.only:
        t0 = time.perf_counter()
        made = SECTIONS[name](args, backend)
        for section in made if isinstance(made, list) else [made]:
            section.notes.append(f"section time: {time.perf_counter() - t0:.1f} s")
            print(markdown(section), flush=True)
            printed.append(section)
    return printed


if __name__ == "__main__":
    main()
