"""Lab 01, the first misreading: "the KV cache is just a cache; dropping it costs nothing".

A CPU cache miss costs a reload. Dropping a request's KV blocks costs a *recompute*: its prompt and
every token it has generated so far must run through the model again before it can produce its
next token (preemption by recompute, Kwon et al., SOSP'23, §4.5). The output does not change
(greedy decoding is deterministic), only the work does::

    kept       |prefill P|d|d|d|d|d|d|d|d|                       work = P + N tokens
    dropped    |prefill P|d|d|d|  ✗ blocks freed  |prefill P+3|d|d|d|d|d|   work = P + N + (P + 3)

``compare_pools`` serves the same greedy requests three times: with a pool that holds them all,
with one too small (the scheduler must preempt), and with the same small pool under a frugal
policy that admits only as many requests as the pool holds at full length (``max_num_seqs``), so
nothing is preempted and the price is fewer requests per step. It counts what each ``Preempted``
event says was lost (``num_computed_tokens_lost``), what the model really computed and the engine
steps taken: all exact counts, the same on every machine. Time is not compared here: a wall-clock
bar would mix the recomputation with the smaller batches and with whatever else the machine runs.
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
    seconds: float            # Σ step time (wall clock; not shown: see the module docstring)
    outputs: tuple[tuple[int, ...], ...]
    num_steps: int = 0        # engine steps taken
    max_num_seqs: int | None = None   # the admission limit (None: the engine's default)

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
                   rec.num_tokens, needed, rec.seconds, outputs, len(rec.rows), engine.config.max_num_seqs)


def engine_with_pool(num_blocks: int, block_size: int = 16, max_model_len: int = 1024, max_num_seqs: int | None = None):
    """A real-model ``LLM`` whose paged KV pool has ``num_blocks`` blocks (weights are shared)."""
    from labkit import LLM

    extra = {} if max_num_seqs is None else {"max_num_seqs": max_num_seqs}
    return LLM(progress=False, config=EngineConfig(num_blocks=num_blocks, block_size=block_size,
                                                   max_model_len=max_model_len, **extra))


def blocks_needed(prompts: list[list[int]], max_tokens: int, block_size: int = 16) -> int:
    """Blocks that hold every request at its full length at once (no preemption needed)."""
    return sum(-(-(len(p) + max_tokens) // block_size) for p in prompts)


def frugal_limit(prompts: list[list[int]], max_tokens: int, num_blocks: int, block_size: int = 16) -> int:
    """How many of ``prompts`` the pool holds at full length at once (the largest first: a safe
    admission limit whichever requests run together); at least 1."""
    sizes = sorted((-(-(len(p) + max_tokens) // block_size) for p in prompts), reverse=True)
    used, n = 0, 0
    for s in sizes:
        if used + s > num_blocks:
            break
        used, n = used + s, n + 1
    return max(1, n)


def compare_pools(prompts: list[list[int]], max_tokens: int, small_blocks: int,
                  block_size: int = 16) -> tuple[PoolRun, PoolRun, PoolRun]:
    """(big pool: everything fits; small pool of ``small_blocks``: preemption; the same small pool
    admitting only ``frugal_limit`` requests at once) on the same requests."""
    big = serve(engine_with_pool(blocks_needed(prompts, max_tokens, block_size), block_size), prompts, max_tokens)
    small = serve(engine_with_pool(small_blocks, block_size), prompts, max_tokens)
    limit = frugal_limit(prompts, max_tokens, small_blocks, block_size)
    frugal = serve(engine_with_pool(small_blocks, block_size, max_num_seqs=limit), prompts, max_tokens)
    return big, small, frugal


SECTION = "5-preemption"


def record_pools(runs: tuple[PoolRun, ...]):
    """Section 5 as a record: every run's exact counts (no timing), and whether the outputs agree."""
    from labkit.labs.common.records import RunContext, SectionRecord

    fields = ("num_blocks", "num_preemptions", "tokens_lost", "tokens_processed", "tokens_needed", "num_steps",
              "max_num_seqs")
    return SectionRecord(lab="01", section=SECTION, context=RunContext.current(),
                         values={"runs": [{f: getattr(r, f) for f in fields} for r in runs],
                                 "same_outputs": all(r.outputs == runs[0].outputs for r in runs)})


def pools_from_record(rec) -> tuple[PoolRun, ...]:
    same = rec.values["same_outputs"]
    return tuple(PoolRun(r["num_blocks"], r["num_preemptions"], r["tokens_lost"], r["tokens_processed"],
                         r["tokens_needed"], 0.0, ((0,),) if same or i == 0 else ((i,),), r["num_steps"],
                         r["max_num_seqs"]) for i, r in enumerate(rec.values["runs"]))
