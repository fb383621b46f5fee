"""The "before" systems are as real as the "after": contiguous KV, static batching, prefix caching,
parallel sampling, aborts — and none of them changes a greedy token.

Greedy equality is checked twice: on the real model (three short prompts, a dozen tokens each, so the
file stays fast on a CPU) and on the simulated model with a shadow KV cache over a larger random
workload (``tests/sim_oracle.py``: every sequence reads back exactly its own tokens every step).
"""

from __future__ import annotations

import random

import pytest

from labkit import LLM, EngineConfig, SamplingParams, SpecConfig
from labkit import events as ev
from labkit.kv.snapshot import BlockMapSnapshot
from labkit.request import RequestStatus
from labkit.scheduler_output import StepKind
from labkit.traces import synthetic_trace
from tests.sim_oracle import expected_output, next_token, shadow_llm

# ------------------------------------------------------------------------------- shared helpers


class Recorder:
    """Every event the engine emits, in order."""

    def __init__(self, engine):
        self.events: list = []
        engine.hooks.subscribe(self.events.append)

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]

    def first_step(self, request_id: str) -> int:
        return min(e.step for e in self.of(ev.RequestScheduled) if e.request_id == request_id)

    def finish_step(self, request_id: str) -> int:
        """The step during which the request finished (events of a step precede its StepEnd)."""
        step = 0
        for e in self.events:
            if isinstance(e, ev.StepEnd):
                step = e.step
            elif isinstance(e, ev.RequestFinished) and e.request_id == request_id:
                return step + 1
        raise AssertionError(f"{request_id} never finished")


def run_to_end(engine, max_steps: int = 10_000) -> None:
    for _ in range(max_steps):
        if not engine.has_unfinished_requests():
            return
        engine.step()
        engine.kv.check_invariants()
    raise AssertionError(f"still unfinished after {max_steps} steps")


def assert_pool_empty(engine) -> None:
    if engine.kv.layout == "paged":
        assert engine.kv.pool.num_used_blocks() == 0 and engine.kv.block_tables == {}
    else:
        assert engine.kv.regions == {}


def letters(n: int, seed: int) -> list[int]:
    return random.Random(seed).choices(range(97, 123), k=n)


IGNORE_EOS = dict(ignore_eos=True)


# ------------------------------------------------------------------ greedy equality, real model

REAL_PROMPTS = ["What is the capital of France?", "用一句话解释什么是KV缓存。", "def add(a, b):"]
REAL_TOKENS = 12
REAL_GREEDY = SamplingParams(temperature=0.0, max_tokens=REAL_TOKENS, ignore_eos=True)
REAL_BASE = dict(block_size=16, num_blocks=64, max_model_len=256)


def real_generate(**overrides) -> tuple[list[list[int]], dict]:
    llm = LLM(config=EngineConfig(**{**REAL_BASE, **overrides}), progress=False)
    outs = llm.generate(REAL_PROMPTS, REAL_GREEDY)
    assert_pool_empty(llm.engine)
    return [o.token_ids for o in outs], llm.engine.stats()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread: on two shared cores, two OpenMP threads stall each other whenever a
    neighbour is busy (bench/common.py measured 0.05 s vs 0.3-1.0 s per decode step)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def real_reference():
    tokens, _ = real_generate()
    assert all(len(t) == REAL_TOKENS for t in tokens)
    return tokens


def test_real_model_greedy_output_is_the_same_with_prefix_caching(real_reference):
    # A 48-token budget staggers admissions, so later prompts hit the chat template's cached blocks.
    tokens, stats = real_generate(enable_prefix_caching=True, max_num_batched_tokens=48)
    assert stats["prefix_cache_hits"] > 0
    assert tokens == real_reference


def test_real_model_greedy_output_is_the_same_with_contiguous_kv(real_reference):
    tokens, _ = real_generate(kv_cache="contiguous")
    assert tokens == real_reference


def test_real_model_greedy_output_is_the_same_with_static_batching(real_reference):
    tokens, _ = real_generate(scheduler="static")
    assert tokens == real_reference


def test_real_model_greedy_output_is_the_same_under_forced_preemption(real_reference):
    # Prompts of 37, 52 and 37 tokens grow by 11 computed tokens: 6 + 8 + 6 blocks of 8 at the end,
    # 12 in the pool. The first two are admitted (5 + 7 blocks); the first one's sixth block evicts the second.
    tokens, stats = real_generate(block_size=8, num_blocks=12)
    assert stats["num_preemptions"] > 0
    assert tokens == real_reference


