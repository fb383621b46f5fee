"""Lab 02 reference solution: a paged KV block allocator with a free list and reference counts."""

from __future__ import annotations

from collections import deque


class BlockAllocator:
    """Fixed-size KV blocks handed out from a FIFO free list, shared by reference counting.

    ``allocate`` takes the block at the front of the free list; a block whose count drops to 0
    goes to the back (vLLM's FreeKVCacheBlockQueue keeps the same order, so recently freed
    blocks, whose cached content may still be reused, are taken last).
    ``share`` is what prefix caching and fork do: one more sequence's block table points at the
    block (vLLM: ``touch``).
    """

    def __init__(self, num_blocks: int) -> None:
        self.free_block_ids = deque(range(num_blocks))
        self.ref_counts = [0] * num_blocks

    def allocate(self) -> int | None:
        if not self.free_block_ids:
            return None
        block_id = self.free_block_ids.popleft()
        self.ref_counts[block_id] = 1
        return block_id

    def share(self, block_id: int) -> None:
        self.ref_counts[block_id] += 1

    def free(self, block_id: int) -> None:
        self.ref_counts[block_id] -= 1
        if self.ref_counts[block_id] == 0:
            self.free_block_ids.append(block_id)

    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    def ref_count(self, block_id: int) -> int:
        return self.ref_counts[block_id]
