"""The persistent batch applies the block-table changes the decision names, and nothing else.

A row the batch keeps from the last step changes only as told (``model/input_batch.py``)::

    admitted    the whole table                 truncated   rid -> n: the row keeps n entries
    appended    rid -> j: entries j on          replaced    rid -> j: entry j

and a row it binds now gets the whole table. Each change is checked twice: named, the row equals the
decision's table; left out, the row keeps its old entries (the batch really relies on being told). The
producers are checked too: the KV managers log exactly the changes they make to existing tables, and the
schedulers hand them over with the decision.
"""

from __future__ import annotations

import pytest

from labkit.config import EngineConfig
from labkit.kv.contiguous import ContiguousKVManager
from labkit.kv.kv_cache_manager import KVCacheManager
from labkit.model.input_batch import InputBatch
from labkit.request import Request
from labkit.sampling_params import SamplingParams
from labkit.scheduler.continuous import ContinuousScheduler
from labkit.scheduler_output import SampledTokens, SchedulerOutput, StepKind

BLOCK = 4


def decode_step(tables: dict[str, list[int]], **changes) -> SchedulerOutput:
    """One decode row per request, at the last slot its table covers, and the named ``changes``."""
    out = SchedulerOutput(BLOCK)
    for rid, table in tables.items():
        out.add_row(rid, (7,), BLOCK * len(table) - 1, table, StepKind.DECODE, 1)
    out.close(len(tables))
    for name, value in changes.items():
        setattr(out, name, value)
    return out


def row(batch: InputBatch, rid: str) -> list[int]:
    """The request's table as the batch holds it: its row's first ``num_blocks`` entries."""
    r = batch.row_of[rid]
    return batch.block_table[r, :batch.num_blocks[r]].tolist()


def held(tables: dict[str, list[int]]) -> InputBatch:
    """A batch that prepared one step of ``tables`` (each row bound now, so written whole)."""
    batch = InputBatch(4, 8, BLOCK, "cpu")
    batch.prepare(decode_step(tables))
    assert {rid: row(batch, rid) for rid in tables} == tables
    return batch


# Each named change: the table the batch held, the table the decision hands out, and the change that says how.
CHANGES = {
    "readmitted after preemption": ([3, 8], [5, 6], {"admitted": ["a"]}),
    "admitted with a prefix hit that ends where the old row ended": ([3, 8], [3, 6], {"admitted": ["a"]}),
    "appended": ([3, 8], [3, 8, 9, 2], {"appended": {"a": 2}}),
    "replaced by copy-on-write": ([3, 8], [3, 11], {"replaced": {"a": 1}}),
    "rolled back": ([3, 8, 9], [3, 8], {"truncated": {"a": 2}}),
    "rolled back, then appended": ([3, 8, 9], [3, 8, 12], {"truncated": {"a": 2}, "appended": {"a": 2}}),
    "copied and appended": ([3, 8], [3, 11, 12], {"replaced": {"a": 1}, "appended": {"a": 2}}),
}


@pytest.mark.parametrize("name", CHANGES)
def test_a_named_change_makes_the_kept_row_the_decisions_table(name):
    before, after, changes = CHANGES[name]
    batch = held({"a": before, "b": [1]})
    got = batch.prepare(decode_step({"a": after, "b": [1]}, **changes))
    assert row(batch, "a") == after and row(batch, "b") == [1]
    assert got.metadata.block_tables.shape == (2, max(len(after), 1))
    assert got.metadata.block_tables[0].tolist()[:len(after)] == after


@pytest.mark.parametrize("name", CHANGES)
def test_a_change_left_out_leaves_the_row_wrong(name):
    """The same step without its named change: the batch does not find it out by itself."""
    before, after, changes = CHANGES[name]
    batch = held({"a": before, "b": [1]})
    batch.prepare(decode_step({"a": after, "b": [1]}))
    assert row(batch, "a") == before != after


def test_a_copy_and_an_append_in_one_step_are_both_needed():
    """(A rollback followed by an append needs only the append: entries from j on, and the length, are
    written again.)"""
    before, after, changes = CHANGES["copied and appended"]
    for left_out in changes:
        batch = held({"a": before})
        batch.prepare(decode_step({"a": after}, **{k: v for k, v in changes.items() if k != left_out}))
        assert row(batch, "a") != after, left_out


def test_a_row_bound_now_is_written_whole_with_no_change_named():
    """A request the batch did not hold last step (new, a forked child, or back after a step without a row)."""
    batch = held({"a": [3, 8]})
    batch.prepare(decode_step({"b": [4]}))                       # a's row is freed ...
    batch.prepare(decode_step({"b": [4], "a": [3, 8, 9]}))       # ... and bound again: no change named
    assert row(batch, "a") == [3, 8, 9] and row(batch, "b") == [4]


