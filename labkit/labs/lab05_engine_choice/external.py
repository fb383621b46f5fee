"""Your own engine: the same ``labkit bench`` run against any OpenAI-compatible server.

The lab never starts a real engine; the learner starts one and gives its URL (or sets
``LABKIT_ENGINE_URL``). With no URL the lab says so and skips. ``COMMANDS`` are the documented
start commands of each engine (see each project's docs; the flags shown are the common ones).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from labkit.benchmark.client import Target
from labkit.benchmark.metrics import compute_metrics
from labkit.benchmark.results import BenchResult
from labkit.benchmark.runner import run_load
from labkit.labs.lab05_engine_choice.ablation import Workload, run_blocking
from labkit.labs.lab05_engine_choice.diagnose import MetricsSampler

COMMANDS = {
    "vLLM": "vllm serve meta-llama/Llama-3.1-8B-Instruct --port 8000",
    "TensorRT-LLM": "trtllm-serve meta-llama/Llama-3.1-8B-Instruct --port 8000",
    "SGLang": "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --port 8000",
    "llama.cpp": "llama-server -m model.gguf --port 8000",
    "labkit": "labkit serve --port 8000",
}
METRIC_PREFIX = {"vLLM": "vllm", "SGLang": "sglang", "labkit": "labkit"}


@dataclass(frozen=True)
class EngineTarget:
    base_url: str
    model: str
    engine: str = "vLLM"          # decides which /metrics names to read

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        if not self.model:
            raise ValueError("model must name the model the server serves (GET /v1/models)")


def target_from_env() -> EngineTarget | None:
    """``LABKIT_ENGINE_URL``, ``LABKIT_ENGINE_MODEL`` and ``LABKIT_ENGINE`` (default vLLM); None if unset."""
    url = os.environ.get("LABKIT_ENGINE_URL")
    if not url:
        return None
    return EngineTarget(url, os.environ.get("LABKIT_ENGINE_MODEL", ""), os.environ.get("LABKIT_ENGINE", "vLLM"))


def bench_external(target: EngineTarget, workload: Workload, slo_ms: dict[str, float],
                   timeout_s: float = 600.0) -> tuple[BenchResult, MetricsSampler]:
    """Run ``workload`` against the learner's server, scraping its /metrics meanwhile."""
    prefix = METRIC_PREFIX.get(target.engine, "vllm")
    with MetricsSampler(target.base_url, prefix, interval_s=1.0) as sampler:
        out = run_blocking(run_load(Target(target.base_url, target.model, "chat"), list(workload.requests),
                                   workload.shape(), timeout_s, timeout_s, progress=True))
    settings = {"base_url": target.base_url, "model": target.model, "endpoint": "chat", "dataset": workload.name,
                "num_prompts": len(workload.requests), "request_rate": float("inf"), "goodput_slo_ms": slo_ms}
    return BenchResult(settings, compute_metrics(out.records, out.duration_s, slo_ms), out.records), sampler
