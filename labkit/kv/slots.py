"""Where a token's K/V lives in a paged cache: one formula, used by everyone who needs a slot.

    position p  ->  block  block_table[p // block_size],  offset  p % block_size
    slot        =   block_table[p // block_size] * block_size + p % block_size

``block_size`` is the layout's (the KV manager's ``meta_block_size``). ``slot_mapping_rows`` is the same
formula over numpy arrays, for the persistent input batch's per-request table.
"""

from __future__ import annotations

from collections.abc import Sequence


def slot(block_table: Sequence[int], position: int, block_size: int) -> int:
    """The K/V slot of the token at ``position``."""
    return block_table[position // block_size] * block_size + position % block_size


def slot_mapping(block_table: Sequence[int], start: int, end: int, block_size: int) -> list[int]:
    """The K/V slots of the tokens at positions ``start:end``."""
    return [block_table[p // block_size] * block_size + p % block_size for p in range(start, end)]


def slot_mapping_rows(block_tables, rows, positions, block_size: int):
    """``slot`` for many tokens at once (numpy): token i sits at ``positions[i]`` of the request whose table is
    row ``rows[i]`` of ``block_tables`` (a 2-D array, one padded table per row). Returns int64 slots."""
    return block_tables[rows, positions // block_size].astype("int64") * block_size + positions % block_size
