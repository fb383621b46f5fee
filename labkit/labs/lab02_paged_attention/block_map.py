"""Lab 02, section 2: a live block map of several requests decoding together, recorded step by step.

``record_block_map`` serves requests of different lengths on a small paged pool and keeps every
``StepEnd`` (its block-map snapshot is immutable, so keeping it is free). From the recording:

* blocks appear on demand: a request's table grows by one block when its last block fills;
* blocks land anywhere: a request's physical blocks need not be consecutive
  (``BlockMapRun.non_contiguous``);
* blocks return at finish and are handed to later requests (``BlockMapRun.reused``).

``BlockMapPlayer`` replays the recording into the real ``labkit.widgets.BlockMap`` through its own
event bus, so a learner can drag the map's step slider and click a block to see block tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.events import BlocksAllocated, BlocksFreed, EventBus, StepEnd
from labkit.kv.snapshot import BlockMapSnapshot
from labkit.sampling_params import SamplingParams


@dataclass(frozen=True)
class BlockMapRun:
    steps: tuple[StepEnd, ...]
    allocations: tuple[tuple[int, str, tuple[int, ...]], ...]    # (step, request, new blocks)
    frees: tuple[tuple[int, str, tuple[int, ...]], ...]          # (step, request, freed blocks)
    request_ids: tuple[str, ...]
    block_size: int

    @classmethod
    def from_steps(cls, steps: tuple[StepEnd, ...], block_size: int) -> "BlockMapRun":
        """A run known only by its ``StepEnd`` events (e.g. ``sharing.ForkRun.events``), for the player."""
        ids = tuple(dict.fromkeys(rid for event in steps for rid, _ in event.block_map.block_tables))
        return cls(tuple(steps), (), (), ids, block_size)

    def tables_at(self, index: int) -> dict[str, tuple[int, ...]]:
        return dict(self.steps[index].block_map.block_tables)

    def final_tables(self) -> dict[str, tuple[int, ...]]:
        """Each request's block table at its longest (the last step it held blocks)."""
        tables: dict[str, tuple[int, ...]] = {}
        for event in self.steps:
            tables.update(event.block_map.block_tables)
        return tables

    @property
    def non_contiguous(self) -> list[str]:
        """Requests whose physical blocks are not one consecutive run in table order."""
        return [rid for rid, table in self.final_tables().items() if not is_consecutive(table)]

    @property
    def on_demand(self) -> int:
        """Blocks allocated after a request's first allocation (its table grew while decoding)."""
        seen: set[str] = set()
        count = 0
        for _, rid, blocks in self.allocations:
            count += len(blocks) if rid in seen else 0
            seen.add(rid)
        return count

    @property
    def reused(self) -> int:
        """Allocations of a block that an earlier request had freed."""
        freed: set[int] = set()
        count = 0
        for step, kind, blocks in sorted([(s, 0, b) for s, _, b in self.frees] + [(s, 1, b) for s, _, b in self.allocations]):
            if kind == 0:
                freed.update(blocks)
            else:
                count += len(freed.intersection(blocks))
        return count

    @property
    def all_freed(self) -> bool:
        """After the last step no block has an owner (every request returned its blocks)."""
        return all(owner is None for owner in self.steps[-1].block_map.owner)

    def peak_index(self) -> int:
        """The recorded step with the highest KV usage (the first such), the block map's "peak"."""
        return max(range(len(self.steps)), key=lambda i: (self.steps[i].stats.kv_cache_usage_perc, -i))


def is_consecutive(table: tuple[int, ...]) -> bool:
    return all(b == a + 1 for a, b in zip(table, table[1:]))


def record_block_map(llm, prompts: list[list[int]], max_tokens: list[int], join_steps: list[int]) -> BlockMapRun:
    """Greedy requests join at ``join_steps`` (engine steps) and run to their ``max_tokens``."""
    engine = llm.engine
    steps, allocations, frees = [], [], []

    def on_event(event) -> None:
        if isinstance(event, StepEnd):
            steps.append(event)
        elif isinstance(event, BlocksAllocated):
            allocations.append((engine.step_count, event.request_id, event.block_ids))
        elif isinstance(event, BlocksFreed):
            frees.append((engine.step_count, event.request_id, event.block_ids))

    engine.hooks.subscribe(on_event, StepEnd, BlocksAllocated, BlocksFreed)
    pending, ids, step = sorted(zip(join_steps, range(len(prompts)))), [], 0
    try:
        while pending or engine.has_unfinished_requests():
            while pending and pending[0][0] <= step:
                i = pending.pop(0)[1]
                ids.append(engine.add_request(list(prompts[i]), SamplingParams(max_tokens=max_tokens[i],
                                                                               ignore_eos=True)))
            if engine.has_unfinished_requests():
                engine.step()
            step += 1
    finally:
        engine.hooks.unsubscribe(on_event)
    return BlockMapRun(tuple(steps), tuple(allocations), tuple(frees), tuple(ids), engine.config.block_size)


class BlockMapPlayer:
    """A recorded run in one ``BlockMap``: its own step slider, no second one, no engine.

    Every recorded ``StepEnd`` goes through a private event bus into the map's history, so the map's
    slider covers the whole run, reads the engine's step numbers (the same as the map's status line
    and ``block_tables_table``) and, the run being over, opens at its peak: the step with the highest
    KV usage (``BlockMapRun.peak_index``, the widget's one meaning of "peak"). The frames travel to the
    browser with it, so dragging redraws in the next animation frame. Clicking a cell pins its
    request and lists its block table; clicking a shared block lists every holder.
    """

    def __init__(self, run: BlockMapRun, start: int | None = None) -> None:
        from labkit.widgets import BlockMap

        if start is not None and not 0 <= start < len(run.steps):
            raise ValueError(f"start must be a recorded step index in [0, {len(run.steps) - 1}], got {start}")
        self.run, self.bus = run, EventBus()
        self.map = BlockMap(hooks=self.bus, max_history=max(2, len(run.steps)))
        for event in run.steps:
            self.bus.emit(event)
        self.map.flush()
        if start is not None:
            self.show(start)

    @property
    def index(self) -> int:
        """The recorded step index the map shows."""
        return self.map.cursor

    def show(self, index: int) -> BlockMapSnapshot:
        """Move the map's slider to recorded step ``index`` (as a drag does)."""
        event = self.run.steps[index]
        self.map.show_step(event.step)
        return event.block_map

    def _repr_mimebundle_(self, **kwargs):
        return self.map._repr_mimebundle_(**kwargs)
