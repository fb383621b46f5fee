"""Lab 02: one short trace served three ways on the simulated engine, and the KV pool drawn at one step.

Three layouts, same pool, same requests (all queued at the start, first come first served):

* ``"exact"``: contiguous regions of exactly prompt + output slots (Orca(Oracle)), placed first-fit;
* ``"max_len"``: contiguous regions of ``max_model_len`` slots (Orca(Max));
* ``"paged"``: blocks of 16 slots on demand (PagedAttention).

``pool_map(layout)`` replays the trace on ``LLM(model="sim")`` and keeps the engine's own
``BlockMapSnapshot`` of each step, then picks the step that shows the layout's waste best: for
``exact`` the first step whose queue head waits although enough slots are free in total (external
fragmentation: every hole is too small), for ``paged`` the step with the most requests whose blocks
are scattered, for ``max_len`` the step with the most requests running.
``slot_figure`` draws a map as a grid of slots coloured by request, light where a slot is reserved
but holds no K/V yet, white where it is free, with no title or legend that names a kind of waste:
the which-figure question in the lab asks the learner to read it.
"""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

from labkit.i18n import t
from labkit.kv.snapshot import KVLayout
from labkit.report.figures import FONT
from labkit.scheduler_output import StepKind
from labkit.traces import TraceRequest, azure_like_trace, scale_trace

LAYOUTS = ("exact", "max_len", "paged")
BLOCK_SIZE, NUM_BLOCKS, MAX_MODEL_LEN = 16, 24, 192
ROW_SLOTS = 32          # slots drawn per row of the grid


@dataclass(frozen=True)
class PoolMap:
    """The pool at one step: per slot, the request holding it (None: free) and whether it holds K/V."""

    layout: str
    step: int
    owner: tuple[str | None, ...]
    filled: tuple[bool, ...]
    waiting_need: int | None       # slots (contiguous) or blocks (paged) the queue head needs; None: no queue
    running: int

    @property
    def num_slots(self) -> int:
        return len(self.owner)

    @property
    def free_slots(self) -> int:
        return sum(o is None for o in self.owner)

    def holes(self) -> list[int]:
        """Lengths of the runs of free slots, in pool order."""
        runs, n = [], 0
        for o in (*self.owner, "end"):
            if o is None:
                n += 1
            elif n:
                runs, n = runs + [n], 0
        return runs

    @property
    def reserved_empty(self) -> int:
        """Slots held by a request but holding no K/V (reserved for later or never used)."""
        return sum(o is not None and not f for o, f in zip(self.owner, self.filled))

    @property
    def externally_fragmented(self) -> bool:
        """The queue head waits although enough slots are free in total: no single hole fits it
        (contiguous layouts; a paged pool needs no contiguous hole)."""
        if self.waiting_need is None or self.layout == "paged":
            return False
        return self.free_slots >= self.waiting_need and max(self.holes(), default=0) < self.waiting_need

    def scattered(self) -> int:
        """Requests whose slots are not one consecutive run."""
        ids = {o for o in self.owner if o is not None}
        positions = {rid: [i for i, o in enumerate(self.owner) if o == rid] for rid in ids}
        return sum(p[-1] - p[0] + 1 != len(p) for p in positions.values())


def lab_trace(num_requests: int = 12, seed: int = 1) -> list[TraceRequest]:
    """The Azure conversation shape shrunk to a pool of 384 slots."""
    return scale_trace(azure_like_trace("conv", num_requests, seed=seed, max_total_tokens=2048), 96, 48)


def _server(layout: str):
    from labkit import LLM, EngineConfig

    kv = "paged" if layout == "paged" else "contiguous"
    reserve = "max_tokens" if layout == "exact" else "max_model_len"
    return LLM(model="sim", progress=False,
               config=EngineConfig(kv_cache=kv, contiguous_reserve=reserve, num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE,
                                   max_model_len=MAX_MODEL_LEN, max_num_seqs=16))


def _slots(snapshot) -> tuple[tuple[str | None, ...], tuple[bool, ...]]:
    n = snapshot.num_blocks * snapshot.block_size
    owner, filled = [None] * n, [False] * n
    if snapshot.layout is KVLayout.CONTIGUOUS:
        for region in snapshot.regions:
            for i in range(region.start, region.start + region.reserved):
                owner[i] = region.request_id
                filled[i] = i < region.start + region.used
    else:
        for block, (rid, used) in enumerate(zip(snapshot.owner, snapshot.filled)):
            if rid is None:
                continue
            for j in range(snapshot.block_size):
                owner[block * snapshot.block_size + j] = rid
                filled[block * snapshot.block_size + j] = j < used
    return tuple(owner), tuple(filled)


