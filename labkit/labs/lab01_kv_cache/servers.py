"""The engines and workloads lab 01 replays, named so a cell reads as one sentence.

``paper_like_server`` mirrors the setting of the vLLM paper's memory study (Kwon et al., SOSP'23,
Table 1 and Fig. 2): a 13B model (OPT-13B and Llama-2-13B share the KV shape 40 layers × 40 heads ×
128, fp16: 800 KB per token) with 12 GiB for the KV cache, i.e. about 15.7K token slots, and
max_model_len 2048. It runs on the simulated model (``LLM(model="sim")``): the scheduler and the KV
bookkeeping are the real ones, only the forward pass is a cost model, so its memory numbers are
exact and its times are labelled simulated.
"""

from __future__ import annotations

from labkit.config import EngineConfig
from labkit.sim.cost import MODELS
from labkit.traces import LogNormalLengths, TraceRequest, azure_like_trace, scale_trace, synthetic_trace

PAPER_KV_BYTES = 12 * 2**30        # Kwon et al. Table 1: 12 GB left for KV on one A100-40GB (13B model)
PAPER_MAX_MODEL_LEN = 2048         # OPT's context length, the reservation of Orca(Max) in Fig. 2
SIM_MODEL = "llama-2-13b"          # same KV shape as OPT-13B (labkit.sim.cost.MODELS)
PAPER_POOL_SLOTS = PAPER_KV_BYTES // MODELS[SIM_MODEL].kv_bytes_per_token    # 15,728 ≈ Table 1's 15.7K


def paper_like_server(reserve: str = "max_model_len", max_model_len: int = PAPER_MAX_MODEL_LEN):
    """Simulated 13B server, contiguous KV. ``reserve``: "max_model_len" (Orca(Max)) or "max_tokens"
    (exactly prompt + output: with ``ignore_eos`` replay that is Orca(Oracle))."""
    from labkit import LLM

    config = EngineConfig(kv_cache="contiguous", contiguous_reserve=reserve, kv_cache_bytes=PAPER_KV_BYTES,
                          max_model_len=max_model_len, max_num_seqs=256, max_num_batched_tokens=8192)
    return LLM(model="sim", config=config, model_profile=SIM_MODEL)


def small_contiguous_server(max_model_len: int, num_reservations: int, block_size: int = 16):
    """The real model with a contiguous pool of ``num_reservations`` max-length regions plus one
    block that no region can use (a small leftover, as in any real pool)."""
    from labkit import LLM

    num_blocks = num_reservations * (-(-max_model_len // block_size)) + 1
    config = EngineConfig(kv_cache="contiguous", max_model_len=max_model_len, num_blocks=num_blocks,
                          block_size=block_size)
    return LLM(progress=False, config=config)


def sharegpt_like_trace(num_requests: int, seed: int = 0) -> list[TraceRequest]:
    """Log-normal lengths (σ = 1) whose means (median × e^0.5) sit near ShareGPT's 161 input /
    338 output tokens (Kwon et al. Fig. 11a), clipped so prompt + output ≤ 2048."""
    return synthetic_trace(num_requests, seed=seed, prompt_len=LogNormalLengths(98, 1.0, 4, 1024),
                           output_len=LogNormalLengths(205, 1.0, 4, 1024))


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
