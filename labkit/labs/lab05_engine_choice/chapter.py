"""The chapter in one figure: naive static batching → continuous → paged → speculative → engines.

Each stage carries one number and says where it came from:

- static → continuous, contiguous → paged: the simulated 13B server (``LLM(model="sim")``: the
  real scheduler and KV bookkeeping, a cost model for the forward pass), on one heavy-tailed
  trace, with the same KV budget — labelled 模拟 / simulated;
- speculative: this lab's own measurement (section 2: n-gram against the baseline, real model, one
  request at a time) — a single-request latency gain, so it is drawn apart from the throughput
  stages, never multiplied into them;
- engines: cited (vLLM V1 over V0; v0.6.0 over v0.5.3).

Labs 02–04 do not yet write a shared result file, so the stages are measured afresh here.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.config import EngineConfig
from labkit.labs.lab05_engine_choice.facts import find
from labkit.llm import LLM
from labkit.sampling_params import SamplingParams
from labkit.sim.paper import PAPER_MODEL
from labkit.traces import LogNormalLengths, synthetic_trace


@dataclass(frozen=True)
class Stage:
    name: str
    zh: str
    en: str
    gain: float | None          # × over the previous stage (None: not measured)
    kind: str                   # "simulated", "measured" or "cited"
    source: str
    regime: str = "throughput"  # "throughput" (many requests under load) or "latency" (one request at a time)


REGIMES = ("throughput", "latency")


def _sim_throughput(config: EngineConfig, num_requests: int, seed: int = 0) -> float:
    """Output tokens per simulated second for one trace, all requests at once."""
    trace = synthetic_trace(num_requests, seed=seed, prompt_len=LogNormalLengths(96, 1.0, 8, 512),
                            output_len=LogNormalLengths(128, 1.0, 8, 512))
    llm = LLM(model="sim", config=config, model_profile=PAPER_MODEL)
    prompts = [[1 + (i + j) % 200 for j in range(r.prompt_len)] for i, r in enumerate(trace)]
    params = [SamplingParams(temperature=0.0, max_tokens=r.output_len, ignore_eos=True) for r in trace]
    llm.generate(prompts, params)
    return float(llm.engine.stats()["output_tokens_per_s"])


def simulated_gains(num_requests: int = 64) -> tuple[float, float]:
    """(continuous ÷ static, paged ÷ contiguous) on the simulated 13B server, same 12 GiB of KV.

    Contiguous reservation of max_model_len = 1024 fits about 15 requests in 12 GiB (800 KB per
    token), so stages 1–2 run with a batch limit of 16; paging frees the reserved-but-unused slots,
    so stage 3 lifts the limit to 64 (what paging is for: more requests in the same memory)."""
    common = dict(kv_cache_bytes=12 * 2**30, max_model_len=1024, max_num_batched_tokens=4096)
    static = _sim_throughput(EngineConfig(scheduler="static", kv_cache="contiguous", max_num_seqs=16, **common),
                             num_requests)
    continuous = _sim_throughput(EngineConfig(scheduler="continuous", kv_cache="contiguous", max_num_seqs=16,
                                              **common), num_requests)
    paged = _sim_throughput(EngineConfig(scheduler="continuous", kv_cache="paged", max_num_seqs=64, **common),
                            num_requests)
    return continuous / static, paged / continuous


def chapter_stages(sim_gains: tuple[float, float], spec_gain: float | None) -> list[Stage]:
    v1, v06 = find("vLLM V1 vs V0 throughput"), find("vLLM v0.6.0 vs v0.5.3 Llama 8B")
    return [
        Stage("static", "朴素静态批处理", "naive static batching", 1.0, "simulated", "baseline"),
        Stage("continuous", "连续批处理", "continuous batching", sim_gains[0], "simulated",
              "LLM(model='sim'), 13B profile, same trace"),
        Stage("paged", "分页 KV", "paged KV", sim_gains[1], "simulated", "LLM(model='sim'), same KV budget"),
        Stage("speculative", "投机解码（n-gram）", "speculative decoding (n-gram)", spec_gain, "measured",
              "section 2, copy workload (one request at a time), tokens per CPU second", regime="latency"),
        Stage("engine-v06", "引擎：CPU 开销优化（vLLM v0.6.0）", "engine: CPU-overhead work (vLLM v0.6.0)", 2.7, "cited",
              str(v06)),
        Stage("engine-v1", "引擎：V1 重写", "engine: the V1 rewrite", 1.7, "cited", str(v1)),
    ]
