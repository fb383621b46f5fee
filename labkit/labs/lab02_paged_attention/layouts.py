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

from dataclasses import dataclass

from labkit.config import EngineConfig
from labkit.hooks import StepEnd, TokensAppended
from labkit.i18n import t
from labkit.kv.breakdown import BreakdownRecorder, PoolBreakdown
from labkit.replay import replay
from labkit.sim.paper import PAPER_KV_BYTES, PAPER_MAX_MODEL_LEN, PAPER_MODEL
from labkit.traces import TraceRequest


@dataclass(frozen=True)
class LayoutRun:
    """One trace replayed on one KV layout."""

    label: str
    layout: str                 # "paged" | "contiguous"
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

    @property
    def waste(self) -> float:
        """% of the slots held by requests that hold no K/V (DESIGN §5's kv_waste_perc, step-averaged)."""
        return self.breakdown.waste_of_reserved

    @property
    def effective_use(self) -> float:
        """% of held slots that hold K/V: the paper's Fig. 2 measure (vLLM 96.3 %)."""
        return 100.0 - self.waste

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds else 0.0


class _RunRecorder:
    """Concurrency, output tokens and per-request block tails, from ``StepEnd`` / ``TokensAppended``."""

    def __init__(self, engine) -> None:
        self.hooks = engine.hooks
        self.running_sum = self.max_running = self.tokens = self.max_tail = 0
        self.seconds = 0.0
        self.hooks.subscribe(self._on_event, StepEnd, TokensAppended)

    def _on_event(self, event) -> None:
        if isinstance(event, TokensAppended):
            self.tokens += len(event.token_ids)
            return
        running = event.stats.num_requests_running
        self.running_sum += running
        self.max_running = max(self.max_running, running)
        self.seconds += event.stats.step_s
        self.max_tail = max(self.max_tail, max_tail_slots(event.block_map))

    def detach(self) -> None:
        self.hooks.unsubscribe(self._on_event)


def max_tail_slots(snapshot) -> int:
    """Largest number of unfilled slots in one request's blocks (paged; 0 for contiguous)."""
    if snapshot.layout != "paged":
        return 0
    bs = snapshot.block_size
    return max((sum(bs - snapshot.filled[b] for b in table) for _, table in snapshot.block_tables), default=0)


def serve_trace(llm, trace: list[TraceRequest], label: str) -> LayoutRun:
    """Replay ``trace`` (exact lengths, greedy, ``labkit.replay``) and measure the pool step by step."""
    engine = llm.engine
    split, run = BreakdownRecorder(engine), _RunRecorder(engine)
    try:
        result = replay(engine, trace, keep_outputs=True)
    finally:
        split.detach()
        run.detach()
    steps = max(split.num_steps, 1)
    outputs = tuple(tuple(result.outputs[rid]) for rid in result.request_ids)
    return LayoutRun(label, engine.kv.layout, split.breakdown(), len(trace), split.num_steps,
                     split.running_sum / steps, run.max_running, run.tokens, run.seconds, engine.simulated,
                     engine.config.block_size, run.max_tail, outputs)


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


def compare_small(trace: list[TraceRequest], num_blocks: int, max_model_len: int, name: str) -> list[LayoutRun]:
    """Real model, same trace, same pool: max-length reservation vs paged."""
    return [serve_trace(small_server("contiguous", num_blocks, max_model_len), trace,
                        t(f"{name}：连续，预留 {max_model_len}", f"{name}: contiguous, reserve {max_model_len}")),
            serve_trace(small_server("paged", num_blocks, max_model_len), trace, t(f"{name}：分页", f"{name}: paged"))]


def uniform_trace(num_requests: int, prompt_len: int, output_len: int) -> list[TraceRequest]:
    """Equal requests, all at t = 0: the queue stays full, so the pool alone decides how many run."""
    return [TraceRequest(0.0, prompt_len, output_len) for _ in range(num_requests)]


def fit_ratio(paged: LayoutRun, contiguous: LayoutRun) -> float:
    """How many times as many requests ran at once under paged KV (step-averaged)."""
    return paged.mean_running / contiguous.mean_running if contiguous.mean_running else float("inf")
