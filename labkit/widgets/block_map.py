"""``BlockMap``: the KV pool, one cell per physical block, coloured by the request holding it.

Paged layout (vLLM's PagedAttention)::

    block_table[req-3] = [17, 4, 33]        logical block i of req-3 lives in physical block
                                            block_table[i]; cells 17, 4, 33 are req-3's colour
    ┌──┬──┬──┬──┬──┐
    │▓▓│░░│▓▒│  │◢ │   ▓ filled slots   ▒ the unfilled tail of a last block (internal waste)
    └──┴──┴──┴──┴──┘   • ref_cnt > 1 (shared)   ◢ carries a prefix-cache hash   blank: free

Contiguous layout (one max-length reservation per request) draws the token-slot arena instead:
each region's used slots, the slots it will still fill, the slots it never fills (internal
fragmentation) and the free holes between regions (external fragmentation).

Hovering a cell shows the block; clicking pins its request and lists its block table
(logical → physical) below the map; clicking a shared block (ref count > 1) lists every request
holding it, each with its block table. A slider scrubs back through the run's recorded steps
(``labkit.widgets.history``); once the engine is idle the map shows the step of peak usage (the
step with the highest KV usage, the one meaning of "peak" the widget states), so a finished run
still shows its picture. Only ``StepEnd.block_map`` and ``StepEnd.stats`` are read.

Once the engine is idle and the kept steps are small enough (``FRAME_CELLS``), every kept step goes
to the browser as a frame, so the slider redraws locally, in the next animation frame, without a
round trip through the kernel (a busy kernel took seconds).
"""

from __future__ import annotations

import dataclasses

import traitlets

from labkit.events import StepEnd, StepStats
from labkit.i18n import t
from labkit.kv.snapshot import BlockMapSnapshot
from labkit.widgets.base import bundle_esm
from labkit.widgets.history import ScrubbableView, snapshot_cells
from labkit.widgets.palette import colors_for

FRAME_CELLS = 200_000     # per-block entries over all frames sent at once (~1.5 MB of JSON)


def block_summary(snapshot: BlockMapSnapshot, stats: StepStats) -> dict[str, float | int]:
    """The numbers printed above the map: block counts from the snapshot, percentages from stats."""
    return {
        "num_blocks": snapshot.num_blocks,
        "num_used": sum(owner is not None for owner in snapshot.owner),
        "num_shared": sum(ref > 1 for ref in snapshot.ref_cnt),
        "num_cached": sum(snapshot.cached),
        "num_requests": len(snapshot.block_tables) or len(snapshot.regions),
        "kv_cache_usage_perc": stats.kv_cache_usage_perc,
        "kv_waste_perc": stats.kv_waste_perc,
        "kv_external_frag_perc": stats.kv_external_frag_perc,
    }