# ------------------------------------------------------------------- greedy equality, simulated

SIM_BASE = dict(block_size=8, num_blocks=400, max_num_seqs=16, max_num_batched_tokens=256, max_model_len=256)
SIM_VARIANTS = {
    "prefix caching": dict(enable_prefix_caching=True),
    "contiguous": dict(kv_cache="contiguous"),
    "contiguous, max_tokens reservation": dict(kv_cache="contiguous", contiguous_reserve="max_tokens"),
    "static": dict(scheduler="static"),
    "forced preemption": dict(num_blocks=48, enable_prefix_caching=True),
    "chunked prefill, small budget": dict(max_num_batched_tokens=24),
    "ngram speculation": dict(speculative=SpecConfig(method="ngram", num_speculative_tokens=3)),
}


def sim_workload(num_requests: int = 60, seed: int = 0) -> list[tuple[list[int], int]]:
    """Heavy-tailed lengths; half the prompts start with one of three shared prefixes."""
    trace = synthetic_trace(num_requests, seed=seed, prompt_len=(24, 0.8, 1, 120), output_len=(16, 0.8, 1, 100))
    prefixes = [letters(40, 100 + i) for i in range(3)]
    work = []
    for i, tr in enumerate(trace):
        prompt = letters(tr.prompt_len, i)
        if i % 2:
            prompt = (prefixes[i % 3] + prompt)[:200]
        work.append((prompt, tr.output_len))
    return work


def sim_generate(**overrides) -> tuple[dict[str, list[int]], object]:
    llm = shadow_llm(EngineConfig(**{**SIM_BASE, **overrides}))
    engine = llm.engine
    for i, (prompt, max_tokens) in enumerate(sim_workload()):
        engine.add_request(prompt, SamplingParams(max_tokens=max_tokens), request_id=f"r{i}")
    run_to_end(engine)
    assert_pool_empty(engine)
    return {rid: r.output_token_ids for rid, r in engine.requests.items()}, engine


@pytest.fixture(scope="module")
def sim_reference():
    outputs, engine = sim_generate()
    for rid, r in engine.requests.items():
        assert outputs[rid] == expected_output(rid, r.prompt_token_ids, r.sampling_params.max_tokens,
                                               engine.max_model_len)
    return outputs


@pytest.mark.parametrize("variant", SIM_VARIANTS)
def test_sim_greedy_outputs_are_identical_across_baselines(sim_reference, variant):
    outputs, engine = sim_generate(**SIM_VARIANTS[variant])
    assert outputs == sim_reference
    stats = engine.stats()
    if variant == "forced preemption":
        assert stats["num_preemptions"] > 0
    if variant in ("prefix caching", "forced preemption"):
        assert stats["prefix_cache_hits"] > 0
    if variant == "ngram speculation":
        assert stats["spec_decode_num_accepted_tokens"] > 0


# --------------------------------------------------------------------------------------- abort

