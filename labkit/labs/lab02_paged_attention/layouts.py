"""Lab 02 measurements: paged vs contiguous KV on the same trace and the same pool.

One replay per layout gives everything sections 3, 4 and 8 need: the pool split (``PoolBreakdown``,
``labkit.kv.breakdown``), how many requests ran at once, the output tokens per second, and the
greedy output of every request::

    contiguous  |AAAAaaaa........|BBbb............|   one max-length region per request
    paged       |A|B|A|B|b|A|a|.|                      blocks on demand; waste = last block's tail

The paged layout's only waste is the unfilled tail of each request's last block, so at most
``block_size - 1`` slots per request (Kwon et al., SOSP'23, §4.2); ``LayoutRun.max_tail_slots``
is the largest such tail seen in any step, measured from the block tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from labkit.config import EngineConfig
from labkit.events import StepEnd, TokensAppended
from labkit.i18n import t
from labkit.kv.breakdown import PoolBreakdown
from labkit.kv.snapshot import KVLayout
from labkit.labs.common.display import fast
from labkit.labs.common.measure import Verdict, cores, cpu_clock, machine_load, measuring, verdict_from_ratios
from labkit.metrics import BreakdownRecorder
from labkit.replay import replay
from labkit.sim.paper import PAPER_KV_BYTES, PAPER_MAX_MODEL_LEN, PAPER_MODEL
from labkit.traces import TraceRequest

ROUNDS = fast(2, 2)      # real-model comparisons: interleaved rounds (a verdict needs a spread)


@dataclass(frozen=True)
class LayoutRun:
    """One trace replayed on one KV layout."""

    label: str
    layout: KVLayout
    breakdown: PoolBreakdown    # step-averaged pool split, % of the pool
    num_requests: int
    num_steps: int
    mean_running: float         # requests holding KV, averaged over steps
    max_running: int
    output_tokens: int
    seconds: float              # Σ step time (virtual seconds when simulated)
    simulated: bool
    block_size: int
    max_tail_slots: int         # largest unfilled tail of one request's blocks in any step (paged)
    outputs: tuple[tuple[int, ...], ...]
    clock: str = "virtual seconds (simulated)"
    round_seconds: tuple = ()   # real model: CPU seconds of each round (``compare_small``); seconds = the least
    load: tuple = (None, None)  # load average before and after the rounds
    waiting_share: float = 0.0  # % of steps with at least one request waiting for KV or a batch slot

    @property
    def waste(self) -> float:
        """% of the slots held by requests that hold no K/V (the kv_waste_perc metric, step-averaged)."""
        return self.breakdown.waste_of_reserved

    @property
    def effective_use(self) -> float:
        """% of the whole KV pool holding K/V: the paper's Fig. 2 measure ("token states"; the base is
        the whole pool: reservation, fragmentation and the rest, Fig. 2's "External frag. & Others").
        Orca(Oracle) 38.2 %, vLLM 96.3 % on a pool the load kept full; free slots count in the base."""
        return self.breakdown.used

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds else 0.0


class _RunRecorder:
    """Concurrency, output tokens and per-request block tails, from ``StepEnd`` / ``TokensAppended``."""

    def __init__(self, engine) -> None:
        self.hooks = engine.hooks
        self.running_sum = self.max_running = self.tokens = self.max_tail = self.waiting_steps = self.steps = 0
        self.seconds = 0.0
        self.hooks.subscribe(self._on_event, StepEnd, TokensAppended)

    def _on_event(self, event) -> None:
        if isinstance(event, TokensAppended):
            self.tokens += len(event.token_ids)
            return
        running = event.stats.num_requests_running
        self.steps += 1
        self.waiting_steps += event.stats.num_requests_waiting > 0
        self.running_sum += running
        self.max_running = max(self.max_running, running)
        self.seconds += event.stats.step_s
        self.max_tail = max(self.max_tail, max_tail_slots(event.block_map))

    def detach(self) -> None:
        self.hooks.unsubscribe(self._on_event)


def max_tail_slots(snapshot) -> int:
    """Largest number of unfilled slots in one request's blocks (paged; 0 for contiguous)."""
    if snapshot.layout is not KVLayout.PAGED:
        return 0
    bs = snapshot.block_size
    return max((sum(bs - snapshot.filled[b] for b in table) for _, table in snapshot.block_tables), default=0)