class BlockMap(ScrubbableView):
    """Live map of the KV pool (see the module docstring). ``BlockMap(engine)`` or ``hooks=bus``."""

    _esm = bundle_esm("block_map.js")
    EVENT_TYPES = (StepEnd,)

    step = traitlets.Int(-1).tag(sync=True)               # engine step shown (-1: none yet)
    kv_layout = traitlets.Unicode("").tag(sync=True)      # "paged" | "contiguous" (snapshot.layout)
    block_size = traitlets.Int(0).tag(sync=True)
    num_blocks = traitlets.Int(0).tag(sync=True)
    owner = traitlets.List().tag(sync=True)               # per block: request id or None (free)
    filled = traitlets.List().tag(sync=True)              # per block: slots holding K/V
    ref_cnt = traitlets.List().tag(sync=True)             # per block: holders (> 1: shared)
    cached = traitlets.List().tag(sync=True)              # per block: has a prefix-cache hash
    block_tables = traitlets.Dict().tag(sync=True)        # request id -> [physical block, ...]
    regions = traitlets.List().tag(sync=True)             # contiguous: Region fields as dicts
    colors = traitlets.Dict().tag(sync=True)              # request id -> "#rrggbb"
    summary = traitlets.Dict().tag(sync=True)             # block_summary()
    selected = traitlets.Unicode("").tag(sync=True)       # pinned request id, set by a click too
    selected_block = traitlets.Int(-1).tag(sync=True)     # pinned shared block (ref_cnt > 1), or -1
    frames = traitlets.List().tag(sync=True)              # frame() of every slider position, or []

    def __init__(self, engine: object | None = None, **kwargs) -> None:
        self._frames_key: tuple[int, ...] | None = None    # the steps ``frames`` holds now
        super().__init__(engine, **kwargs)

    def show(self, event: StepEnd) -> None:
        for name, value in frame(event).items():
            setattr(self, name, value)

    def sync(self) -> None:
        super().sync()
        if self._history.latest is None:
            return
        entries = self._entries
        if self.running or sum(snapshot_cells(e) for e in entries) > FRAME_CELLS:
            key = None
        else:
            key = tuple(e.step for e in entries)
        if key != self._frames_key:
            self._frames_key = key
            self.frames = [] if key is None else [frame(e) for e in entries]

    def holders(self, block: int) -> dict[str, list[int]]:
        """Every request whose block table holds physical ``block`` now, with its table."""
        return {rid: table for rid, table in self.block_tables.items() if block in table}

    def make_labels(self) -> dict[str, str]:
        return {
            **self.scrub_labels(),
            "title": t("KV 块映射", "KV block map"),
            "waiting": t("等待第一个引擎步…", "Waiting for the first engine step…"),
            "step": t("步", "step"),
            "usage": t("KV 使用率", "KV usage"),
            "waste": t("浪费", "waste"),
            "external_frag": t("外部碎片", "external fragmentation"),
            "used_blocks": t("已分配块", "allocated blocks"),
            "shared": t("共享块 (ref_cnt>1)", "shared blocks (ref_cnt>1)"),
            "cached": t("前缀缓存块", "prefix-cached blocks"),
            "free": t("空闲", "free"),
            "filled_part": t("已填充", "filled"),
            "empty_part": t("未填充 (内部浪费)", "unfilled (internal waste)"),
            "block": t("物理块", "physical block"),
            "owner": t("所属请求", "owner"),
            "slots": t("槽位", "slots"),
            "ref_cnt": t("引用数", "ref count"),
            "prefix_cached": t("前缀缓存", "prefix cached"),
            "yes": t("是", "yes"),
            "no": t("否", "no"),
            "block_table": t("块表 (逻辑块→物理块)", "block table (logical→physical)"),
            "holders": t("持有它的请求", "held by"),
            "hint": t("悬停查看块；点击固定请求的块表，点击共享块列出所有持有者",
                      "Hover a block; click to pin its request's block table, or a shared block to list every holder"),
            "hint_contiguous": t("悬停查看预留区，点击固定", "Hover a reservation; click to pin it"),
            "used_slots": t("已用槽位 (有 K/V)", "used slots (hold K/V)"),
            "reserved_later": t("预留待用", "reserved, filled later"),
            "internal_frag": t("内部碎片 (永不使用)", "internal fragmentation (never used)"),
            "free_hole": t("空闲空洞", "free hole"),
            "region": t("预留区", "reservation"),
            "start": t("起始槽位", "first slot"),
            "reserved": t("预留", "reserved"),
            "used": t("已用", "used"),
            "needed": t("最终需要", "will need"),
        }


def frame(event: StepEnd) -> dict:
    """The synced traits that draw one step (``BlockMap.show`` writes them; ``frames`` lists them)."""
    snap = event.block_map
    tables = {rid: list(blocks) for rid, blocks in snap.block_tables}
    return {
        "step": event.step, "kv_layout": snap.layout, "block_size": snap.block_size, "num_blocks": snap.num_blocks,
        "owner": list(snap.owner), "filled": list(snap.filled), "ref_cnt": list(snap.ref_cnt),
        "cached": list(snap.cached), "block_tables": tables,
        "regions": [dataclasses.asdict(region) for region in snap.regions],
        "colors": colors_for([*snap.owner, *tables, *(r.request_id for r in snap.regions)]),
        "summary": block_summary(snap, event.stats),
    }
