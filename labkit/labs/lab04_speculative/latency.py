"""TPOT and ITL of one streamed request, measured the way a client sees them.

A speculative engine streams chunks of several tokens (accepted drafts + one target token), so
its two per-token latency numbers disagree::

    tokens   t1 | t2 t3 t4 | t5 | t6 t7 |          7 tokens in 4 chunks
    time     ^TTFT ^gap1    ^gap2 ^gap3
    TPOT = (e2e − TTFT) / (tokens − 1)   = (gap1 + gap2 + gap3) / 6     vLLM bench serve; AIPerf calls it ITL
    ITL  = every gap between chunks      = gap1, gap2, gap3 (mean /3)   vLLM bench serve (AIPerf: ICL)

so mean ITL / TPOT = (tokens − 1) / (chunks − 1) exactly: the mean number of tokens per chunk
after the first. Without speculation every chunk is one token and the two agree.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from labkit.metrics import percentile


@dataclass(frozen=True)
class StreamTimes:
    """Client-side times of one streamed request (wall clock, seconds since the request was sent)."""

    ttft_s: float
    chunk_times: tuple[float, ...]     # arrival of each chunk holding at least one token
    chunk_sizes: tuple[int, ...]       # tokens in each chunk

    @property
    def num_tokens(self) -> int:
        return sum(self.chunk_sizes)

    @property
    def e2e_s(self) -> float:
        return self.chunk_times[-1]

    @property
    def tpot_s(self) -> float | None:
        """vLLM's TPOT = AIPerf's "ITL": (e2e − TTFT) / (tokens − 1)."""
        return (self.e2e_s - self.ttft_s) / (self.num_tokens - 1) if self.num_tokens > 1 else None

    @property
    def itl_gaps(self) -> list[float]:
        """vLLM's ITL: every gap between consecutive chunks."""
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:])]

    @property
    def itl_mean_s(self) -> float | None:
        gaps = self.itl_gaps
        return sum(gaps) / len(gaps) if gaps else None

    @property
    def itl_p50_s(self) -> float | None:
        return percentile(self.itl_gaps, 50)

    @property
    def itl_over_tpot(self) -> float:
        """Mean ITL / TPOT = (tokens − 1) / (chunks − 1): a ratio of counts, the same on any clock."""
        return (self.num_tokens - 1) / max(len(self.chunk_sizes) - 1, 1)

    @property
    def tokens_per_chunk(self) -> float:
        """After the first chunk (the prefill's one token)."""
        rest = self.chunk_sizes[1:]
        return sum(rest) / len(rest) if rest else 0.0


def stream_times(llm, prompt, params) -> StreamTimes:
    """Stream one request through ``llm.stream`` and time every chunk on the wall clock."""
    t0 = time.perf_counter()
    times, sizes = [], []
    for delta in llm.stream(prompt, params):
        if delta.token_ids:
            times.append(time.perf_counter() - t0)
            sizes.append(len(delta.token_ids))
    if not times:
        raise ValueError("the request produced no tokens")
    return StreamTimes(times[0], tuple(times), tuple(sizes))
