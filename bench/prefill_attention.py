"""What batch invariance costs in prefill attention: one layer's attention for a prompt of L
tokens, labkit's row-by-row form against one causal SDPA call, on this CPU, one thread.

    python -m bench.prefill_attention                # L = 32, 128, 512, 1024; a few seconds each
    python -m bench.prefill_attention --quick        # part of `make bench` (python -m bench)

Every query row attends to exactly its own prefix, as a decode step would: labkit's C
kernel row by row where it builds (``native.decode_attention``), else one SDPA call per row. That
gives a row the same bits whatever else is in the step (a padded or chunked batch no longer changes a
token), but it gives up the single causal SDPA call over the whole prompt that a batch-variant engine
makes. This measures the price, per layer and as a share of the whole prefill forward:

- "labkit (batch-invariant)": ``cpu_batched.paged_attention`` as the engine calls it;
- "row by row, SDPA": the same with the kernel switched off (what a machine without a C compiler runs);
- "one causal SDPA call": the batch-variant form, the baseline, in the same process;

and "prefill forward" is the model's whole forward over the L prompt tokens (30 layers of attention,
products, norms), so ``30 x (labkit - baseline) / forward`` is the share of the prefill the invariance
costs. Timed on the process CPU clock, median of ``--rounds`` interleaved rounds.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

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


def _case(L: int, heads: int, kv_heads: int, head_dim: int, block_size: int):
    """A pool holding one prompt's K/V, the prefill's metadata and its queries."""
    from labkit.attention.metadata import AttentionMetadata

    g = torch.Generator().manual_seed(L)
    blocks = -(-L // block_size)
    pool = [torch.randn(blocks, block_size, kv_heads, head_dim, generator=g) for _ in range(2)]
    meta = AttentionMetadata.build([L], [L], [list(range(blocks))], list(range(L)), block_size)
    q = torch.randn(L, heads, head_dim, generator=g)
    return q, pool, meta


def _timed_calls(fn, calls: int) -> float:
    t0 = now()
    for _ in range(calls):
        fn()
    return (now() - t0) / calls


def run(args) -> list[Section]:
    from labkit import LLM, EngineConfig, SamplingParams
    from labkit.attention import cpu_batched
    from labkit.kernels import native

    threads = set_threads(args.threads)
    set_clock("cpu", threads)
    env = Section("Environment", ["item", "value"], environment_rows(threads))
    env.rows.append(["labkit's C attention kernel", "built" if native.available() else
                     f"not available ({native.why_unavailable()})"])
    llm = LLM(model=args.model, config=EngineConfig(device="cpu", max_num_batched_tokens=4096, max_num_seqs=1),
              progress=False)
    cfg = llm.engine.runner.model.config
    heads, kv_heads, d, layers = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.num_hidden_layers
    scale = d ** -0.5
    vocab = cfg.vocab_size
    rows = []
    for L in args.lengths:
        q, (k, v), meta = _case(L, heads, kv_heads, d, llm.engine.config.block_size)
        kernel = cpu_batched.uses_decode_kernel(q, k)

        def labkit():
            meta.scratch.clear()
            return cpu_batched.paged_attention(q, k, v, meta, scale)

        def sdpa_rows():
            meta.scratch.clear()
            out = torch.empty_like(q)
            for plan in cpu_batched._plan(meta, L, q.device, False):
                cpu_batched._attend_rows(q, k, v, plan, scale, out, False)
            return out

        def causal():
            kk = k.view(-1, kv_heads, d)[:L].transpose(0, 1)[None]
            vv = v.view(-1, kv_heads, d)[:L].transpose(0, 1)[None]
            return F.scaled_dot_product_attention(q.transpose(0, 1)[None], kk, vv, is_causal=True, scale=scale,
                                                  enable_gqa=True)

        ids = torch.randint(0, vocab, (L,), generator=torch.Generator().manual_seed(L)).tolist()

        def forward():
            t0 = now()
            llm.generate([ids], SamplingParams(max_tokens=1, temperature=0.0))
            return now() - t0

        calls = max(1, args.calls * 128 // L)
        arms = {"labkit": lambda: _timed_calls(labkit, calls), "rows": lambda: _timed_calls(sdpa_rows, calls),
                "causal": lambda: _timed_calls(causal, calls), "forward": forward}
        forward()       # warm
        results = interleaved(arms, args.rounds)
        t = {name: median([r[name] for r in results]) for name in arms}
        share = layers * (t["labkit"] - t["causal"]) / t["forward"]
        rows.append([str(L), f"{t['labkit'] * 1e3:.3f}" + ("" if kernel else " (no kernel: SDPA rows)"),
                     f"{t['rows'] * 1e3:.3f}", f"{t['causal'] * 1e3:.3f}", f"{t['labkit'] / t['causal']:.2f}x",
                     f"{t['forward'] * 1e3:.1f}", f"{share * 100:+.1f} %"])
    return [env, Section("Prefill attention, one layer: batch-invariant rows vs one causal SDPA call "
                         f"(median of {args.rounds} rounds)",
                         ["prompt tokens", "labkit, batch-invariant (ms)", "row by row, SDPA (ms)",
                          "one causal SDPA call (ms)", "labkit / causal", "prefill forward (ms)",
                          f"invariance's share of the prefill ({layers} layers)"], rows,
                         [f"{heads} query heads, {kv_heads} K/V heads, head dim {d}, fp32; process CPU clock, one "
                          f"thread; load average now: {load_average()}",
                          "prefill forward: the whole model over the prompt (one generate call with max_tokens=1, "
                          "engine included)",
                          "share: layers x (labkit - causal) / prefill forward; negative where labkit's form is "
                          "the faster"])]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="two lengths, fewer rounds")
    size.add_argument("--tiny", action="store_true", help="smoke mode: seconds, numbers meaningless")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    p.add_argument("--model", default=None, help="model directory (default: the lab model)")
    p.add_argument("--lengths", type=int, nargs="+", default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--calls", type=int, default=8, help="attention calls per timing at 128 tokens (scaled by length)")
    args = p.parse_args(argv)
    args.lengths = args.lengths or ([8, 24] if args.tiny else [32, 512] if args.quick else [32, 128, 512, 1024])
    args.rounds = args.rounds or (1 if args.tiny else 3 if args.quick else 5)
    if args.tiny:
        args.calls = 1
    for name in ("rounds", "calls", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    if any(L < 1 or L > 4096 for L in args.lengths):
        p.error("--lengths must lie in 1..4096")
    return args


def main(argv: list[str] | None = None) -> list[Section]:
    return report("What batch invariance costs in prefill attention", "bench.prefill_attention", argv,
                  run(parse_args(argv)))


if __name__ == "__main__":
    main()
