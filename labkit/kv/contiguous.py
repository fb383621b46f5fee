"""The pre-PagedAttention baseline: one contiguous region of token slots per request.

The pool (same bytes as the paged one) is an arena of token slots. At admission a request reserves
a region big enough for the longest it could become — ``max_model_len`` slots (FasterTransformer /
Orca-Max style) or ``prompt + max_tokens`` — placed first-fit. Nothing moves afterwards, so three
kinds of waste appear (Kwon et al., SOSP'23, Fig. 2)::

    arena  |AAAAAAaaaa......|BBBbb.......|     free hole     |CCCCCCCCcc..|  free  |
            used  │   └ internal fragmentation (never filled)      └ reserved for later
                  └ reserved for later (will be filled)      external fragmentation: holes too
                                                             small for the next request

A waiting request waits when no single hole fits its reservation, even if enough is free in total.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.kv.snapshot import BlockMapSnapshot, KVLayout, KVWaste, Region
from labkit.kv.table_changes import TableChanges, TableLog


@dataclass
class _Region:
    start: int
    reserved: int
    needed: int          # prompt + max_tokens (capped): slots the request can ever fill
    high_water: int = 0  # slots covered by computed or scheduled tokens


class ContiguousKVManager:
    layout = KVLayout.CONTIGUOUS
    meta_block_size = 1          # attention addresses single slots: a "block table" of slot indices
    enable_prefix_caching = False
    prefix_queries = prefix_hits = 0

    def __init__(self, num_slots: int, block_size: int, reserve: str, max_model_len: int):
        self.num_slots, self.block_size = num_slots, block_size
        self.reserve, self.max_model_len = reserve, max_model_len
        self.regions: dict[str, _Region] = {}
        self.table_log = TableLog()      # a region's table of slots grows and shrinks with high_water

    # -- sizing ------------------------------------------------------------------------------
    def reserve_size(self, needed: int) -> int:
        return self.max_model_len if self.reserve == "max_model_len" else needed

    def can_ever_fit(self, num_tokens: int) -> bool:
        return self.reserve_size(num_tokens) <= self.num_slots

    def capacity_tokens(self) -> int:
        return self.num_slots

    # -- first fit ---------------------------------------------------------------------------
    def holes(self) -> list[tuple[int, int]]:
        """Free (start, length) gaps between reserved regions, in address order."""
        gaps, cursor = [], 0
        for r in sorted(self.regions.values(), key=lambda r: r.start):
            if r.start > cursor:
                gaps.append((cursor, r.start - cursor))
            cursor = r.start + r.reserved
        if cursor < self.num_slots:
            gaps.append((cursor, self.num_slots - cursor))
        return gaps

    def first_fit(self, size: int) -> int | None:
        return next((start for start, length in self.holes() if length >= size), None)

    # -- the KV-manager interface the scheduler and runner use ------------------------------------
    def get_computed_blocks(self, request_id: str, token_ids: list[int]) -> tuple[list[int], int]:
        return [], 0

    def record_prefix_lookup(self, num_tokens: int, num_hit_tokens: int) -> None:
        pass

    def cache_blocks(self, request_id: str, token_ids: list[int], num_computed_tokens: int) -> None:
        pass

    def allocate_slots(self, request_id: str, num_computed_tokens: int, num_new_tokens: int,
                       computed_blocks: list[int] | None = None, num_reserve_tokens: int = 0
                       ) -> list[int] | None:
        """Reserve the whole region on the first call; later calls only check it still fits."""
        end = num_computed_tokens + num_new_tokens
        region = self.regions.get(request_id)
        if region is None:
            needed = max(num_reserve_tokens, end)
            size = self.reserve_size(needed)
            start = self.first_fit(size)
            if start is None:
                return None
            region = self.regions[request_id] = _Region(start, size, min(needed, size))
            region.high_water = end
            return self._blocks_of(region)
        if end > region.reserved:
            return None
        if end > region.high_water:
            self.table_log.append(request_id, region.high_water)
            region.high_water = end
        return []

    def _blocks_of(self, region: _Region) -> list[int]:
        bs = self.block_size
        return list(range(region.start // bs, (region.start + region.reserved - 1) // bs + 1))

    def free(self, request_id: str) -> list[int]:
        region = self.regions.pop(request_id, None)
        self.table_log.forget(request_id)
        return self._blocks_of(region) if region else []

    def trim(self, request_id: str, num_computed_tokens: int) -> list[int]:
        region = self.regions.get(request_id)
        if region and num_computed_tokens < region.high_water:
            region.high_water = num_computed_tokens
            self.table_log.truncate(request_id, num_computed_tokens)
        return []   # a contiguous region never shrinks (its table of slots does)

    def fork(self, parent_id: str, child_id: str) -> None:
        raise ValueError("parallel sampling (n > 1) shares blocks and needs kv_cache='paged'")

    def decode_table(self, request_id: str, position: int) -> None:
        """No shortcut: a contiguous region's table grows with every token (``allocate_slots``)."""
        return None

    def take_pending_copies(self) -> list[tuple[int, int]]:
        return []

    def take_table_changes(self) -> TableChanges:
        return self.table_log.take()

    def block_table(self, request_id: str) -> list[int]:
        region = self.regions[request_id]
        return list(range(region.start, region.start + region.high_water))

    def slot_mapping(self, request_id: str, start: int, end: int) -> list[int]:
        base = self.regions[request_id].start
        return list(range(base + start, base + end))

    # -- what observers see ----------------------------------------------------------------------
    def usage(self) -> float:
        return sum(r.reserved for r in self.regions.values()) / self.num_slots

    def waste(self, num_computed: dict[str, int], next_waiting_need: int = 0) -> KVWaste:
        """Waste split as shares of reserved slots; external fragmentation as a share of the pool."""
        reserved = sum(r.reserved for r in self.regions.values())
        used = {rid: min(num_computed.get(rid, 0), r.reserved) for rid, r in self.regions.items()}
        later = sum(max(0, r.needed - used[rid]) for rid, r in self.regions.items())
        internal = sum(r.reserved - r.needed for r in self.regions.values())
        filled = sum(used.values())
        external = 0.0
        if next_waiting_need:
            size = self.reserve_size(next_waiting_need)
            holes = self.holes()
            free = sum(length for _, length in holes)
            # free >= size >= 1 means at least one hole, so max() has something to compare.
            if free >= size and max(length for _, length in holes) < size:
                external = free / self.num_slots
        if not reserved:
            return KVWaste(external=external)
        return KVWaste(1.0 - filled / reserved, later / reserved, internal / reserved, external)

    def snapshot(self, num_computed: dict[str, int]) -> BlockMapSnapshot:
        bs = self.block_size
        n = -(-self.num_slots // bs)
        owner: list[str | None] = [None] * n
        filled = [0] * n
        regions = []
        for rid, r in sorted(self.regions.items(), key=lambda kv: kv[1].start):
            used = min(num_computed.get(rid, 0), r.reserved)
            regions.append(Region(rid, r.start, r.reserved, used, r.needed))
            for b in range(r.start // bs, (r.start + r.reserved - 1) // bs + 1):
                owner[b] = owner[b] or rid
            for b in range(r.start // bs, (r.start + used - 1) // bs + 1 if used else 0):
                filled[b] += min(r.start + used, (b + 1) * bs) - max(r.start, b * bs)
        return BlockMapSnapshot(
            layout=KVLayout.CONTIGUOUS, block_size=bs, num_blocks=n, owner=tuple(owner), filled=tuple(filled),
            ref_cnt=tuple(int(o is not None) for o in owner), cached=(False,) * n, regions=tuple(regions))

    def check_invariants(self) -> None:
        spans = sorted((r.start, r.start + r.reserved) for r in self.regions.values())
        for (a0, a1), (b0, _) in zip(spans, spans[1:]):
            assert a1 <= b0, f"regions overlap: [{a0}, {a1}) and [{b0}, ...)"
        assert all(0 <= s and e <= self.num_slots for s, e in spans), "region outside the arena"