def pool_map(layout: str, trace: list[TraceRequest] | None = None) -> PoolMap:
    """Replay ``trace`` (default ``lab_trace()``) with ``layout`` and return the telling step's map."""
    from labkit import SamplingParams
    from labkit.events import StepEnd

    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    trace = lab_trace() if trace is None else trace
    engine = _server(layout).engine
    ends: list = []
    engine.hooks.subscribe(ends.append, StepEnd)
    ids = [engine.add_request([1] * r.prompt_len, SamplingParams(max_tokens=r.output_len, ignore_eos=True))
           for r in trace]
    need = {rid: r.prompt_len + r.output_len for rid, r in zip(ids, trace)}
    maps, admitted = [], set()
    try:
        while engine.has_unfinished_requests():
            engine.step()
            event = ends[-1]
            running = {e.request_id for e in event.batch if e.kind != StepKind.IDLE}
            admitted |= running
            owner, filled = _slots(event.block_map)
            head = next((rid for rid in ids if rid not in admitted), None)
            waiting = None if head is None else (need[head] if layout == "exact" else
                                                 MAX_MODEL_LEN if layout == "max_len" else
                                                 -(-min(trace[ids.index(head)].prompt_len + 1, need[head]) // BLOCK_SIZE)
                                                 * BLOCK_SIZE)
            maps.append(PoolMap(layout, event.step, owner, filled, waiting, len(running)))
    finally:
        engine.hooks.unsubscribe(ends.append)
    if layout == "exact":
        fragmented = [m for m in maps if m.externally_fragmented]
        if fragmented:
            return fragmented[0]
    if layout == "paged":
        return max(maps, key=lambda m: (m.scattered(), m.running))
    return max(maps, key=lambda m: (m.running, m.num_slots - m.free_slots))


def _request_colour(rid: str, light: bool) -> str:
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
               "#bcbd22", "#006d2c", "#393b79", "#637939"]   # no grey: it would read as free
    colour = palette[int(rid) % len(palette)] if rid.isdigit() else palette[hash(rid) % len(palette)]
    if not light:
        return colour
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return "#{:02x}{:02x}{:02x}".format(*(round(c + (255 - c) * 0.7) for c in (r, g, b)))


def slot_figure(m: PoolMap) -> go.Figure:
    """The pool as a grid, ``ROW_SLOTS`` slots per row: dark = holds K/V, light = held but empty,
    white = free; the subtitle says what the queue head needs (no word that names the answer)."""
    colours = sorted({_request_colour(o, not f) for o, f in zip(m.owner, m.filled) if o is not None})
    index = {"#ffffff": 0, **{c: i + 1 for i, c in enumerate(colours)}}
    rows = -(-m.num_slots // ROW_SLOTS)
    z, text = [[0] * ROW_SLOTS for _ in range(rows)], [[""] * ROW_SLOTS for _ in range(rows)]
    for i, (o, f) in enumerate(zip(m.owner, m.filled)):
        r, c = divmod(i, ROW_SLOTS)
        z[r][c] = 0 if o is None else index[_request_colour(o, not f)]
        text[r][c] = t(f"槽位 {i}：", f"slot {i}: ") + (t("空闲", "free") if o is None else
                                                         t(f"请求 {o}，", f"request {o}, ")
                                                         + (t("存有 K/V", "holds K/V") if f else t("已占但没存", "held, empty")))
    n = len(index)
    scale = []
    for colour, k in sorted(index.items(), key=lambda item: item[1]):
        scale += [[k / n, colour], [(k + 1) / n, colour]]
    fig = go.Figure(go.Heatmap(z=z, text=text, hoverinfo="text", colorscale=scale, zmin=-0.5, zmax=n - 0.5,
                               showscale=False, xgap=1, ygap=1))
    need = "" if m.waiting_need is None else t(f"队首等待的请求需要 {m.waiting_need} 个槽位",
                                               f"the request at the head of the queue needs {m.waiting_need} slots")
    fig.update_layout(font=dict(family=FONT, size=11), plot_bgcolor="#eeeeee",
                      xaxis=dict(showticklabels=False, title=need), yaxis=dict(showticklabels=False, autorange="reversed"))
    return fig


def figures() -> dict[str, go.Figure]:
    """The three layouts' maps as figures, by layout."""
    return {layout: slot_figure(pool_map(layout)) for layout in LAYOUTS}
