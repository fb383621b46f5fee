"""Lab 03's workloads: the Anyscale offline setup, CPU-sized Azure traces, and serving arrivals.

Arrivals follow ``vllm bench serve``: gaps between requests are gamma-distributed with shape
``burstiness`` and mean ``1 / rate``. Burstiness 1 is a Poisson process (exponential gaps); below 1
the same mean rate comes in bursts (coefficient of variation of the gaps = 1 / sqrt(burstiness)).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from labkit.traces import TraceRequest, azure_like_trace, scale_trace

ANYSCALE_PROMPT_LEN = 512          # Anyscale blog 2023-06-22: 1,000 prompts of 512 tokens,
ANYSCALE_MEAN_OUTPUT = 128         # output lengths exponential with mean 128, capped (the "variance" knob)
ANYSCALE_CAPS = (32, 128, 512, 1536)


def anyscale_trace(num_requests: int, max_output_len: int, seed: int = 0) -> list[TraceRequest]:
    """Every request at t = 0: 512-token prompts, outputs ~ Exp(mean 128) clipped to [1, max_output_len]."""
    _check_positive("num_requests", num_requests)
    _check_positive("max_output_len", max_output_len)
    rng = np.random.default_rng(seed)
    outputs = np.clip(np.rint(rng.exponential(ANYSCALE_MEAN_OUTPUT, num_requests)), 1, max_output_len)
    return [TraceRequest(0.0, ANYSCALE_PROMPT_LEN, int(o)) for o in outputs]


def cpu_azure_trace(kind: str, num_requests: int, max_prompt_len: int, max_output_len: int,
                    seed: int = 0) -> list[TraceRequest]:
    """The Azure 2023 length distribution (resampled from the shipped statistics) shrunk by one common
    factor per side so the real model on a CPU can serve it; every request at t = 0."""
    trace = azure_like_trace(kind, num_requests, seed=seed)
    return [replace(r, arrival_s=0.0) for r in scale_trace(trace, max_prompt_len, max_output_len)]


def gamma_arrivals(trace: list[TraceRequest], rate: float, burstiness: float = 1.0,
                   seed: int = 0) -> list[TraceRequest]:
    """The same requests with arrival times from a gamma process of ``rate`` requests/s, first at t = 0."""
    if not rate > 0:
        raise ValueError(f"rate must be > 0 requests/s, got {rate!r}")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0 (1 = Poisson), got {burstiness!r}")
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=len(trace))
    times = np.cumsum(gaps) - gaps[0]
    return [replace(r, arrival_s=float(t)) for r, t in zip(trace, times)]


def _check_positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def azure_length_stats(kind: str) -> dict[str, float]:
    """P50 / P99 of prompt and output tokens in the Azure 2023 ``kind`` trace (shipped statistics)."""
    import json

    from labkit.traces import AZURE_STATS_PATH

    stats = json.loads(AZURE_STATS_PATH.read_text(encoding="utf-8"))["kinds"][kind]
    ctx, gen = stats["context_tokens"], stats["generated_tokens"]
    return {"prompt_p50": ctx["p50"], "prompt_p99": ctx["p99"], "output_p50": gen["p50"], "output_p99": gen["p99"]}