def serve_trace(llm, trace: list[TraceRequest], label: str) -> LayoutRun:
    """Replay ``trace`` (exact lengths, greedy, ``labkit.replay``) and measure the pool step by step."""
    engine = llm.engine
    split, run = BreakdownRecorder(engine), _RunRecorder(engine)
    clock = None if engine.simulated else cpu_clock()
    try:
        with measuring():
            start = clock() if clock else 0.0
            result = replay(engine, trace, keep_outputs=True)
            cpu_s = clock() - start if clock else 0.0
    finally:
        split.detach()
        run.detach()
    steps = max(split.num_steps, 1)
    outputs = tuple(tuple(result.outputs[rid]) for rid in result.request_ids)
    # The real model is timed in CPU seconds (one thread; a busy neighbour's time slices do not count).
    seconds, clock_name = (run.seconds, "virtual seconds (simulated)") if clock is None else (cpu_s, clock.name)
    return LayoutRun(label, engine.kv.layout, split.breakdown(), len(trace), split.num_steps,
                     split.running_sum / steps, run.max_running, run.tokens, seconds, engine.simulated,
                     engine.config.block_size, run.max_tail, outputs, clock_name, (seconds,),
                     waiting_share=100.0 * run.waiting_steps / max(run.steps, 1))


# ----------------------------------------------------------------------------- the engines

def paper_server(kv_cache: str = "paged", reserve: str = "max_model_len", block_size: int = 16,
                 enable_prefix_caching: bool = False):
    """The simulated 13B server of the paper's memory study; same pool bytes for every layout."""
    from labkit import LLM

    config = EngineConfig(kv_cache=kv_cache, contiguous_reserve=reserve, kv_cache_bytes=PAPER_KV_BYTES,
                          max_model_len=PAPER_MAX_MODEL_LEN, block_size=block_size, max_num_seqs=256,
                          max_num_batched_tokens=8192, enable_prefix_caching=enable_prefix_caching)
    return LLM(model="sim", config=config, model_profile=PAPER_MODEL)


def small_server(kv_cache: str, num_blocks: int, max_model_len: int, block_size: int = 16):
    """The real model with a pool of ``num_blocks`` blocks, paged or contiguous (max-length reservation)."""
    from labkit import LLM

    config = EngineConfig(kv_cache=kv_cache, num_blocks=num_blocks, block_size=block_size,
                          max_model_len=max_model_len)
    return LLM(progress=False, config=config)


def compare_paper_scale(trace: list[TraceRequest], name: str) -> list[LayoutRun]:
    """Simulated: max-length reservation (Orca(Max)), exact reservation (Orca(Oracle)), paged (vLLM)."""
    return [serve_trace(paper_server("contiguous", "max_model_len"), trace,
                        t(f"{name}：连续，预留 2048", f"{name}: contiguous, reserve 2048")),
            serve_trace(paper_server("contiguous", "max_tokens"), trace,
                        t(f"{name}：连续，恰好预留", f"{name}: contiguous, exact reservation")),
            serve_trace(paper_server("paged"), trace, t(f"{name}：分页", f"{name}: paged"))]


def compare_small(trace: list[TraceRequest], num_blocks: int, max_model_len: int, name: str,
                  rounds: int = ROUNDS) -> list[LayoutRun]:
    """Real model, same trace, same pool: max-length reservation vs paged, served in ``rounds``
    interleaved rounds (order alternating); each run keeps its least CPU time and every round's."""
    servers = [(small_server("contiguous", num_blocks, max_model_len),
                t(f"{name}：连续，预留 {max_model_len}", f"{name}: contiguous, reserve {max_model_len}")),
               (small_server("paged", num_blocks, max_model_len), t(f"{name}：分页", f"{name}: paged"))]
    runs: list[list[LayoutRun]] = [[], []]
    load_before = machine_load()
    for r in range(rounds):
        for i in ((0, 1) if r % 2 == 0 else (1, 0)):
            runs[i].append(serve_trace(servers[i][0], trace, servers[i][1]))
    load = (load_before, machine_load())
    return [replace(mine[0], seconds=min(x.seconds for x in mine), round_seconds=tuple(x.seconds for x in mine),
                    load=load) for mine in runs]


def throughput_verdict(paged: LayoutRun, contiguous: LayoutRun, id: str = "") -> Verdict:
    """Output tokens per second, paged over contiguous: exact when simulated (virtual time is a
    deterministic cost model), else from the paired rounds' CPU seconds."""
    claim = ("分页 ÷ 连续预留的吞吐（输出 token/秒）", "paged over contiguous throughput (output tokens per s)")
    ratio = paged.tokens_per_s / contiguous.tokens_per_s if contiguous.tokens_per_s else math.inf
    if paged.simulated and contiguous.simulated:
        return Verdict.exact(ratio, margin=0.05, id=id, claim=claim, clock=paged.clock)
    pairs = [(paged.output_tokens / p) / (contiguous.output_tokens / c)
             for p, c in zip(paged.round_seconds, contiguous.round_seconds) if p > 0 and c > 0]
    loads = [x for x in (*paged.load, *contiguous.load) if x is not None]
    # The same trace served again costs the same: a run whose rounds differ widely was disturbed.
    spreads = [max(run.round_seconds) / min(run.round_seconds) for run in (paged, contiguous)
               if len(run.round_seconds) > 1 and min(run.round_seconds) > 0]
    return verdict_from_ratios(pairs or [ratio], ratio=ratio, margin=0.05, quantity="speed", id=id, claim=claim,
                               load=max(loads, default=None), cores=cores(), spread=max(spreads, default=None),
                               clock=paged.clock,
                               load_before=paged.load[0], load_after=paged.load[1])


