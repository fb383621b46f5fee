"""The engines and workloads lab 01 replays, named so a cell reads as one sentence.

``paper_like_server`` is the vLLM paper's memory-study setting (``labkit.sim.paper``) on the
simulated model (``LLM(model="sim")``): the scheduler and the KV bookkeeping are the real ones, only
the forward pass is a cost model, so its memory numbers are exact and its times are labelled simulated.
"""

from __future__ import annotations

from labkit.config import EngineConfig
from labkit.sim.paper import PAPER_KV_BYTES, PAPER_MAX_MODEL_LEN, PAPER_MODEL, PAPER_POOL_SLOTS  # noqa: F401
from labkit.traces import TraceRequest, azure_like_trace, scale_trace, sharegpt_like_trace  # noqa: F401


def paper_like_server(reserve: str = "max_model_len", max_model_len: int = PAPER_MAX_MODEL_LEN):
    """Simulated 13B server, contiguous KV. ``reserve``: "max_model_len" (Orca(Max)) or "max_tokens"
    (exactly prompt + output: with ``ignore_eos`` replay that is Orca(Oracle))."""
    from labkit import LLM

    config = EngineConfig(kv_cache="contiguous", contiguous_reserve=reserve, kv_cache_bytes=PAPER_KV_BYTES,
                          max_model_len=max_model_len, max_num_seqs=256, max_num_batched_tokens=8192)
    return LLM(model="sim", config=config, model_profile=PAPER_MODEL)


def small_contiguous_server(max_model_len: int, num_reservations: int, block_size: int = 16):
    """The real model with a contiguous pool of ``num_reservations`` max-length regions plus one
    block that no region can use (a small leftover, as in any real pool)."""
    from labkit import LLM

    num_blocks = num_reservations * (-(-max_model_len // block_size)) + 1
    config = EngineConfig(kv_cache="contiguous", max_model_len=max_model_len, num_blocks=num_blocks,
                          block_size=block_size)
    return LLM(progress=False, config=config)


def azure_conv_trace(num_requests: int, seed: int = 0, max_total_tokens: int = PAPER_MAX_MODEL_LEN):
    """The Azure 2023 conversation trace's length distribution (resampled from shipped statistics)."""
    return azure_like_trace("conv", num_requests, seed=seed, max_total_tokens=max_total_tokens)


def small_trace(num_requests: int, max_prompt_len: int, max_output_len: int, seed: int = 1) -> list[TraceRequest]:
    """The Azure conversation shape shrunk to lengths a CPU serves in seconds (``scale_trace``)."""
    return scale_trace(azure_conv_trace(num_requests, seed), max_prompt_len, max_output_len)


def mean_lengths(trace: list[TraceRequest]) -> tuple[float, float]:
    """(mean prompt tokens, mean output tokens)."""
    n = max(len(trace), 1)
    return sum(r.prompt_len for r in trace) / n, sum(r.output_len for r in trace) / n
