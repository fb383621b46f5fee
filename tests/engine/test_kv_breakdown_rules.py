"""``labkit.kv.breakdown`` and its recorder (``labkit.metrics.BreakdownRecorder``) from their definitions, on constructed block maps with exact expected values.

pool = used + reserved_later + internal + external + free, in slots; contiguous: from each region
(used, needed - used, reserved - needed); paged: the filled slots, nothing reserved ahead, and the
unfilled tail of every held block; external = kv_external_frag_perc of the pool. The recorder averages
each step's shares (in % of the pool) over the steps it saw, and counts only ``StepEnd``.
"""

from __future__ import annotations

import pytest

from labkit.events import EventBus, Preempted, StepEnd, StepStats
from labkit.kv.breakdown import PARTS, PoolBreakdown, snapshot_slots
from labkit.kv.snapshot import BlockMapSnapshot, KVLayout, Region
from labkit.metrics import BreakdownRecorder


def stats(external_perc: float = 0.0, running: int = 0) -> StepStats:
    return StepStats(step=0, num_requests_running=running, num_requests_waiting=0, num_scheduled_tokens=0,
                     kv_cache_usage_perc=0.0, kv_waste_perc=0.0, kv_reserved_unused_perc=0.0,
                     kv_internal_frag_perc=0.0, kv_external_frag_perc=external_perc, batch_occupancy_perc=0.0,
                     token_budget_perc=0.0, num_preemptions=0, host_s=0.0, model_s=0.0, step_s=0.0)


def paged(owner, filled, block_size: int = 4) -> BlockMapSnapshot:
    n = len(owner)
    return BlockMapSnapshot(KVLayout.PAGED, block_size, n, tuple(owner), tuple(filled), (1,) * n, (False,) * n)


def contiguous(regions, num_blocks: int = 10, block_size: int = 4) -> BlockMapSnapshot:
    n = num_blocks
    return BlockMapSnapshot(KVLayout.CONTIGUOUS, block_size, n, (None,) * n, (0,) * n, (0,) * n, (False,) * n,
                            regions=tuple(regions))


def test_paged_slots_count_filled_slots_and_the_unfilled_tail_of_each_held_block():
    # 5 blocks of 4 slots: a holds 2 blocks (4 + 1 filled), b holds 1 (3 filled), 2 blocks free.
    snap = paged(["a", "a", None, "b", None], [4, 1, 0, 3, 0])
    assert snapshot_slots(snap, 0.0) == {"used": 8, "reserved_later": 0, "internal": 4, "external": 0.0,
                                             "free": 8.0}


def test_a_block_just_allocated_counts_wholly_as_internal_waste():
    snap = paged(["a", "a", None], [4, 0, 0])          # a's second block: reserved, nothing written yet
    assert snapshot_slots(snap, 0.0) == {"used": 4, "reserved_later": 0, "internal": 4, "external": 0.0,
                                             "free": 4.0}


def test_contiguous_slots_split_each_region_into_used_still_needed_and_never_needed():
    # 40 slots. a: reserved 12, will need 10, holds 6. b: reserved 8, needs 8, holds 8 (no waste at all).
    regions = [Region("a", 0, 12, 6, 10), Region("b", 20, 8, 8, 8)]
    got = snapshot_slots(contiguous(regions), 25.0)
    assert got == {"used": 14, "reserved_later": 4, "internal": 2, "external": 10.0, "free": 10.0}
    assert sum(got.values()) == 40


def test_external_fragmentation_is_a_share_of_the_whole_pool_in_percent():
    # 1% of a 400-slot pool is 4 slots (not 0.04, not 400).
    snap = contiguous([], num_blocks=100, block_size=4)
    assert snapshot_slots(snap, 1.0)["external"] == pytest.approx(4.0)
    assert snapshot_slots(snap, 1.0)["free"] == pytest.approx(396.0)


def test_a_region_exactly_at_its_need_and_reservation_wastes_nothing():
    got = snapshot_slots(contiguous([Region("a", 0, 40, 40, 40)]), 0.0)
    assert got == {"used": 40, "reserved_later": 0, "internal": 0, "external": 0.0, "free": 0.0}


def test_pool_breakdown_wasted_and_waste_of_reserved_from_their_definitions():
    b = PoolBreakdown(used=50.0, reserved_later=10.0, internal=15.0, external=5.0, free=20.0)
    assert b.wasted == 30.0                                 # 10 + 15 + 5
    assert b.waste_of_reserved == pytest.approx(100.0 * 25.0 / 75.0)
    assert b.as_dict() == {"used": 50.0, "reserved_later": 10.0, "internal": 15.0, "external": 5.0, "free": 20.0}
    empty = PoolBreakdown(used=0.0, reserved_later=0.0, internal=0.0, external=40.0, free=60.0)
    assert empty.waste_of_reserved == 0.0                   # nothing reserved: no share to take
    only_used = PoolBreakdown(used=30.0, reserved_later=0.0, internal=0.0, external=0.0, free=70.0)
    assert only_used.waste_of_reserved == 0.0


def engine_with(bus: EventBus):
    return type("Engine", (), {"hooks": bus})()


def emit_step(bus: EventBus, snap: BlockMapSnapshot, st: StepStats, step: int = 0) -> None:
    bus.emit(StepEnd(step, st, snap, ()))


def test_the_recorder_averages_each_steps_shares_over_the_steps_it_saw():
    bus = EventBus()
    rec = BreakdownRecorder(engine_with(bus))
    bus.emit(Preempted("a", 4))                           # not a step: not counted, not even looked at
    # Step 1: 8 slots, 4 used, 4 free. Step 2: 8 slots, 8 used.
    emit_step(bus, paged(["a", None], [4, 0]), stats(running=1))
    assert rec.breakdown() == PoolBreakdown(used=50.0, reserved_later=0.0, internal=0.0, external=0.0, free=50.0)
    emit_step(bus, paged(["a", "b"], [4, 4]), stats(running=3), step=1)
    assert rec.num_steps == 2 and rec.running_sum == 4 and bus.errors == []
    assert rec.breakdown() == PoolBreakdown(used=75.0, reserved_later=0.0, internal=0.0, external=0.0, free=25.0)
    rec.detach()
    emit_step(bus, paged(["a", "b"], [0, 0]), stats())
    assert rec.num_steps == 2                             # detached: no longer listening


def test_a_recorder_that_saw_no_step_reports_zeros():
    bus = EventBus()
    rec = BreakdownRecorder(engine_with(bus))
    assert rec.breakdown() == PoolBreakdown(**dict.fromkeys(PARTS, 0.0))
