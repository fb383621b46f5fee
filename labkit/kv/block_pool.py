"""The pool of physical KV blocks: a free queue and a reference count per block.

Like an OS page allocator: a request's logical blocks map to any free physical blocks. A block with
``ref_cnt == 0`` sits in the free queue; if it still carries a prefix-cache hash it can be revived by
a later request with the same prefix until it is handed out again (then its hash is evicted).
Blocks are freed to the *tail* of the queue and taken from the *head*, so the least recently freed
cached block is evicted first (LRU).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class Block:
    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None   # set once the block is full and registered in the prefix cache


class BlockPool:
    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_queue: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.cached: dict[int, int] = {}   # block_hash -> block_id
        self.num_extra_refs = 0            # sum of (ref_cnt - 1) over held blocks: 0 means no sharing

    # -- allocation ---------------------------------------------------------------------------
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    def allocate(self, n: int) -> list[int]:
        """Take n blocks from the head of the free queue (evicting any cached hash they carry)."""
        if n > len(self.free_queue):
            raise RuntimeError(f"asked for {n} blocks with {len(self.free_queue)} free")
        ids = []
        for _ in range(n):
            block_id, _ = self.free_queue.popitem(last=False)
            block = self.blocks[block_id]
            self._evict_hash(block)
            block.ref_cnt = 1
            ids.append(block_id)
        return ids

    def share(self, block_ids: list[int]) -> None:
        """One more holder for each block (prefix hit, or a forked sequence)."""
        for block_id in block_ids:
            block = self.blocks[block_id]
            if block.ref_cnt == 0:
                del self.free_queue[block_id]   # revived from the free queue: a cache hit
            else:
                self.num_extra_refs += 1
            block.ref_cnt += 1

    def free(self, block_ids: list[int]) -> None:
        """Drop one holder from each block; blocks nobody holds return to the queue's tail."""
        for block_id in block_ids:
            block = self.blocks[block_id]
            if block.ref_cnt <= 0:
                raise RuntimeError(f"double free of block {block_id}")
            if block.ref_cnt > 1:
                self.num_extra_refs -= 1
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self.free_queue[block_id] = None

    # -- prefix cache -------------------------------------------------------------------------
    def lookup(self, block_hash: int) -> int | None:
        return self.cached.get(block_hash)

    def register(self, block_id: int, block_hash: int) -> None:
        block = self.blocks[block_id]
        if block.block_hash is None and block_hash not in self.cached:
            block.block_hash = block_hash
            self.cached[block_hash] = block_id

    def _evict_hash(self, block: Block) -> None:
        if block.block_hash is not None:
            if self.cached.get(block.block_hash) == block.block_id:
                del self.cached[block.block_hash]
            block.block_hash = None

    # -- checks -------------------------------------------------------------------------------
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_queue)

    def check_invariants(self) -> None:
        """Raise AssertionError if the pool is inconsistent (tests call this after every op)."""
        free = set(self.free_queue)
        assert len(free) == len(self.free_queue)
        for block in self.blocks:
            assert block.ref_cnt >= 0, f"negative ref count on block {block.block_id}"
            assert (block.ref_cnt == 0) == (block.block_id in free), f"block {block.block_id} misfiled"
        for block_hash, block_id in self.cached.items():
            assert self.blocks[block_id].block_hash == block_hash
        assert self.num_extra_refs == sum(max(0, b.ref_cnt - 1) for b in self.blocks)
