"""Lab 01, the first misreading: "the KV cache is just a cache; dropping it costs nothing".

A CPU cache miss costs a reload. Dropping a request's KV blocks costs a *recompute*: its prompt and
every token it has generated so far must run through the model again before it can produce its
next token (preemption by recompute, Kwon et al., SOSP'23, §4.5). The output does not change
(greedy decoding is deterministic), only the work does::

    kept       |prefill P|d|d|d|d|d|d|d|d|                       work = P + N tokens
    dropped    |prefill P|d|d|d|  ✗ blocks freed  |prefill P+3|d|d|d|d|d|   work = P + N + (P + 3)

``compare_pools`` serves the same greedy requests twice: with a pool that holds them all, and
with one too small, so the scheduler must preempt. It counts what each ``Preempted`` event says
was lost (``num_computed_tokens_lost``) and what the model really computed.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.config import EngineConfig
from labkit.metrics import StepRecorder
from labkit.sampling_params import SamplingParams


@dataclass(frozen=True)
class PoolRun:
    num_blocks: int
    num_preemptions: int
    tokens_lost: int          # Σ Preempted.num_computed_tokens_lost: K/V entries thrown away
    tokens_processed: int     # tokens the model computed K/V for, recomputation included
    tokens_needed: int        # Σ (prompt + output - 1): the work with no preemption at all
    seconds: float            # Σ step time
    outputs: tuple[tuple[int, ...], ...]

    @property
    def tokens_recomputed(self) -> int:
        return self.tokens_processed - self.tokens_needed


def serve(llm, prompts: list[list[int]], max_tokens: int) -> PoolRun:
    """Serve ``prompts`` together (greedy, exactly ``max_tokens`` each) and measure the work."""
    engine = llm.engine
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    with StepRecorder(engine) as rec:
        ids = [engine.add_request(list(p), params) for p in prompts]
        while engine.has_unfinished_requests():
            engine.step()
    outputs = tuple(tuple(engine.get_request(rid).output_token_ids) for rid in ids)
    needed = sum(len(p) + max_tokens - 1 for p in prompts)   # the last token's K/V is never computed
    lost = sum(e.num_computed_tokens_lost for e in rec.preempted)
    return PoolRun(engine.config.num_blocks, len(rec.preempted), lost,
                   rec.num_tokens, needed, rec.seconds, outputs)


def engine_with_pool(num_blocks: int, block_size: int = 16, max_model_len: int = 1024):
    """A real-model ``LLM`` whose paged KV pool has ``num_blocks`` blocks (weights are shared)."""
    from labkit import LLM

    return LLM(progress=False, config=EngineConfig(num_blocks=num_blocks, block_size=block_size,
                                                   max_model_len=max_model_len))


def blocks_needed(prompts: list[list[int]], max_tokens: int, block_size: int = 16) -> int:
    """Blocks that hold every request at its full length at once (no preemption needed)."""
    return sum(-(-(len(p) + max_tokens) // block_size) for p in prompts)


def compare_pools(prompts: list[list[int]], max_tokens: int, small_blocks: int,
                  block_size: int = 16) -> tuple[PoolRun, PoolRun]:
    """(big pool: everything fits, small pool of ``small_blocks``: preemption) on the same requests."""
    big = serve(engine_with_pool(blocks_needed(prompts, max_tokens, block_size), block_size), prompts, max_tokens)
    small = serve(engine_with_pool(small_blocks, block_size), prompts, max_tokens)
    return big, small