def uniform_trace(num_requests: int, prompt_len: int, output_len: int) -> list[TraceRequest]:
    """Equal requests, all at t = 0: the queue stays full, so the pool alone decides how many run."""
    return [TraceRequest(0.0, prompt_len, output_len) for _ in range(num_requests)]


def fit_ratio(paged: LayoutRun, contiguous: LayoutRun) -> float:
    """How many times as many requests ran at once under paged KV (step-averaged)."""
    return paged.mean_running / contiguous.mean_running if contiguous.mean_running else float("inf")


# ----------------------------------------------------------------------------- the sections' records
#
# Section 3 (how much each layout wastes) and section 4 (how many requests one pool holds, and the
# throughput that follows) each save a record; their tables, sentences and titles render from it alone
# (``views.layouts_narration``, ``views.fit_narration``). The pool split and the concurrency are counted
# (the same on every CPU); the real model's throughput is timed, so section 4 keeps each pair's verdict.

LAYOUTS_SECTION = "3-layouts"
FIT_SECTION = "4-fit"
QUEUE = "queue"             # section 4's real-model pair whose queue stays full (its verdict goes to lab 05)


def run_to_dict(run: LayoutRun) -> dict:
    """A run as plain JSON, without the greedy outputs (section 8 compares them live)."""
    d = {f: getattr(run, f) for f in LayoutRun.__dataclass_fields__ if f != "outputs"}
    d["layout"], d["breakdown"] = str(run.layout.value), run.breakdown.as_dict()
    return d


def run_from_dict(d: dict) -> LayoutRun:
    return LayoutRun(**{**d, "layout": KVLayout(d["layout"]), "breakdown": PoolBreakdown(**d["breakdown"]),
                        "outputs": (), "round_seconds": tuple(d.get("round_seconds") or ()),
                        "load": tuple(d.get("load") or (None, None))})


def _real_load(runs: list[LayoutRun]) -> float | None:
    loads = [x for r in runs if not r.simulated for x in r.load if x is not None]
    return max(loads, default=None)


def record_layouts(small: dict[str, list[LayoutRun]], paper: dict[str, list[LayoutRun]]):
    """Section 3 as a record: the real-model runs (contiguous, paged) per trace and the simulated
    paper-scale runs (max-length, exact, paged) per trace, whole but for their outputs."""
    from labkit.labs.common.records import RunContext, SectionRecord

    real = [r for runs in small.values() for r in runs]
    return SectionRecord(lab="02", section=LAYOUTS_SECTION, context=RunContext.current(load=_real_load(real)),
                         rounds={f"small/{k}/{r.layout.value}": list(r.round_seconds) for k, runs in small.items()
                                 for r in runs},
                         values={"small": {k: [run_to_dict(r) for r in runs] for k, runs in small.items()},
                                 "paper": {k: [run_to_dict(r) for r in runs] for k, runs in paper.items()}})


def layouts_from_record(rec) -> tuple[dict[str, list[LayoutRun]], dict[str, list[LayoutRun]]]:
    """(small, paper) again, from the record alone."""
    return ({k: [run_from_dict(d) for d in runs] for k, runs in rec.values["small"].items()},
            {k: [run_from_dict(d) for d in runs] for k, runs in rec.values["paper"].items()})


def record_fit(pairs: dict[str, tuple[LayoutRun, LayoutRun]]):
    """Section 4 as a record: named (paged, contiguous) pairs on one pool, each with its throughput
    verdict (exact when simulated, from the paired rounds' CPU seconds on the real model)."""
    from labkit.labs.common.records import RunContext, SectionRecord

    # One load per claim: the title and the sentence speak of the full queue, so the caption cites its load.
    real = list(pairs[QUEUE]) if QUEUE in pairs else [r for pair in pairs.values() for r in pair]
    return SectionRecord(lab="02", section=FIT_SECTION, context=RunContext.current(load=_real_load(real)),
                         rounds={f"{name}/{r.layout.value}": list(r.round_seconds) for name, pair in pairs.items()
                                 for r in pair if not r.simulated},
                         values={"pairs": {name: [run_to_dict(r) for r in pair] for name, pair in pairs.items()}},
                         # the full queue's verdict last: a reader of the record (show_beside) takes the last as the headline
                         verdicts={name: throughput_verdict(*pairs[name], id=fit_verdict_id(name))
                                   for name in sorted(pairs, key=lambda n: n == QUEUE)})


def fit_verdict_id(name: str) -> str:
    """The id in results/lab02.json; lab 05 reads the full queue's (``QUEUE``)."""
    return "paged/throughput_over_contiguous" if name == QUEUE else f"paged/throughput/{name}"


def fit_from_record(rec) -> dict[str, tuple[LayoutRun, LayoutRun]]:
    return {name: tuple(run_from_dict(d) for d in pair) for name, pair in rec.values["pairs"].items()}