def held_blocks(snap: BlockMapSnapshot) -> dict[str, set[int]]:
    """Blocks each request holds in a StepEnd block map (contiguous: the blocks its region covers)."""
    if snap.layout == "paged":
        return {rid: set(table) for rid, table in snap.block_tables}
    bs = snap.block_size
    return {r.request_id: set(range(r.start // bs, (r.start + r.reserved - 1) // bs + 1)) for r in snap.regions}


@pytest.mark.parametrize("layout", ["paged", "contiguous"])
def test_abort_frees_every_block_of_waiting_prefilling_and_decoding_requests(layout):
    paged = layout == "paged"
    llm = shadow_llm(EngineConfig(block_size=4, num_blocks=24, max_num_seqs=5, max_num_batched_tokens=10,
                                  max_model_len=40, kv_cache=layout, enable_prefix_caching=paged,
                                  contiguous_reserve="max_tokens"))
    engine, rec = llm.engine, Recorder(llm.engine)
    shared = letters(12, 0)
    for i in range(5):
        engine.add_request(shared + letters(6, i), SamplingParams(max_tokens=10, n=2 if paged else 1, **IGNORE_EOS),
                           request_id=f"r{i}")
    for _ in range(3):
        engine.step()
    last = rec.of(ev.StepEnd)[-1]
    assert {StepKind.PREFILL, StepKind.DECODE} <= {b.kind for b in last.batch} and engine.scheduler.waiting
    held = held_blocks(last.block_map)
    for rid in list(engine.requests):
        engine.abort(rid)
        engine.kv.check_invariants()
    assert_pool_empty(engine)
    freed = {e.request_id: set(e.block_ids) for e in rec.of(ev.BlocksFreed)}
    assert freed == held
    assert {e.request_id for e in rec.of(ev.RequestFinished) if e.reason == "abort"} == set(engine.requests)
    assert not engine.has_unfinished_requests()


def test_aborting_a_finished_or_unknown_request_changes_nothing():
    llm = shadow_llm(EngineConfig(block_size=4, num_blocks=8, max_model_len=32))
    engine = llm.engine
    engine.add_request(letters(5, 0), SamplingParams(max_tokens=2, **IGNORE_EOS), request_id="a")
    run_to_end(engine)
    rec = Recorder(engine)
    engine.abort("a")
    engine.abort("no-such-request")
    assert engine.get_request("a").status is RequestStatus.FINISHED_LENGTH
    assert rec.events == []


# ------------------------------------------------------------------- contiguous fragmentation

def test_contiguous_holes_too_small_for_the_next_request_are_reported_as_external_fragmentation():
    # 40 slots, first fit, prompt + max_tokens reservations:  A 8 | B 12 | C 8 | D 12  (full).
    # A and C finish first and leave two 8-slot holes: 16 slots free, yet E (12) fits in neither.
    llm = shadow_llm(EngineConfig(block_size=4, num_blocks=10, max_num_seqs=5, max_model_len=40,
                                  kv_cache="contiguous", contiguous_reserve="max_tokens"))
    engine, rec = llm.engine, Recorder(llm.engine)
    for rid, max_tokens in (("A", 4), ("B", 8), ("C", 4), ("D", 8), ("E", 8)):
        engine.add_request(letters(4, ord(rid)), SamplingParams(max_tokens=max_tokens, **IGNORE_EOS),
                           request_id=rid)
    run_to_end(engine)
    holes_step = max(rec.finish_step("A"), rec.finish_step("C"))
    stats = {e.step: e.stats for e in rec.of(ev.StepEnd)}
    at_holes = stats[holes_step]
    assert at_holes.num_requests_waiting == 1
    assert at_holes.kv_external_frag_perc == pytest.approx(100.0 * 16 / 40)
    assert at_holes.kv_cache_usage_perc == pytest.approx(100.0 * 24 / 40)    # 16 of 40 slots free ...
    assert rec.first_step("E") > min(rec.finish_step("B"), rec.finish_step("D"))   # ... yet E waits
    assert stats[1].kv_external_frag_perc == 0.0          # full pool: nothing free, nothing external


def test_paged_layout_admits_the_same_request_at_once():
    llm = shadow_llm(EngineConfig(block_size=4, num_blocks=10, max_num_seqs=5, max_model_len=40))
    engine, rec = llm.engine, Recorder(llm.engine)
    for rid, max_tokens in (("A", 4), ("B", 8), ("C", 4), ("D", 8), ("E", 8)):
        engine.add_request(letters(4, ord(rid)), SamplingParams(max_tokens=max_tokens, **IGNORE_EOS),
                           request_id=rid)
    run_to_end(engine)
    assert rec.first_step("E") == 1
    assert all(e.stats.kv_external_frag_perc == 0.0 for e in rec.of(ev.StepEnd))


# ------------------------------------------------------------------------------ static batching

def _batching_run(scheduler: str) -> Recorder:
    llm = shadow_llm(EngineConfig(block_size=4, num_blocks=32, max_num_seqs=3, max_model_len=32,
                                  scheduler=scheduler))
    engine, rec = llm.engine, Recorder(llm.engine)
    for rid, max_tokens in (("a", 2), ("b", 6), ("c", 4), ("d", 3)):
        engine.add_request(letters(5, ord(rid)), SamplingParams(max_tokens=max_tokens, **IGNORE_EOS),
                           request_id=rid)
    run_to_end(engine)
    return rec


def test_static_batching_admits_nobody_until_the_whole_batch_has_finished():
    rec = _batching_run("static")
    assert rec.first_step("d") == rec.finish_step("b") + 1     # b is the batch's longest request
    assert rec.finish_step("a") < rec.finish_step("b")         # although a's slot was free long before


def test_static_batching_reports_finished_members_as_idle_slots_until_the_batch_ends():
    rec = _batching_run("static")
    idle = {e.step: sorted(b.request_id for b in e.batch if b.kind is StepKind.IDLE) for e in rec.of(ev.StepEnd)}
    # a (2 tokens) finishes in step 2, c (4) in step 4, b (6) in step 6: steps 1..6 are the first batch.
    assert idle == {1: [], 2: [], 3: ["a"], 4: ["a"], 5: ["a", "c"], 6: ["a", "c"],
                    7: [], 8: [], 9: []}
    occupancy = {e.step: e.stats.batch_occupancy_perc for e in rec.of(ev.StepEnd)}
    assert occupancy[5] == pytest.approx(100.0 / 3)            # one busy slot of three


def test_continuous_batching_fills_a_freed_slot_at_the_next_step():
    rec = _batching_run("continuous")
    assert rec.first_step("d") == rec.finish_step("a") + 1
    assert not any(b.kind is StepKind.IDLE for e in rec.of(ev.StepEnd) for b in e.batch)


def test_static_batching_with_parallel_sampling_runs_the_family_as_one_batch_to_its_end():
    """p (n = 3) fills the batch's three slots; q arrives during it. The parent is aborted; its children
    (sharing a pool too small for both: one is preempted) still output exactly their own sequences, and
    q is admitted only after the batch's last sequence has ended (static batching)."""
    llm = shadow_llm(EngineConfig(block_size=2, num_blocks=10, max_num_seqs=3, max_model_len=20,
                                  scheduler="static"))
    engine, rec = llm.engine, Recorder(llm.engine)
    p_prompt, q_prompt = [97, 98, 99, 100], [97, 97, 98, 98]
    engine.add_request(p_prompt, SamplingParams(max_tokens=12, n=3, **IGNORE_EOS), request_id="p")
    engine.step()
    engine.add_request(q_prompt, SamplingParams(max_tokens=4, **IGNORE_EOS), request_id="q")
    engine.step()
    engine.abort("p")           # the parent leaves; its children (sharing a too-small pool) go on
    run_to_end(engine, max_steps=500)
    assert_pool_empty(engine)
    parent = engine.get_request("p")
    assert parent.status is RequestStatus.FINISHED_ABORTED and len(parent.child_ids) == 2
    first = next_token("p", p_prompt)                    # each child's first token: from the parent's logits
    for child_id in parent.child_ids:
        child = engine.get_request(child_id)
        assert child.status is RequestStatus.FINISHED_LENGTH
        assert child.output_token_ids == expected_output(child_id, p_prompt, 12, 20, ignore_eos=True, first_token=first)
    assert engine.stats()["num_preemptions"] > 0
    assert engine.get_request("q").output_token_ids == expected_output("q", q_prompt, 4, 20, ignore_eos=True)
    assert rec.first_step("q") > max(rec.finish_step(c) for c in parent.child_ids)


# ------------------------------------------------------------------------------- prefix caching

PREFIX_CFG = dict(block_size=4, num_blocks=8, max_model_len=32, enable_prefix_caching=True)


def cached_rerun(prompt_len: int, first_max_tokens: int = 2) -> Recorder:
    """Run a prompt to the end, then the same prompt again; record the second run's events."""
    llm = shadow_llm(EngineConfig(**PREFIX_CFG))
    engine, rec = llm.engine, Recorder(llm.engine)
    prompt = letters(prompt_len, 0)
    engine.add_request(prompt, SamplingParams(max_tokens=first_max_tokens, **IGNORE_EOS), request_id="first")
    run_to_end(engine)
    engine.add_request(prompt, SamplingParams(max_tokens=2, **IGNORE_EOS), request_id="again")
    run_to_end(engine)
    return rec


@pytest.mark.parametrize("prompt_len, hit, computed", [(8, 4, 4), (9, 8, 1), (12, 8, 4)])
def test_a_cached_prompt_still_recomputes_its_last_token(prompt_len, hit, computed):
    # Hits are whole blocks and stop before the block holding the prompt's last token: its logits
    # are needed to sample the first output token.
    rec = cached_rerun(prompt_len)
    assert [e.num_cached_tokens for e in rec.of(ev.PrefixHit)] == [hit]
    first = [e for e in rec.of(ev.RequestScheduled) if e.request_id == "again"][0]
    assert first.num_tokens == computed


def test_the_recomputed_last_prompt_token_is_a_prefill_not_a_decode():
    rec = cached_rerun(9)
    first = [e for e in rec.of(ev.RequestScheduled) if e.request_id == "again"][0]
    assert (first.num_tokens, first.kind) == (1, StepKind.PREFILL)


def test_a_request_that_finishes_at_prefill_still_leaves_its_prompt_blocks_cached():
    rec = cached_rerun(12, first_max_tokens=1)
    assert [e.num_cached_tokens for e in rec.of(ev.PrefixHit)] == [8]


def test_freed_cached_blocks_are_reused_by_an_identical_prompt_until_evicted():
    llm = shadow_llm(EngineConfig(**PREFIX_CFG))
    engine, rec = llm.engine, Recorder(llm.engine)
    prompt = letters(12, 0)

    def run(rid: str, tokens: list[int]) -> tuple[int, ...]:
        engine.add_request(tokens, SamplingParams(max_tokens=2, **IGNORE_EOS), request_id=rid)
        run_to_end(engine)
        assert engine.kv.pool.num_used_blocks() == 0             # everything freed ...
        return [e for e in rec.of(ev.BlocksFreed) if e.request_id == rid][0].block_ids

    first = run("first", prompt)
    second = run("second", prompt)
    assert second[:2] == first[:2]                            # ... yet two full blocks came back
    run("filler", letters(30, 1))                             # needs all 8 blocks: evicts every hash
    run("third", prompt)
    assert [(e.request_id, e.num_cached_tokens) for e in rec.of(ev.PrefixHit)] == [("second", 8)]


# --------------------------------------------------------------------------- parallel sampling

def test_parallel_samples_share_prompt_blocks_and_copy_the_partial_block_on_write():
    # block_size 4, prompt of 6 tokens: block 0 full, block 1 half filled; n = 3 sequences.
    llm = shadow_llm(EngineConfig(block_size=4, num_blocks=16, max_model_len=32))
    engine, rec = llm.engine, Recorder(llm.engine)
    engine.add_request(letters(6, 0), SamplingParams(max_tokens=4, n=3, temperature=0.8, seed=1, **IGNORE_EOS),
                       request_id="p")
    engine.step()                                             # prefill, then fork two children
    snap = rec.of(ev.StepEnd)[-1].block_map
    tables = dict(snap.block_tables)
    first, second = engine.get_request("p").child_ids
    assert tables["p"] == tables[first] == tables[second] and len(tables["p"]) == 2
    full, shared_partial = tables["p"]
    assert snap.ref_cnt[full] == snap.ref_cnt[shared_partial] == 3
    assert engine.kv.pool.num_used_blocks() == 2

    engine.step()                                             # all three append into block 1
    snap = rec.of(ev.StepEnd)[-1].block_map
    tables = dict(snap.block_tables)
    assert {t[0] for t in tables.values()} == {full} and snap.ref_cnt[full] == 3   # still shared
    partial = {t[1] for t in tables.values()}
    assert len(partial) == 3 and all(snap.ref_cnt[b] == 1 for b in partial)        # one each now
    # Two writers copied the shared block first; the last holder kept the original.
    copies = engine.runner.copies
    assert [src for src, _ in copies] == [shared_partial, shared_partial]
    assert {dst for _, dst in copies} | {shared_partial} == partial
    allocated = {b for e in rec.of(ev.BlocksAllocated) for b in e.block_ids}
    assert {dst for _, dst in copies} <= allocated             # the copies were announced
    run_to_end(engine)
    assert_pool_empty(engine)


def test_parallel_sampling_wider_than_the_batch_is_refused():
    engine = shadow_llm(EngineConfig(block_size=4, num_blocks=64, max_num_seqs=2, max_model_len=32)).engine
    with pytest.raises(ValueError, match="max_num_seqs"):
        engine.add_request(letters(5, 0), SamplingParams(max_tokens=4, n=4))


def test_parallel_sampling_respects_max_num_seqs():
    llm = shadow_llm(EngineConfig(block_size=4, num_blocks=64, max_num_seqs=3, max_model_len=32))
    engine, rec = llm.engine, Recorder(llm.engine)
    for rid in ("p", "q"):
        engine.add_request(letters(5, ord(rid)), SamplingParams(max_tokens=4, n=2, **IGNORE_EOS), request_id=rid)
    run_to_end(engine)
    assert max(e.stats.num_requests_running for e in rec.of(ev.StepEnd)) <= 3
    assert max(e.stats.batch_occupancy_perc for e in rec.of(ev.StepEnd)) <= 100.0
