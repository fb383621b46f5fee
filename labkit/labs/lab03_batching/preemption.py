"""Preemption under memory pressure in continuous batching (simulated; lab 01 showed it on the real model).

Continuous batching admits a request as soon as its *prompt* fits, betting that memory will still be
there for its output. When the pool runs dry mid-decode, the scheduler preempts the most recently
admitted running request (vLLM's recompute policy): its blocks are freed and it goes back to the
front of the queue, to be prefilled again, prompt plus the tokens it already generated. The output
is unchanged; the cost is recomputed tokens and added latency.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.config import EngineConfig
from labkit.events import Preempted
from labkit.i18n import t
from labkit.replay import replay
from labkit.traces import TraceRequest


@dataclass(frozen=True)
class PressureRun:
    label: str
    num_blocks: int
    num_preemptions: int
    tokens_lost: int              # Σ Preempted.num_computed_tokens_lost
    tokens_computed: int          # every token the model computed K/V for
    e2e_p50_s: float
    e2e_p99_s: float
    seconds: float                # simulated elapsed time (first arrival to last finish)


def pressure_engine(num_blocks: int, max_num_seqs: int = 64):
    from labkit import LLM

    config = EngineConfig(num_blocks=num_blocks, max_num_seqs=max_num_seqs, max_model_len=4096,
                          max_num_batched_tokens=2048)
    return LLM(model="sim", config=config, model_profile="llama-3-8b", hardware="a100-80gb")


def blocks_for_all(trace: list[TraceRequest], block_size: int = 16) -> int:
    """A pool that holds every request at full length at once: no preemption possible."""
    return sum(-(-(r.prompt_len + r.output_len) // block_size) for r in trace)


def run_pressure(trace: list[TraceRequest], num_blocks: int, label: str) -> PressureRun:
    engine = pressure_engine(num_blocks).engine
    lost: list[int] = []

    def on_preempted(event: Preempted) -> None:
        lost.append(event.num_computed_tokens_lost)

    engine.hooks.subscribe(on_preempted, Preempted)
    try:
        s = replay(engine, trace).stats
    finally:
        engine.hooks.unsubscribe(on_preempted)
    # Σ scheduled tokens, recovered from the per-step mean of scheduled / budget (no StepEnd snapshots needed)
    computed = round(s["mean_token_budget_perc"] / 100 * engine.config.max_num_batched_tokens * s["num_steps"])
    return PressureRun(label, num_blocks, s["num_preemptions"], sum(lost), computed,
                       s["e2e_p50_s"], s["e2e_p99_s"], s["elapsed_s"])


def compare_pressure(trace: list[TraceRequest], share: float = 0.25) -> tuple[PressureRun, PressureRun]:
    """(a pool that holds everything, a pool of ``share`` of that) on the same trace."""
    full = blocks_for_all(trace)
    small = max(int(full * share), max(-(-(r.prompt_len + r.output_len) // 16) for r in trace))
    return (run_pressure(trace, full, t("够大的池（ample pool）", "ample pool")),
            run_pressure(trace, small, t(f"只有它的 {share:.0%}（{share:.0%} of that pool）", f"{share:.0%} of that pool")))
