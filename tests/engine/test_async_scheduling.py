"""Async (overlap) scheduling, ``EngineConfig(async_scheduling=True)``: the same tokens as the
synchronous engine, with step N+1 planned while step N computes.

- a request that ends on ``max_tokens`` gets exactly the rows it gets synchronously; one that ends
  on a stop token gets at most one more (the row planned while its stop token was being sampled), and
  never a token more in its output;
- aborts, preemption of a request whose row is in flight, prefix caching and n > 1 give what the
  synchronous engine gives (the random traces in ``test_scheduler_random.py`` check the oracle too);
- on a real model the forward runs on the executor's worker thread, and greedy output equals the
  synchronous engine's (``test_parity.py`` compares both with transformers);
- speculative decoding and static batching are refused with an error naming the field.
"""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit import LLM, EngineConfig, SamplingParams, SpecConfig
from labkit import events as ev


def sim(async_scheduling: bool, **overrides) -> LLM:
    config = EngineConfig(async_scheduling=async_scheduling, **{"max_num_seqs": 8, **overrides})
    return LLM(model="sim", config=config, progress=False)


def rows_per_request(llm: LLM) -> dict[str, int]:
    rows: dict[str, int] = {}
    llm.engine.hooks.subscribe(lambda e: rows.__setitem__(e.request_id, rows.get(e.request_id, 0) + 1),
                               ev.RequestScheduled)
    return rows


def run(async_scheduling: bool, prompts, params, **overrides):
    llm = sim(async_scheduling, **overrides)
    rows = rows_per_request(llm)
    outs = llm.generate(prompts, params)
    return [[(c.token_ids, c.finish_reason) for c in o.outputs] for o in outs], rows, llm


PROMPTS = ["the quick brown fox", "jumps", "over the lazy dog " * 3, "a"]


@given(st.lists(st.integers(1, 30), min_size=len(PROMPTS), max_size=len(PROMPTS)))
@settings(max_examples=20, deadline=None)
def test_max_tokens_ends_a_request_without_a_wasted_row(max_tokens):
    params = [SamplingParams(max_tokens=m, ignore_eos=True) for m in max_tokens]
    sync_out, sync_rows, _ = run(False, PROMPTS, params)
    async_out, async_rows, _ = run(True, PROMPTS, params)
    assert async_out == sync_out
    assert async_rows == sync_rows


@given(st.lists(st.integers(97, 122), min_size=1, max_size=6))
@settings(max_examples=20, deadline=None)
def test_a_stop_token_costs_at_most_one_wasted_row_and_no_extra_token(stop_tokens):
    params = SamplingParams(max_tokens=40, stop_token_ids=stop_tokens)
    sync_out, sync_rows, _ = run(False, PROMPTS, params)
    async_out, async_rows, _ = run(True, PROMPTS, params)
    assert async_out == sync_out
    assert sync_rows.keys() == async_rows.keys()
    for rid, n in sync_rows.items():
        assert n <= async_rows[rid] <= n + 1


def test_parallel_sampling_prefix_caching_and_preemption_match_the_synchronous_engine():
    params = [SamplingParams(max_tokens=12, n=3, temperature=0.8, seed=5), SamplingParams(max_tokens=9),
              SamplingParams(max_tokens=15, n=2), SamplingParams(max_tokens=7, temperature=1.0, seed=1)]
    prompts = ["shared prefix shared prefix " + p for p in PROMPTS]
    overrides = dict(num_blocks=32, block_size=4, enable_prefix_caching=True, max_num_batched_tokens=16)
    sync_out, _, sync_llm = run(False, prompts, params, **overrides)
    async_out, _, async_llm = run(True, prompts, params, **overrides)
    assert async_out == sync_out
    assert async_llm.engine.stats()["num_preemptions"] > 0 and async_llm.engine.kv.prefix_hits > 0