def test_a_row_bound_now_is_written_whole_even_when_an_append_is_named():
    """a is back after a step without a row, in the row c used meanwhile, and its table grew in between: the
    row held c's table, so entries before the append are written too."""
    batch = held({"a": [3, 8]})
    batch.prepare(decode_step({"c": [5, 6]}))                    # a's row freed, and taken by c
    assert batch.row_of["c"] == 0
    batch.prepare(decode_step({"a": [3, 8, 9]}, appended={"a": 2}))
    assert batch.row_of["a"] == 0 and row(batch, "a") == [3, 8, 9]


def test_a_change_for_a_request_without_a_row_this_step_is_skipped():
    batch = held({"a": [3, 8], "b": [1]})
    batch.prepare(decode_step({"b": [1]}, appended={"a": 2}, truncated={"a": 1}, replaced={"a": 0}))
    assert batch.row_of == {"b": batch.row_of["b"]} and row(batch, "b") == [1]


def test_an_appended_table_past_the_rows_width_is_refused():
    batch = held({"a": [3]})
    with pytest.raises(ValueError, match="max_blocks_per_req"):
        batch.prepare(decode_step({"a": list(range(9))}, appended={"a": 1}))


# -- who names the changes: the KV managers log them, the schedulers hand them over ----------------------
def taken(kv) -> tuple[dict, dict, dict]:
    return tuple(kv.take_table_changes())


def test_the_paged_manager_logs_blocks_appended_to_an_existing_table_from_its_old_length():
    kv = KVCacheManager(16, BLOCK)
    new = kv.allocate_slots("a", 0, 6)                 # a new table: the scheduler names it (admitted)
    assert len(new) == 2 and taken(kv) == ({}, {}, {})
    assert kv.allocate_slots("a", 6, 2) == [] and taken(kv) == ({}, {}, {})      # room left: no change
    kv.allocate_slots("a", 8, 5)                       # two more blocks: entries 2 and 3
    assert taken(kv) == ({"a": 2}, {}, {}) and taken(kv) == ({}, {}, {})


def test_the_paged_manager_logs_a_copy_on_write_as_the_index_it_replaced():
    kv = KVCacheManager(16, BLOCK)
    kv.allocate_slots("p", 0, 6)
    kv.fork("p", "c")                                  # c's table is new: not logged
    taken(kv)
    kv.allocate_slots("c", 6, 3)                       # writes into shared block 1, and needs block 2
    table = kv.block_table("c")
    assert taken(kv) == ({"c": 2}, {"c": 1}, {}) and table[1] != kv.block_table("p")[1]


def test_the_paged_manager_logs_a_rollback_as_the_length_the_table_keeps():
    kv = KVCacheManager(16, BLOCK)
    kv.allocate_slots("a", 0, 2 + 7)                   # the prompt and 7 drafts: three blocks
    taken(kv)
    kv.trim("a", 5)                                    # 3 drafts accepted: two blocks kept
    assert taken(kv) == ({}, {}, {"a": 2})
    kv.trim("a", 5)                                    # nothing dropped: nothing logged
    assert taken(kv) == ({}, {}, {})


def test_a_freed_table_forgets_its_logged_changes():
    kv = KVCacheManager(16, BLOCK)
    kv.allocate_slots("a", 0, 4)
    kv.allocate_slots("a", 4, 5)
    kv.trim("a", 5)
    kv.free("a")                                       # preempted: it comes back admitted, in full
    kv.allocate_slots("a", 0, 9)
    assert taken(kv) == ({}, {}, {})


def test_the_contiguous_manager_logs_its_table_of_slots_growing_and_shrinking():
    kv = ContiguousKVManager(64, BLOCK, "max_model_len", 32)
    kv.allocate_slots("a", 0, 5)
    assert taken(kv) == ({}, {}, {})                   # a new region
    kv.allocate_slots("a", 5, 3)
    assert taken(kv) == ({"a": 5}, {}, {}) and len(kv.block_table("a")) == 8
    kv.trim("a", 6)
    assert taken(kv) == ({}, {}, {"a": 6}) and len(kv.block_table("a")) == 6
    kv.free("a")
    assert taken(kv) == ({}, {}, {})


def test_the_decision_carries_the_changes_made_since_the_last_one():
    """Blocks of 4, a prompt of 2: the decode at position 4 gets block 1 (appended from 1); a rollback made
    by the update before it is named in the next decision (truncated)."""
    kv = KVCacheManager(32, BLOCK)
    sched = ContinuousScheduler(EngineConfig(max_num_seqs=2, max_num_batched_tokens=64), kv, max_model_len=64)
    sched.add(Request("a", [1, 2], SamplingParams(max_tokens=10, ignore_eos=True), 0.0))
    named = []
    for now in (1.0, 2.0, 3.0, 4.0):
        out = sched.schedule(now)
        named.append((out.admitted, out.appended, out.replaced, out.truncated))
        sched.update_from_output(out, SampledTokens.of(out, {"a": (7,)}), now)
    assert named == [(["a"], {}, {}, {}), ([], {}, {}, {}), ([], {}, {}, {}), ([], {"a": 1}, {}, {})]
    kv.trim("a", 3)                                    # as a rejected draft's rollback would
    assert sched.schedule(5.0).truncated == {"a": 1}
