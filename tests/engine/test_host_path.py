"""The host path's shortcuts: each one must give exactly what the general path gives.

- plain decode steps sample with one argmax over the logits as they come (no row pick); a request
  that samples still draws from its own row with its own generator;
- ``TokensAppended`` events are built only while someone subscribes to them, and then exactly as
  before (each request's tokens, before its ``RequestFinished``);
- the KV manager's one-token ``slot`` equals ``slot_mapping`` for both layouts.

The steady-decode rows of ``schedule()`` are checked against the general formulas at every step of
every random trace (``tests/sim_oracle.py``, ``ShadowRunner._check_decision``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench.scheduler_overhead import HOST_PATH_ARMS, host_path_grid
from labkit import LLM, EngineConfig, SamplingParams, SpecConfig, outputs, scheduler_output
from labkit import events as ev
from labkit.kv.contiguous import ContiguousKVManager
from labkit.kv.kv_cache_manager import KVCacheManager
from labkit.kv.slots import slot, slot_mapping, slot_mapping_rows
from labkit.model.input_batch import InputBatch, build_from_lists
from labkit.outputs import StepOutput, StepOutputs
from labkit.request import Request
from labkit.sample.sampler import Sampler
from labkit.scheduler.continuous import ContinuousScheduler
from labkit.scheduler_output import SampledTokens, ScheduledRequest, SchedulerOutput, StepKind


def decode_rows(ids: list[str]) -> list[ScheduledRequest]:
    return [ScheduledRequest(rid, (97,), 5, 0, StepKind.DECODE, [i], (i * 16 + 5,), 1) for i, rid in enumerate(ids)]


PARAMS = [SamplingParams(), SamplingParams(temperature=0.8, seed=3), SamplingParams(temperature=1.0, top_k=5),
          SamplingParams(), SamplingParams(temperature=0.7, top_p=0.9, seed=11)]


def test_plain_decode_rows_sample_what_the_per_request_path_samples():
    ids = [f"r{i}" for i in range(len(PARAMS))]
    fast, one_by_one = Sampler(seed=1, batched=True), Sampler(seed=1, batched=False)
    for sampler in (fast, one_by_one):
        for rid, params in zip(ids, PARAMS):
            sampler.add(rid, params)
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):                          # generators advance step by step on both sides
        logits = torch.randn(len(ids), 50, generator=gen)
        rows = decode_rows(ids)
        decision = SchedulerOutput.from_rows(rows)
        got, expected = fast.sample(decision, logits).as_dict(), one_by_one.sample(decision, logits).as_dict()
        assert {rid: list(t) for rid, t in got.items()} == {rid: list(t) for rid, t in expected.items()}


def test_the_decode_shortcut_and_the_row_picking_path_agree_when_rows_are_mixed():
    """A mid-prompt chunk (no logits row) sends the batch down the general path: same tokens."""
    ids = [f"r{i}" for i in range(len(PARAMS))]
    fast, general = Sampler(seed=4), Sampler(seed=4)
    for sampler in (fast, general):
        for rid, params in zip(ids, PARAMS):
            sampler.add(rid, params)
    general.add("chunk", SamplingParams())
    chunk = ScheduledRequest("chunk", (1, 2, 3), 0, 0, StepKind.PREFILL, [9], (144, 145, 146), 0)
    logits = torch.randn(len(ids), 50, generator=torch.Generator().manual_seed(2))
    got = fast.sample(SchedulerOutput.from_rows(decode_rows(ids)), logits).as_dict()
    assert got == general.sample(SchedulerOutput.from_rows([chunk, *decode_rows(ids)]), logits).as_dict()
    assert sorted(got) == sorted(ids)


def test_the_count_of_sampling_requests_returns_to_zero():
    llm = LLM(model="sim", config=EngineConfig(max_num_seqs=8), progress=False)
    engine = llm.engine
    llm.generate(["abc", "defg"], [SamplingParams(max_tokens=4, temperature=0.9, n=3),
                                   SamplingParams(max_tokens=3)])
    rid = engine.add_request("hij", SamplingParams(max_tokens=9, temperature=0.5))
    engine.step()
    engine.abort(rid)
    assert engine.sampler._num_random == 0


class CountingTokensAppended(ev.TokensAppended):
    made = 0

    def __init__(self, *args, **kwargs):
        type(self).made += 1
        super().__init__(*args, **kwargs)


def run(subscribe_to: tuple | None, monkeypatch) -> tuple[list, list]:
    monkeypatch.setattr(ev, "TokensAppended", CountingTokensAppended)
    CountingTokensAppended.made = 0
    config = EngineConfig(max_num_seqs=4, num_blocks=40, block_size=4, enable_prefix_caching=True,
                          speculative=SpecConfig(method="ngram", num_speculative_tokens=3))
    llm = LLM(model="sim", config=config, progress=False)
    seen: list = []
    if subscribe_to is not None:
        llm.engine.hooks.subscribe(seen.append, *subscribe_to)
    prompts = ["abcabcabcabc", "xyzxyz", "abcabcab"]
    outs = llm.generate(prompts, SamplingParams(max_tokens=12, ignore_eos=True))
    return [o.token_ids for o in outs], seen


def test_tokens_appended_are_built_only_for_their_subscribers(monkeypatch):
    plain, _ = run(None, monkeypatch)
    assert CountingTokensAppended.made == 0
    _, seen = run((ev.StepEnd,), monkeypatch)
    assert CountingTokensAppended.made == 0 and seen
    with_tokens, seen = run((ev.TokensAppended, ev.RequestFinished), monkeypatch)
    assert CountingTokensAppended.made > 0 and with_tokens == plain
    tokens: dict[str, list[int]] = {}
    for event in seen:
        if isinstance(event, ev.TokensAppended):
            assert event.request_id not in {e.request_id for e in seen[:seen.index(event)]
                                            if isinstance(e, ev.RequestFinished)}
            tokens.setdefault(event.request_id, []).extend(event.token_ids)
    assert sorted(tokens.values()) == sorted(plain)


@pytest.mark.parametrize("layout", ["paged", "contiguous"])
def test_a_kv_managers_slot_mapping_is_the_slot_formula_over_its_block_table(layout):
    kv = KVCacheManager(32, 4) if layout == "paged" else ContiguousKVManager(128, 4, "max_tokens", 64)
    for i, rid in enumerate("abc"):
        assert kv.allocate_slots(rid, 0, 9 + 4 * i, num_reserve_tokens=20) is not None
    for i, rid in enumerate("abc"):
        end = 9 + 4 * i
        assert kv.slot_mapping(rid, 0, end) == [slot(kv.block_table(rid), p, kv.meta_block_size) for p in range(end)]
        assert kv.slot_mapping(rid, 3, end) == slot_mapping(kv.block_table(rid), 3, end, kv.meta_block_size)


def test_the_vectorised_slot_formula_gives_each_tokens_slot():
    tables = [[7, 2, 9], [4, 0, 0], [1, 5, 3]]
    rows, positions = [0, 0, 1, 2, 2, 0], [0, 5, 3, 8, 11, 11]
    got = slot_mapping_rows(np.array(tables, dtype=np.int32), np.array(rows), np.array(positions), 4)
    assert got.dtype == np.int64
    assert got.tolist() == [slot(tables[r], p, 4) for r, p in zip(rows, positions)] == [28, 9, 19, 12, 15, 39]


class CountingRow(ScheduledRequest):
    made = 0

    __slots__ = ()

    def __init__(self, *args, **kwargs):
        type(self).made += 1
        super().__init__(*args, **kwargs)


class CountingStepOutput(StepOutput):
    made = 0

    __slots__ = ()

    def __init__(self, *args, **kwargs):
        type(self).made += 1
        super().__init__(*args, **kwargs)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_steady_decode_step_builds_no_object_per_request(monkeypatch, async_scheduling):
    """50 decode steps of 64 running requests: no ``ScheduledRequest`` and no ``StepOutput`` is built (the
    decision and the outputs are columns) with either input builder, and both give the same tokens."""
    monkeypatch.setattr(scheduler_output, "ScheduledRequest", CountingRow)
    monkeypatch.setattr(outputs, "StepOutput", CountingStepOutput)
    tokens = {}
    for persistent in (False, True):
        config = EngineConfig(max_num_seqs=64, persistent_batch=persistent, async_scheduling=async_scheduling)
        engine = LLM(model="sim", config=config, progress=False).engine
        ids = [engine.add_request([97 + i % 26] * 5, SamplingParams(max_tokens=60, ignore_eos=True)) for i in range(64)]
        for _ in range(4):                       # the prefill step, then into steady decode
            engine.step()
        CountingRow.made = CountingStepOutput.made = 0
        for _ in range(50):
            engine.step()
        assert (CountingRow.made, CountingStepOutput.made) == (0, 0)
        outs = engine.step()
        assert len(outs) == 64 and CountingStepOutput.made == 0
        assert [o.request_id for o in outs] == ids and CountingStepOutput.made == 64     # built when read
        while engine.has_unfinished_requests():
            engine.step()
        tokens[persistent] = [engine.get_request(rid).output_token_ids for rid in ids]
    assert tokens[True] == tokens[False]


def test_step_outputs_read_like_the_list_of_step_outputs():
    outs = StepOutputs()
    for rid, token, reason in (("a", 97, None), ("b", 98, "length"), ("c", 99, None)):
        outs.append(rid, (token,), reason)
    expected = [StepOutput("a", (97,), False, None), StepOutput("b", (98,), True, "length"),
                StepOutput("c", (99,), False, None)]
    assert list(outs) == expected and outs == expected and len(outs) == 3
    assert outs[-1] == expected[-1] and outs[1:] == expected[1:]
    with pytest.raises(IndexError):
        outs[3]


def test_the_bench_grid_reports_every_arm_at_every_size_with_best_at_most_the_mean():
    section = host_path_grid([1, 4], steps=2, rounds=1)
    assert [(r[0], r[1]) for r in section.rows] == [(n, arm) for n in ("1", "4") for arm in HOST_PATH_ARMS]
    for r in section.rows:
        best, mean = float(r[2]), float(r[3])
        assert 0 < best <= mean


def test_a_steady_decode_row_with_room_in_its_last_block_asks_the_kv_manager_for_nothing():
    """The steady decode row is the shortcut of most rows of most steps: its table comes from
    ``decode_table`` alone, and ``allocate_slots`` is asked only for prefills and for a decode row whose
    last block is full. Blocks of 4, prompts of 2: positions 2 and 3 decode in the first block, position 4
    needs a second one."""
    kv = KVCacheManager(32, 4)
    sched = ContinuousScheduler(EngineConfig(max_num_seqs=4, max_num_batched_tokens=64), kv, max_model_len=64)
    asked: list[tuple[str, int]] = []
    allocate = kv.allocate_slots

    def counting(request_id, num_computed, num_new, *args, **kwargs):
        asked.append((request_id, num_computed))
        return allocate(request_id, num_computed, num_new, *args, **kwargs)
    kv.allocate_slots = counting
    for rid, prompt in (("A", [1, 2]), ("B", [3, 4])):
        sched.add(Request(rid, prompt, SamplingParams(max_tokens=10, ignore_eos=True), 0.0))
    per_step = []
    for now in (1.0, 2.0, 3.0, 4.0):
        asked.clear()
        out = sched.schedule(now)
        sched.update_from_output(out, SampledTokens.of(out, {rid: (7,) for rid in out.request_ids}), now)
        per_step.append((list(asked), out.kinds))
    assert [a for a, _ in per_step] == [[("A", 0), ("B", 0)], [], [], [("A", 4), ("B", 4)]]
    assert all(k is StepKind.DECODE for _, kinds in per_step[1:] for k in kinds)


@pytest.mark.parametrize("rows", [3, 1])
def test_the_persistent_batch_mirrors_each_table_and_gives_the_list_paths_tensors(rows):
    """After each step's ``prepare``, a scheduled request's row holds its KV manager's block table and
    that table's length (which the next step compares against, so only rows that changed are written
    again), and every tensor equals the list path's. Blocks of 4, prompts of 2 to 9 tokens, a request
    admitted mid-run and requests finishing: tables grow, rows are bound, freed and bound again. Made
    with one row for three running requests, the batch doubles its rows (1, 2, 4) and keeps every table."""
    kv = KVCacheManager(64, 4)
    sched = ContinuousScheduler(EngineConfig(max_num_seqs=3, max_num_batched_tokens=64), kv, max_model_len=64)
    batch = InputBatch(rows, 17, 4, "cpu")
    for i, (n, max_tokens) in enumerate(((2, 6), (5, 11), (9, 3), (3, 7))):
        sched.add(Request(f"r{i}", list(range(1, n + 1)), SamplingParams(max_tokens=max_tokens, ignore_eos=True), 0.0))
    rows_seen, step = set(), 0
    binds, bind = [], batch._bind
    batch._bind = lambda rids: (binds.append(list(rids)), bind(rids))[1]
    changes, last = 0, None
    while sched.has_unfinished():
        out = sched.schedule(float(step))
        changes += out.request_ids != last
        last = list(out.request_ids)
        got, want = batch.prepare(out), build_from_lists(out, 4, "cpu")
        for name in ("input_ids", "positions", "logits_indices"):
            assert torch.equal(getattr(got, name), getattr(want, name)), (step, name)
            assert getattr(got, name).dtype == getattr(want, name).dtype, (step, name)
        for name in ("query_start_loc", "seq_lens", "slot_mapping", "block_tables"):   # the C kernels read int32/64
            assert getattr(got.metadata, name).dtype == getattr(want.metadata, name).dtype, (step, name)
        for name in ("query_start_loc", "seq_lens", "slot_mapping"):
            assert torch.equal(getattr(got.metadata, name), getattr(want.metadata, name)), (step, name)
        # Past a table's end the padding may differ (a reused row keeps an old entry; attention never reads it).
        assert got.metadata.block_tables.shape == want.metadata.block_tables.shape
        for i, table in enumerate(out.block_tables):
            assert torch.equal(got.metadata.block_tables[i, :len(table)], want.metadata.block_tables[i, :len(table)])
        for rid in out.request_ids:
            row, table = batch.row_of[rid], kv.block_table(rid)
            assert batch.num_blocks[row] == len(table), (step, rid)
            assert batch.block_table[row, :len(table)].tolist() == list(table), (step, rid)
            rows_seen.add((rid, row))
        sched.update_from_output(out, SampledTokens.of(out, {rid: (7,) for rid in out.request_ids}), float(step))
        step += 1
    assert len(binds) == changes < step           # rows are bound again only when the step's requests change
    if rows == 3:
        assert len(rows_seen) == 4 and len({row for _, row in rows_seen}) == 3      # r3 took a freed row
        assert batch.block_table.shape == (3, 17)                                   # three rows were enough
    else:
        assert len(rows_seen) == 4 and {row for _, row in rows_seen} <= set(range(4))
        assert batch.block_table.shape == (4, 17) and len(batch.num_blocks) == 4
        assert sorted(batch._free_rows + list(batch.row_of.values())) == [0, 1, 2, 3]   # every row once
