"""Lab 02 reference solutions: slot mapping, a block allocator with copy-on-write, chained prefix hashes."""

from __future__ import annotations

from collections import deque


def slot_mapping(block_tables: list[list[int]], seq_ids: list[int], positions: list[int],
                 block_size: int) -> list[int]:
    """Physical slot of each token: token i is position ``positions[i]`` of sequence ``seq_ids[i]``.

        slot = block_table[pos // block_size] * block_size + pos % block_size

    The page-table walk of an OS (virtual page → frame, offset kept), with a block for a page and a
    token position for a virtual address (Kwon et al., SOSP'23, §4.2).
    """
    return [block_tables[s][p // block_size] * block_size + p % block_size
            for s, p in zip(seq_ids, positions)]


class BlockAllocator:
    """Fixed-size KV blocks handed out from a FIFO free list, shared by reference counting.

    ``allocate`` takes the block at the front of the free list; a block whose count drops to 0
    goes to the back (vLLM's FreeKVCacheBlockQueue keeps the same order, so recently freed
    blocks, whose cached content may still be reused, are taken last).
    ``share`` is what prefix caching and fork do: one more sequence's block table points at the
    block (vLLM: ``touch``). ``copy_on_write`` is called before a sequence writes into a block:
    a block only this sequence holds is written in place; a shared one is first copied, as an OS
    copies a page shared after ``fork()`` when one process writes to it.
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

    def copy_on_write(self, block_id: int) -> int | None:
        """The block to write into: ``block_id`` itself if unshared, else a fresh copy (or None
        when no block is free; the shared block is then left as it was)."""
        if self.ref_counts[block_id] == 1:
            return block_id
        new_id = self.allocate()
        if new_id is not None:
            self.free(block_id)
        return new_id

    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    def ref_count(self, block_id: int) -> int:
        return self.ref_counts[block_id]


def block_hashes(token_ids: list[int], block_size: int) -> list[int]:
    """Prefix-cache keys of the *full* blocks of ``token_ids``, each chained on its parent's key.

    Block i's key is ``hash((key of block i-1, tokens of block i))`` (None before block 0), so two
    prompts share block i's key only if they agree on every token up to the end of block i. A
    trailing partial block gets no key: it is still being filled.
    """
    hashes: list[int] = []
    for i in range(len(token_ids) // block_size):
        parent = hashes[-1] if hashes else None
        hashes.append(hash((parent, tuple(token_ids[i * block_size:(i + 1) * block_size]))))
    return hashes
