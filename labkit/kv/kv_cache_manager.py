"""Paged KV cache manager: each request's block table over the shared block pool.

A request's token at position p lives in physical block ``block_table[p // block_size]`` at offset
``p % block_size``. Allocation is on demand, one block at a time as the request grows, so a request
wastes at most the unfilled tail of its last block (Kwon et al., SOSP'23, §4.2).

    logical blocks   [ 0 ][ 1 ][ 2 ]          block_table = [7, 2, 9]
    physical blocks   7    2    9 (partly filled)

Sharing: prefix-cache hits and forked sequences (``n > 1``) point at the same physical block and
raise its ``ref_cnt``; writing into a shared partly-filled block first copies it (copy-on-write).
"""

from __future__ import annotations

from itertools import repeat

from labkit.kv import slots
from labkit.kv.block_pool import BlockPool
from labkit.kv.snapshot import BlockMapSnapshot, KVLayout, KVWaste
from labkit.kv.table_changes import TableChanges, TableLog


def hash_block(parent_hash: int | None, token_ids: tuple[int, ...]) -> int:
    """A full block's identity depends on every token before it: chain on the parent's hash."""
    return hash((parent_hash, token_ids))


class KVCacheManager:
    layout = KVLayout.PAGED

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False):
        self.block_size = block_size
        self.pool = BlockPool(num_blocks)
        self.enable_prefix_caching = enable_prefix_caching
        self.block_tables: dict[str, list[int]] = {}
        self.num_cached_blocks: dict[str, int] = {}   # leading blocks already registered
        self.block_hashes: dict[str, list[int]] = {}
        self.pending_copies: list[tuple[int, int]] = []   # (src, dst) block copies for the runner
        self.table_log = TableLog()                       # what changed in existing tables, for the runner
        self.prefix_queries = 0
        self.prefix_hits = 0

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def meta_block_size(self) -> int:
        return self.block_size

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def can_ever_fit(self, num_tokens: int) -> bool:
        return self.blocks_needed(num_tokens) <= self.pool.num_blocks

    def capacity_tokens(self) -> int:
        return self.pool.num_blocks * self.block_size

    # -- prefix cache -------------------------------------------------------------------------
    def get_computed_blocks(self, request_id: str, token_ids: list[int]) -> tuple[list[int], int]:
        """Longest run of cached full blocks of this prompt. At least the last token is always
        recomputed (its logits are needed), so hits stop before the block holding it."""
        if not self.enable_prefix_caching:
            return [], 0
        hashes = self._hashes(request_id, token_ids, (len(token_ids) - 1) // self.block_size)
        hits = []
        for h in hashes:
            block_id = self.pool.lookup(h)
            if block_id is None:
                break
            hits.append(block_id)
        return hits, len(hits) * self.block_size

    def record_prefix_lookup(self, num_tokens: int, num_hit_tokens: int) -> None:
        """Count a lookup once the request is admitted (a failed admission is retried)."""
        if not self.enable_prefix_caching:
            return
        self.prefix_queries += num_tokens
        self.prefix_hits += num_hit_tokens

    def _hashes(self, request_id: str, token_ids: list[int], num_full: int) -> list[int]:
        hashes = self.block_hashes.setdefault(request_id, [])
        bs = self.block_size
        while len(hashes) < num_full:
            i = len(hashes)
            hashes.append(hash_block(hashes[-1] if hashes else None, tuple(token_ids[i * bs:(i + 1) * bs])))
        return hashes[:num_full]

    def cache_blocks(self, request_id: str, token_ids: list[int], num_computed_tokens: int) -> None:
        """Register the request's newly *full and computed* blocks so later prompts can reuse them."""
        if not self.enable_prefix_caching:
            return
        num_full = num_computed_tokens // self.block_size
        start = self.num_cached_blocks.get(request_id, 0)
        if num_full <= start:
            return
        hashes = self._hashes(request_id, token_ids, num_full)
        table = self.block_tables[request_id]
        for i in range(start, num_full):
            self.pool.register(table[i], hashes[i])
        self.num_cached_blocks[request_id] = num_full

    # -- allocation ---------------------------------------------------------------------------
    def allocate_slots(self, request_id: str, num_computed_tokens: int, num_new_tokens: int,
                       computed_blocks: list[int] | None = None, num_reserve_tokens: int = 0
                       ) -> list[int] | None:
        """Make room for ``num_new_tokens`` after ``num_computed_tokens``. Returns the newly
        allocated block ids, or None (and changes nothing) if the pool cannot supply them.
        ``num_reserve_tokens`` is ignored here: paged allocation never reserves ahead."""
        table = self.block_tables.get(request_id, [])
        if not computed_blocks and num_computed_tokens + num_new_tokens <= len(table) * self.block_size \
                and (not self.pool.num_extra_refs or not self._needs_copy(table, num_computed_tokens)):
            return []          # most decode steps: room left in the last block, nothing shared
        computed_blocks = computed_blocks or []
        need = self.blocks_needed(num_computed_tokens + num_new_tokens) - len(table) - len(computed_blocks)
        cow = self._needs_copy(table, num_computed_tokens)
        if need + cow > self.pool.num_free_blocks() - (self._revived(computed_blocks) if computed_blocks else 0):
            return None
        old_len = len(table) if request_id in self.block_tables else None    # None: a new table, not logged
        if computed_blocks:
            self.pool.share(computed_blocks)
            table = table + computed_blocks
            self.num_cached_blocks[request_id] = len(table)
        new = self.pool.allocate(max(need, 0))
        if cow:             # on a copy: a table handed out (a step in flight may read it) never changes
            table = list(table)
            index = num_computed_tokens // self.block_size
            new += self._copy_on_write(table, index)
            if old_len is not None:
                self.table_log.replace(request_id, index)
        table = self.block_tables[request_id] = table + new[:max(need, 0)]
        if old_len is not None and len(table) > old_len:
            self.table_log.append(request_id, old_len)
        return new

    def decode_table(self, request_id: str, position: int) -> list[int] | None:
        """The request's table when the token at ``position`` already has a slot of its own (room left in
        its last block, nothing shared): then ``allocate_slots(rid, position, 1)`` would allocate nothing.
        None otherwise (ask ``allocate_slots``). The common decode row's whole allocation check."""
        table = self.block_tables.get(request_id)
        if table is not None and position < len(table) * self.block_size and not self.pool.num_extra_refs:
            return table
        return None

    def _revived(self, blocks: list[int]) -> int:
        """Hit blocks that currently sit in the free queue stop being free when shared."""
        return sum(1 for b in blocks if self.pool.blocks[b].ref_cnt == 0)

    def _needs_copy(self, table: list[int], num_computed_tokens: int) -> int:
        index = num_computed_tokens // self.block_size
        return int(index < len(table) and self.pool.blocks[table[index]].ref_cnt > 1)

    def _copy_on_write(self, table: list[int], index: int) -> list[int]:
        src = table[index]
        (dst,) = self.pool.allocate(1)
        self.pool.free([src])
        table[index] = dst
        self.pending_copies.append((src, dst))
        return [dst]

    def fork(self, parent_id: str, child_id: str) -> None:
        """The child shares every block of the parent (parallel sampling, n > 1)."""
        table = list(self.block_tables[parent_id])
        self.pool.share(table)
        self.block_tables[child_id] = table
        self.num_cached_blocks[child_id] = self.num_cached_blocks.get(parent_id, 0)
        self.block_hashes[child_id] = list(self.block_hashes.get(parent_id, []))

    def trim(self, request_id: str, num_computed_tokens: int) -> list[int]:
        """Speculative rollback: release blocks that hold no accepted token any more (tail first).

        A rollback drops rejected drafts only, and those never reach a block registered in the prefix
        cache (``cache_blocks`` counts tokens after verification): rolling back into one would leave its
        hash on K/V about to be overwritten, so it is refused. A request with no table (the draft
        model's manager, before its first draft) has nothing to release."""
        if num_computed_tokens < self.num_cached_blocks.get(request_id, 0) * self.block_size:
            raise ValueError(f"trim({request_id!r}, {num_computed_tokens}) would roll back into "
                             f"{self.num_cached_blocks[request_id]} blocks registered in the prefix cache")
        table = self.block_tables.get(request_id, [])
        keep = self.blocks_needed(num_computed_tokens)
        dropped = table[keep:]
        if dropped:
            self.pool.free(list(reversed(dropped)))
            self.block_tables[request_id] = table[:keep]     # a new list, as every change (see block_table)
            self.table_log.truncate(request_id, keep)
        return dropped

    def free(self, request_id: str) -> list[int]:
        """Release all of a request's blocks, tail first (so its prefix stays cached longest)."""
        table = self.block_tables.pop(request_id, [])
        self.pool.free(list(reversed(table)))
        self.num_cached_blocks.pop(request_id, None)
        self.block_hashes.pop(request_id, None)
        self.table_log.forget(request_id)
        return table

    def take_pending_copies(self) -> list[tuple[int, int]]:
        copies, self.pending_copies = self.pending_copies, []
        return copies

    def take_table_changes(self) -> TableChanges:
        """How existing tables changed since the last call (appended, replaced, truncated: ``kv.table_changes``)."""
        return self.table_log.take()

    # -- what the runner needs ------------------------------------------------------------------
    def block_table(self, request_id: str) -> list[int]:
        """The request's table. Never changed in place once handed out (growing, copy-on-write and
        trimming each store a new list), so a step in flight can keep reading it while the next one is
        planned (async scheduling) without a copy per row."""
        return self.block_tables[request_id]

    def slot_mapping(self, request_id: str, start: int, end: int) -> list[int]:
        """The K/V slots of the request's tokens ``start:end`` (``kv.slots``)."""
        return slots.slot_mapping(self.block_tables[request_id], start, end, self.block_size)

    # -- what observers see --------------------------------------------------------------------
    def usage(self) -> float:
        return self.pool.num_used_blocks() / self.pool.num_blocks

    def filled_per_block(self, num_computed: dict[str, int]) -> list[int]:
        """Token slots holding a computed K/V entry, per physical block (max over sharers)."""
        filled = [0] * self.pool.num_blocks
        bs = self.block_size
        for rid, table in self.block_tables.items():
            n = num_computed.get(rid, 0)
            for j, block_id in enumerate(table):
                f = min(bs, max(0, n - j * bs))
                if f > filled[block_id]:
                    filled[block_id] = f
        return filled

    def waste(self, num_computed: dict[str, int], next_waiting_need: int = 0) -> KVWaste:
        """Share of allocated token slots that hold no computed K/V (paged: the blocks' tails)."""
        allocated = self.pool.num_used_blocks() * self.block_size
        if self.pool.num_extra_refs == 0:   # no sharing: each request's filled slots are its own
            # sum over requests of min(computed, len(table) * block_size), every step: iterated in C (map)
            tables, get = self.block_tables, num_computed.get
            filled = sum(map(min, map(get, tables, repeat(0)), map(self.block_size.__mul__, map(len, tables.values()))))
        else:
            filled = sum(self.filled_per_block(num_computed))
        waste = 1.0 - filled / allocated if allocated else 0.0
        return KVWaste(waste=waste, internal=waste)

    def snapshot(self, num_computed: dict[str, int]) -> BlockMapSnapshot:
        owner: list[str | None] = [None] * self.pool.num_blocks
        for rid, table in self.block_tables.items():
            for block_id in table:
                if owner[block_id] is None:
                    owner[block_id] = rid
        blocks = self.pool.blocks
        return BlockMapSnapshot(
            layout=KVLayout.PAGED, block_size=self.block_size, num_blocks=self.pool.num_blocks,
            owner=tuple(owner), filled=tuple(self.filled_per_block(num_computed)),
            ref_cnt=tuple(b.ref_cnt for b in blocks), cached=tuple(b.block_hash is not None for b in blocks),
            block_tables=tuple((rid, tuple(t)) for rid, t in self.block_tables.items()))

    def check_invariants(self) -> None:
        self.pool.check_invariants()
        counts = [0] * self.pool.num_blocks
        for table in self.block_tables.values():
            for block_id in table:
                counts[block_id] += 1
        for block in self.pool.blocks:
            assert counts[block.block_id] == block.ref_cnt, (
                f"block {block.block_id}: ref_cnt {block.ref_cnt} but {counts[block.block_id]} tables hold it")
