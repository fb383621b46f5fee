"""What a KV manager reports about its pool at one step, the same for the paged and contiguous layouts.

``snapshot(computed)`` returns a ``BlockMapSnapshot`` (who holds which block; the contiguous layout
adds its ``Region`` per request) and ``waste(computed, next_need)`` a ``KVWaste``. Both are frozen values
of plain Python: the engine puts the snapshot in ``StepEnd`` events and the waste's shares in
``StepStats``, so observers (widgets, ``kv.breakdown``) read them without reaching into the manager.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class KVLayout(str, enum.Enum):
    """How a KV manager lays out the cache. A ``str``, so it reads as text in widgets and JSON
    (``KVLayout.PAGED == "paged"``)."""

    PAGED = "paged"             # fixed-size blocks from a shared pool, a block table per request
    CONTIGUOUS = "contiguous"   # one reserved region of slots per request

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Region:
    """A contiguous reservation in the token-slot arena (contiguous KV layout)."""

    request_id: str
    start: int          # first slot of the region
    reserved: int       # slots reserved at admission
    used: int           # slots holding a computed K/V entry
    needed: int         # slots the request will have used when it finishes (prompt + output)


@dataclass(frozen=True)
class BlockMapSnapshot:
    """Who holds which part of the KV pool, per physical block (columnar, cheap to build).

    Paged layout: one entry per physical block. ``owner`` is the request that holds it (the first
    holder when shared), ``ref_cnt`` > 1 means shared, ``cached`` means it carries a prefix-cache
    hash (it may be free yet still reusable). Contiguous layout: the same per-block columns over the
    arena cut into ``block_size`` slots, plus ``regions``.
    """

    layout: KVLayout
    block_size: int
    num_blocks: int
    owner: tuple[str | None, ...]
    filled: tuple[int, ...]
    ref_cnt: tuple[int, ...]
    cached: tuple[bool, ...]
    block_tables: tuple[tuple[str, tuple[int, ...]], ...] = ()
    regions: tuple[Region, ...] = ()


@dataclass(frozen=True)
class KVWaste:
    """A KV pool's waste at one step, as fractions 0..1 (``kv.breakdown``).

    ``waste`` = 1 - filled / reserved-or-allocated slots; it splits into ``reserved_unused`` (slots a
    request will still fill) and ``internal`` (slots it never fills; paged: the tails of last blocks).
    ``external`` is a share of the whole pool: free, but no contiguous hole fits the next request.
    """

    waste: float = 0.0
    reserved_unused: float = 0.0
    internal: float = 0.0
    external: float = 0.0
