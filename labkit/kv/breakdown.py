"""Where a KV pool's slots go, step by step: the split every lab that compares layouts measures.

Every step the KV pool splits into five parts (shares of the pool)::

    pool = used            slots holding a computed K/V entry
         + reserved_later  reserved, and the request will fill them before it ends
         + internal        reserved, and the request will never fill them (reservation > need;
                           paged: the unfilled tail of each request's last block)
         + external        free, enough in total for the next waiting request, but no contiguous
                           hole is big enough (the engine's kv_external_frag_perc)
         + free            the rest of the free slots

The paper measures the same split on real servers (Kwon et al., SOSP'23, Fig. 2): in Orca with
max-length reservation only 20.4% of KV memory held token states, in vLLM 96.3%. ``PoolBreakdown``
is the step-average of this split; ``labkit.metrics.BreakdownRecorder`` measures it from ``StepEnd`` events
(the block-map snapshot and the step's stats). This module reads values only: it imports no events.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from labkit.kv.snapshot import BlockMapSnapshot, KVLayout

PARTS = ("used", "reserved_later", "internal", "external", "free")


@dataclass(frozen=True)
class PoolBreakdown:
    """Shares of the KV pool in % (they sum to 100), averaged over steps."""

    used: float
    reserved_later: float
    internal: float
    external: float
    free: float

    @property
    def wasted(self) -> float:
        """Reserved or stranded but holding nothing: reserved_later + internal + external."""
        return self.reserved_later + self.internal + self.external

    @property
    def waste_of_reserved(self) -> float:
        """kv_waste_perc: the share of reserved slots not holding K/V."""
        reserved = self.used + self.reserved_later + self.internal
        return 100.0 * (self.reserved_later + self.internal) / reserved if reserved else 0.0

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def snapshot_slots(snapshot: BlockMapSnapshot, external_frag_perc: float) -> dict[str, float]:
    """One step's split in slots. Contiguous: from the regions. Paged: the unfilled tail of each
    allocated block is internal waste; paged KV reserves nothing ahead and never fragments.
    ``external_frag_perc``: the step's ``StepStats.kv_external_frag_perc`` (% of the pool)."""
    pool = snapshot.num_blocks * snapshot.block_size
    if snapshot.layout is KVLayout.CONTIGUOUS:
        used = sum(r.used for r in snapshot.regions)
        later = sum(r.needed - r.used for r in snapshot.regions)
        internal = sum(r.reserved - r.needed for r in snapshot.regions)
    else:
        used, later = sum(snapshot.filled), 0
        internal = sum(owner is not None for owner in snapshot.owner) * snapshot.block_size - used
    external = external_frag_perc / 100.0 * pool
    free = pool - used - later - internal - external
    return {"used": used, "reserved_later": later, "internal": internal, "external": external, "free": free}
