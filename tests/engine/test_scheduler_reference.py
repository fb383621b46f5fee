"""The reference scheduler (``scheduler/reference.py``, what lab 03 shows) and the fast one the engine runs
(``ContinuousScheduler``) are twins: held equal on the random traces of ``test_scheduler_random.py``.

- Decision for decision: at every step the reference decides from a copy of the fast scheduler's state
  (requests, queues, KV manager); both decisions are equal column by column (the named block-table
  changes included), and so is the state each leaves behind (what is in flight, the queues, the block
  tables, the pool).
- Token for token: the engine run by the reference scheduler alone matches the oracle (``expected_output``),
  frees everything and reads back exactly its own K/V through the shadow cache.
- The fast scheduler's columns are whole at every write (no column is ever behind the others).
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import replace
from unittest import mock

from hypothesis import given, settings

from labkit.scheduler import continuous, reference
from labkit.scheduler.reference import ReferenceScheduler
from labkit.scheduler_output import SchedulerOutput
from tests.engine.test_scheduler_random import SETTINGS, check_trace, traces


class CheckedOutput(SchedulerOutput):
    """A decision that checks, after each write, that every column has one entry per row."""

    def add_row(self, *args, **kwargs) -> None:
        super().add_row(*args, **kwargs)
        self._check_whole()

    def add_decode_rows(self, *args) -> None:
        super().add_decode_rows(*args)
        self._check_whole()

    def _check_whole(self) -> None:
        n = len(self.request_ids)
        lengths = [len(self.starts), len(self.num_tokens), len(self.block_tables), len(self.num_logits),
                   len(self.kinds)]
        assert lengths == [n] * 5 and len(self.token_ids) == sum(self.num_tokens), (n, lengths)


def state(scheduler) -> tuple:
    """What a decision leaves behind: each request's counters, the queues, the KV manager's tables."""
    reqs = tuple((r.request_id, r.status, r.num_computed_tokens, r.num_inflight_tokens, r.num_output_placeholders,
                  tuple(r.spec_token_ids), r.num_preemptions, r.first_scheduled_time)
                 for r in scheduler.requests.values())
    kv = scheduler.kv
    tables = getattr(kv, "block_tables", None)
    layout = tables if tables is not None else {rid: kv.block_table(rid) for rid in kv.regions}
    free = kv.pool.num_free_blocks() if hasattr(kv, "pool") else None
    return (reqs, [r.request_id for r in scheduler.running], [r.request_id for r in scheduler.waiting],
            layout, free, scheduler.num_preemptions)


def in_lockstep(compared: list) -> callable:
    """A ``prepare`` for ``check_trace``: before each fast decision the reference decides from a copy of the
    same state; both decisions, and the states they leave, must be equal. Appends each decision to ``compared``."""

    def prepare(engine) -> None:
        fast = engine.scheduler
        assert type(fast) is continuous.ContinuousScheduler
        decide = fast.schedule

        def schedule(now: float) -> SchedulerOutput:
            twin = ReferenceScheduler.__new__(ReferenceScheduler)
            twin.__dict__ = copy.deepcopy({k: v for k, v in vars(fast).items() if k != "schedule"})
            want = twin.schedule(now)
            got = decide(now)
            assert got == want          # every field, the named block-table changes included
            assert state(fast) == state(twin)
            compared.append(got)
            return got

        fast.schedule = schedule

    return prepare


def checked_columns():
    """Both schedulers write ``CheckedOutput`` decisions while this is active."""
    return mock.patch.multiple(continuous, SchedulerOutput=CheckedOutput), \
        mock.patch.multiple(reference, SchedulerOutput=CheckedOutput)


def run_by_the_reference(engine) -> None:
    engine.scheduler = ReferenceScheduler(engine.config, engine.kv, engine.max_model_len)
    engine.runner.requests = engine.requests          # the shadow runner reads the requests it checks


def continuous_traces(async_only: bool = False):
    return traces(async_only=async_only).map(lambda t: replace(t, config=replace(t.config, scheduler="continuous")))


@settings(max_examples=15, **SETTINGS)
@given(continuous_traces())
def test_the_fast_and_reference_schedulers_decide_alike_at_every_step(trace):
    compared: list = []
    patch_fast, patch_reference = checked_columns()
    with patch_fast, patch_reference:
        run = check_trace(trace, prepare=in_lockstep(compared))
    assert len(compared) == run.steps and all(type(d) is CheckedOutput for d in compared)


@settings(max_examples=10, **SETTINGS)
@given(continuous_traces(async_only=True))
def test_with_async_scheduling_the_twins_decide_alike_at_every_step(trace):
    compared: list = []
    patch_fast, patch_reference = checked_columns()
    with patch_fast, patch_reference:
        run = check_trace(trace, prepare=in_lockstep(compared))
    assert len(compared) == run.steps


@settings(max_examples=20, **SETTINGS)
@given(continuous_traces())
def test_the_reference_scheduler_alone_matches_the_oracle(trace):
    run = check_trace(trace, prepare=run_by_the_reference)
    assert type(run.llm.engine.scheduler) is ReferenceScheduler


def test_the_reference_is_one_screen_with_one_path():
    source = inspect.getsource(ReferenceScheduler.schedule)
    assert len(source.splitlines()) <= 60
    assert "add_decode_rows" not in source and "decode_table" not in source
    assert reference.ReferenceScheduler.__mro__[1] is continuous.ContinuousScheduler
