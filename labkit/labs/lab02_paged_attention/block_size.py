"""Lab 02, section 6: the block-size trade-off, three measurements per block size B in one run.

* KV waste: the unfilled tail of each request's last block, at most B - 1 slots per request,
  measured by replaying the conversation trace on the simulated paper-scale server;
* attention time per decode step: the engine's CPU paged attention over blocks of B slots
  (``attention_cost.block_size_attention``), real tensors timed on this machine;
* prefix-cache hits: only full blocks are cached, so a shared prefix of P tokens can hit at most
  ``floor(P / B) * B`` of them (and never the block holding a prompt's last token); measured on the
  simulated server with prompts that share a prefix.

The paper picks B = 16: small enough to waste little, large enough for the GPU kernel to read
whole blocks efficiently (Kwon et al., SOSP'23, §7.2, Fig. 18b).
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.labs.lab02_paged_attention.attention_cost import block_size_attention
from labkit.labs.lab02_paged_attention.layouts import paper_server, serve_trace
from labkit.sampling_params import SamplingParams
from labkit.traces import TraceRequest


@dataclass(frozen=True)
class BlockSizePoint:
    block_size: int
    waste: float               # % of allocated slots holding no K/V (simulated replay)
    mean_running: float        # requests running at once in that replay
    attention_ms: float        # one decode step of attention, all layers (measured here)
    prefix_hit_rate: float     # % of prompt tokens served from the prefix cache (simulated)


def shared_prefix_hit_rate(block_size: int, prefix_len: int, suffix_len: int, num_requests: int) -> float:
    """Prompts = the same ``prefix_len`` tokens + a different suffix, served one after another on
    the simulated server with prefix caching; returns hits / queries in %."""
    llm = paper_server("paged", block_size=block_size, enable_prefix_caching=True)
    engine = llm.engine
    prefix = [1 + (7 * i) % 250 for i in range(prefix_len)]
    for r in range(num_requests):
        suffix = [1 + (13 * r + 3 * i) % 250 for i in range(suffix_len)]
        engine.add_request(prefix + suffix, SamplingParams(max_tokens=1, ignore_eos=True))
        while engine.has_unfinished_requests():
            engine.step()
    stats = engine.stats()
    return 100.0 * stats["prefix_cache_hits"] / stats["prefix_cache_queries"]


def sweep_block_sizes(block_sizes: list[int], trace: list[TraceRequest], prefix_len: int = 100,
                      suffix_len: int = 20, num_prefix_requests: int = 8, attention_seqs: int = 8,
                      attention_context: int = 512) -> list[BlockSizePoint]:
    attention = block_size_attention(block_sizes, attention_seqs, attention_context)
    points = []
    for B in block_sizes:
        run = serve_trace(paper_server("paged", block_size=B), trace, f"B={B}")
        hits = shared_prefix_hit_rate(B, prefix_len, suffix_len, num_prefix_requests)
        points.append(BlockSizePoint(B, run.waste, run.mean_running, 1000 * attention[B], hits))
    return points