def test_an_abort_mid_run_leaves_what_the_synchronous_engine_leaves():
    def aborted_after(async_scheduling: bool, num_tokens: int):
        llm = sim(async_scheduling)
        engine = llm.engine
        ids = [engine.add_request(p, SamplingParams(max_tokens=30, ignore_eos=True)) for p in PROMPTS]
        victim = engine.get_request(ids[1])
        while engine.has_unfinished_requests():
            engine.step()
            if len(victim.output_token_ids) >= num_tokens and not victim.is_finished:
                engine.abort(ids[1])
        return [engine.get_request(rid).output_token_ids for rid in ids], engine

    for num_tokens in (1, 4):
        sync_out, _ = aborted_after(False, num_tokens)
        async_out, engine = aborted_after(True, num_tokens)
        assert async_out == sync_out and len(async_out[1]) == num_tokens
        assert engine.kv.pool.num_used_blocks() == 0


def test_a_request_released_while_its_row_is_in_flight_leaves_the_rows_after_it_applied():
    """Async: the first of three decoding requests is aborted and released (its output delivered) while
    the step holding its next row is in flight. Applying that step skips the row of a request it no
    longer knows, and applies the rows after it: the other two end with the tokens the synchronous
    engine gives them, every block back in the pool."""
    def outputs(async_scheduling: bool, release_first: bool) -> dict[str, list[int]]:
        engine = sim(async_scheduling).engine
        ids = [engine.add_request(p, SamplingParams(max_tokens=12, ignore_eos=True)) for p in PROMPTS[:3]]
        for _ in range(4):                   # the prefill, then decode steps: one is always in flight
            engine.step()
        if release_first:
            engine.abort(ids[0])
            engine.release(ids[0])
        for _ in range(100):
            if not engine.has_unfinished_requests():
                break
            engine.step()
        assert not engine.has_unfinished_requests() and engine.kv.pool.num_used_blocks() == 0
        return {rid: engine.get_request(rid).output_token_ids for rid in ids[1:]}

    want = outputs(False, release_first=False)
    assert outputs(True, release_first=True) == want and all(len(t) == 12 for t in want.values())


def test_a_real_model_runs_its_forward_on_the_worker_thread_and_gives_the_same_tokens(tmp_path):
    """Sync and async, list-built inputs and the persistent batch: four engines, one output."""
    from bench.common import tiny_model_dir

    model = tiny_model_dir(tmp_path / "tiny")
    threads: list[str] = []
    outs = {}
    params = [SamplingParams(max_tokens=8, ignore_eos=True), SamplingParams(max_tokens=5, n=2, temperature=0.9, seed=2),
              SamplingParams(max_tokens=40, ignore_eos=True)]
    for async_scheduling in (False, True):
        for persistent_batch in (False, True):
            config = EngineConfig(async_scheduling=async_scheduling, persistent_batch=persistent_batch,
                                  max_num_seqs=4, block_size=4, max_num_batched_tokens=8)
            llm = LLM(model=str(model), config=config, progress=False)
            execute = llm.engine.runner.execute

            def traced(decision, execute=execute):
                threads.append(threading.current_thread().name)
                return execute(decision)
            llm.engine.runner.execute = traced
            got = llm.generate(["hi", "a longer prompt", "x"], params, chat=False)
            outs[async_scheduling, persistent_batch] = [[c.token_ids for c in o.outputs] for o in got]
            assert threads and all(name.startswith("labkit-forward") == async_scheduling for name in threads)
            threads.clear()
    assert len({repr(v) for v in outs.values()}) == 1, outs


@pytest.mark.parametrize("field,overrides", [
    ("speculative", dict(speculative=SpecConfig(method="ngram"))),
    ("scheduler", dict(scheduler="static")),
    ("async_scheduling", dict(async_scheduling="yes")),
])
def test_what_async_scheduling_cannot_do_is_refused_by_name(field, overrides):
    with pytest.raises(ValueError, match=field):
        EngineConfig(**{"async_scheduling": True, **overrides})


def test_a_stream_gets_every_token_once_and_one_final_delta():
    got = {}
    for async_scheduling in (False, True):
        llm = sim(async_scheduling)
        other = llm.engine.add_request("busy neighbour", SamplingParams(max_tokens=25))
        deltas = list(llm.stream("stream me", SamplingParams(max_tokens=12, stop_token_ids=[101])))
        assert [d.finished for d in deltas].count(True) == 1 and deltas[-1].finished
        got[async_scheduling] = ([t for d in deltas for t in d.token_ids], deltas[-1].finish_reason)
        llm.engine.abort(other)
    assert got[True] == got[False] and got[False][0]
