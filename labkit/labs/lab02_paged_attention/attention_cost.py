"""Lab 02, sections 6 and 7: what the indirection costs. Paged attention vs dense attention over
the very same K/V, timed on this CPU.

Paged attention first translates every context position to a cache slot and reads K/V from
blocks scattered over the pool; dense attention reads each sequence's K/V from one contiguous run.
Both arms use the same attention kernel, so the difference is the indirection alone: labkit's C
decode kernel where the engine's CPU backend uses it (it reads through the slots; dense gives it
consecutive slots), else PyTorch's SDPA (paged gathers K/V rows into a copy first)::

    paged   slots = table[pos // B] * B + pos % B   →   (gather K/V rows)   →   kernel
    dense   slots = s * L + pos, K/V already in order                    →   kernel

The paper measures its CUDA kernel 20–26 % slower than FasterTransformer's contiguous attention
(Kwon et al., SOSP'23, §7.1, Fig. 18a). Here both run in one process, one thread, in interleaved
rounds (so a busy machine slows both alike); each figure is the fastest round, the least
disturbed estimate. One "decode step" is ``num_layers`` attention calls of ``num_seqs`` single-token
queries: the engine plans the gather once per step and reuses it in every layer, and so does this.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from labkit.attention import cpu_batched
from labkit.attention.backend import get_backend
from labkit.attention.metadata import AttentionMetadata
from labkit.kernels import native
from labkit.labs.common.machine import one_thread
from labkit.labs.common.measure import Verdict, compare, cpu_clock

# SmolLM2-135M's attention shape (config.json): 9 query heads, 3 KV heads, head_dim 64, 30 layers.
LAB = "02"     # verdicts go to results/lab02.json
SHAPE = dict(num_heads=9, num_kv_heads=3, head_dim=64, num_layers=30)



@dataclass(frozen=True)
class AttentionCase:
    """``num_seqs`` decode queries over contexts of ``context_len`` tokens, stored two ways."""

    query: torch.Tensor           # [num_seqs, heads, D]
    key_cache: torch.Tensor       # [num_blocks, B, kv_heads, D], blocks in shuffled order
    value_cache: torch.Tensor
    dense_k: torch.Tensor         # [num_seqs, kv_heads, L, D], the same numbers, contiguous
    dense_v: torch.Tensor
    block_tables: list[list[int]]
    context_len: int
    block_size: int

    def metadata(self) -> AttentionMetadata:
        n, L, B = len(self.block_tables), self.context_len, self.block_size
        slots = [t[(L - 1) // B] * B + (L - 1) % B for t in self.block_tables]
        return AttentionMetadata.build([1] * n, [L] * n, self.block_tables, slots, B)


def make_case(num_seqs: int, context_len: int, block_size: int, seed: int = 0,
              num_heads: int = SHAPE["num_heads"], num_kv_heads: int = SHAPE["num_kv_heads"],
              head_dim: int = SHAPE["head_dim"]) -> AttentionCase:
    """Random K/V for each sequence, written into a pool whose blocks are handed out in random order."""
    g = torch.Generator().manual_seed(seed)
    per_seq = -(-context_len // block_size)
    order = torch.randperm(num_seqs * per_seq, generator=g).tolist()
    tables = [order[s * per_seq:(s + 1) * per_seq] for s in range(num_seqs)]
    dense_k = torch.randn(num_seqs, num_kv_heads, context_len, head_dim, generator=g)
    dense_v = torch.randn(num_seqs, num_kv_heads, context_len, head_dim, generator=g)
    caches = [torch.zeros(num_seqs * per_seq * block_size, num_kv_heads, head_dim) for _ in range(2)]
    pos = torch.arange(context_len)
    for s, table in enumerate(tables):
        slots = torch.tensor(table)[pos // block_size] * block_size + pos % block_size
        caches[0][slots] = dense_k[s].transpose(0, 1)
        caches[1][slots] = dense_v[s].transpose(0, 1)
    query = torch.randn(num_seqs, num_heads, head_dim, generator=g)
    shape = (-1, block_size, num_kv_heads, head_dim)
    return AttentionCase(query, caches[0].view(shape), caches[1].view(shape), dense_k, dense_v, tables,
                         context_len, block_size)


def paged_step(case: AttentionCase, backend, num_layers: int) -> torch.Tensor:
    meta, scale = case.metadata(), case.query.shape[-1] ** -0.5
    for _ in range(num_layers):
        out = backend.paged_attention(case.query, case.key_cache, case.value_cache, meta, scale)
    return out


SDPA, KERNEL = "SDPA", "C kernel"


def kernel_of(case: AttentionCase, backend) -> str:
    """The attention kernel the paged arm runs: the C decode kernel or SDPA (the dense arm uses the same)."""
    return KERNEL if backend is cpu_batched and cpu_batched.uses_decode_kernel(case.query, case.key_cache) else SDPA


def dense_pool(case: AttentionCase) -> tuple[torch.Tensor, ...]:
    """The dense K/V as a pool the C kernel reads, sequence after sequence, with its consecutive slots and
    lengths: (pool_k, pool_v, slots, lens). Built once, outside the timing."""
    n, kv_heads, L, D = case.dense_k.shape
    pool_k = case.dense_k.transpose(1, 2).reshape(n * L, kv_heads, D).contiguous()
    pool_v = case.dense_v.transpose(1, 2).reshape(n * L, kv_heads, D).contiguous()
    return pool_k, pool_v, torch.arange(n * L).view(n, L), torch.full((n,), L, dtype=torch.int64)


def dense_step(case: AttentionCase, num_layers: int, kernel: str = SDPA, pool: tuple | None = None) -> torch.Tensor:
    if kernel == KERNEL:
        pool_k, pool_v, slots, lens = pool or dense_pool(case)
        for _ in range(num_layers):
            out = native.decode_attention(case.query, pool_k, pool_v, slots, lens, case.query.shape[-1] ** -0.5)
        return out
    q = case.query.unsqueeze(2)                                   # [num_seqs, heads, 1, D]
    for _ in range(num_layers):
        out = F.scaled_dot_product_attention(q, case.dense_k, case.dense_v, enable_gqa=True)
    return out.squeeze(2)


def _seconds(fn) -> float:
    clock = cpu_clock()
    start = clock()
    fn()
    return clock() - start


@dataclass(frozen=True)
class IndirectionCost:
    context_len: int
    block_size: int
    num_seqs: int
    paged_s: float          # fastest round, one decode step (all layers)
    dense_s: float
    max_abs_diff: float     # paged vs dense output: the same attention, up to rounding
    verdict: Verdict | None = None   # paged ÷ dense time, from the interleaved rounds
    kernel: str = SDPA      # the attention kernel both arms ran

    @property
    def overhead(self) -> float:
        """% slower than dense (negative: faster)."""
        return 100.0 * (self.paged_s / self.dense_s - 1.0)

    @property
    def overhead_spread(self) -> tuple[float, float] | None:
        """The overhead (%) over the interleaved rounds: paged ÷ dense of each round, lowest and highest."""
        if self.verdict is None:
            return None
        return 100.0 * (self.verdict.ratio_min - 1.0), 100.0 * (self.verdict.ratio_max - 1.0)


def measure_indirection(case: AttentionCase, rounds: int = 7, num_layers: int = SHAPE["num_layers"],
                        backend=None) -> IndirectionCost:
    """Paged (the engine's CPU backend unless given) vs dense, the same kernel, interleaved rounds, one thread."""
    backend = backend or get_backend("auto", torch.device("cpu"))
    kernel = kernel_of(case, backend)
    pool = dense_pool(case) if kernel == KERNEL else None
    with one_thread(), torch.inference_mode():
        diff = (paged_step(case, backend, 1) - dense_step(case, 1, kernel, pool)).abs().max().item()
        c = compare({"dense": lambda: dense_step(case, num_layers, kernel, pool),
                     "paged": lambda: paged_step(case, backend, num_layers)},
                    baseline="dense", rounds=rounds, warmup=1, id=f"indirection/context_{case.context_len}",
                    claim=(f"分页 ÷ 连续注意力的时间（上下文 {case.context_len}）",
                           f"paged over dense attention time (context {case.context_len})"), lab=LAB)
    return IndirectionCost(case.context_len, case.block_size, len(case.block_tables), c.arms["paged"].best,
                           c.arms["dense"].best, diff, c.verdict, kernel)


def indirection_sweep(context_lens: list[int], num_seqs: int = 8, block_size: int = 16,
                      rounds: int = 7) -> list[IndirectionCost]:
    return [measure_indirection(make_case(num_seqs, L, block_size, seed=i), rounds)
            for i, L in enumerate(context_lens)]


def block_size_attention_rounds(block_sizes: list[int], num_seqs: int, context_len: int,
                                rounds: int = 5) -> dict[int, list[float]]:
    """Seconds per decode step (all layers, CPU time) of the engine's paged attention, per block size and
    round, the block sizes interleaved round by round (so round r of every size saw the same machine)."""
    backend = get_backend("auto", torch.device("cpu"))
    cases = {B: make_case(num_seqs, context_len, B, seed=1) for B in block_sizes}
    times: dict[int, list[float]] = {B: [] for B in block_sizes}
    with one_thread(), torch.inference_mode():
        for r in range(rounds):
            for B in (block_sizes if r % 2 == 0 else block_sizes[::-1]):
                times[B].append(_seconds(lambda: paged_step(cases[B], backend, SHAPE["num_layers"])))
    return times


def block_size_attention(block_sizes: list[int], num_seqs: int, context_len: int,
                         rounds: int = 5) -> dict[int, float]:
    """Fastest seconds per decode step (all layers) of the engine's paged attention, per block size."""
    return {B: min(ts) for B, ts in block_size_attention_rounds(block_sizes, num_seqs, context_len, rounds).items()}


# ----------------------------------------------------------------------------- the section's record

SECTION = "7-indirection"


def record_indirection(costs: list[IndirectionCost]):
    """Section 7 as a record (``labkit.labs.common.records``): per context the fastest rounds, the
    output difference, the kernel and the paged ÷ dense verdict. Everything section 7 prints is
    rendered from it (``views.indirection_narration``)."""
    from labkit.labs.common.records import RunContext, SectionRecord

    loads = [x for c in costs if c.verdict is not None for x in (c.verdict.load_before, c.verdict.load_after)
             if x is not None]
    return SectionRecord(
        lab=LAB, section=SECTION, context=RunContext.current(load=max(loads) if loads else None),
        rounds={}, values={"costs": [{"context_len": c.context_len, "block_size": c.block_size, "num_seqs": c.num_seqs,
                                      "paged_s": c.paged_s, "dense_s": c.dense_s, "max_abs_diff": c.max_abs_diff,
                                      "kernel": c.kernel} for c in costs]},
        verdicts={f"context_{c.context_len}": c.verdict for c in costs if c.verdict is not None})


def costs_from_record(rec) -> list[IndirectionCost]:
    """The section's measurements again, from its record alone."""
    out = []
    for c in rec.values["costs"]:
        key = f"context_{c['context_len']}"
        out.append(IndirectionCost(c["context_len"], c["block_size"], c["num_seqs"], c["paged_s"], c["dense_s"],
                                   c["max_abs_diff"], rec.verdict(key) if key in rec.verdicts else None, c["kernel"]))
    return out
