"""Your own engine: the same ``labkit bench`` run against any OpenAI-compatible server.

The lab never starts a real engine; the learner starts one and gives its URL (or sets
``LABKIT_ENGINE_URL``). With no URL the lab says so and skips. ``COMMANDS`` are the documented
start commands of each engine (see each project's docs; the flags shown are the common ones).

Requests carry only the OpenAI API (``max_completion_tokens``) unless ``ignore_eos`` is set: that
extension (vLLM, SGLang, labkit serve) makes every request produce exactly its output length, and
servers without it refuse the request (``transformers serve``: HTTP 422). A run that failed says
why (``problems``): the first failed request's error, and whether ``/metrics`` was there at all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from labkit.i18n import t
from labkit.labs.lab05_engine_choice.ablation import Workload, run_blocking
from labkit.labs.lab05_engine_choice.diagnose import MetricsSampler
from labkit.serve_bench.client import Target, probe_metrics
from labkit.serve_bench.client_metrics import compute_metrics
from labkit.serve_bench.load_generator import run_load
from labkit.serve_bench.results import BenchResult

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
    ignore_eos: bool = False      # exact output lengths; only for servers that accept the extension

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        if not self.model:
            raise ValueError("model must name the model the server serves (GET /v1/models)")


def target_from_env() -> EngineTarget | None:
    """``LABKIT_ENGINE_URL``, ``LABKIT_ENGINE_MODEL``, ``LABKIT_ENGINE`` (default vLLM) and
    ``LABKIT_ENGINE_IGNORE_EOS=1``; None if the URL is unset."""
    url = os.environ.get("LABKIT_ENGINE_URL")
    if not url:
        return None
    return EngineTarget(url, os.environ.get("LABKIT_ENGINE_MODEL", ""), os.environ.get("LABKIT_ENGINE", "vLLM"),
                        os.environ.get("LABKIT_ENGINE_IGNORE_EOS", "") == "1")


def bench_external(target: EngineTarget, workload: Workload, slo_ms: dict[str, float],
                   timeout_s: float = 600.0) -> tuple[BenchResult, MetricsSampler]:
    """Run ``workload`` against the learner's server, scraping its /metrics meanwhile."""
    prefix = METRIC_PREFIX.get(target.engine, "vllm")
    client_target = Target(target.base_url, target.model, "chat", ignore_eos=target.ignore_eos)
    server_metrics = probe_metrics(client_target)
    with MetricsSampler(target.base_url, prefix, interval_s=1.0) as sampler:
        out = run_blocking(run_load(client_target, list(workload.requests), workload.shape(), timeout_s, timeout_s,
                                    progress=True))
    settings = {"base_url": target.base_url, "model": target.model, "endpoint": "chat", "dataset": workload.name,
                "num_prompts": len(workload.requests), "request_rate": float("inf"), "ignore_eos": target.ignore_eos,
                "goodput_slo_ms": slo_ms}
    metrics = compute_metrics(out.records, out.duration_s, slo_ms)
    return BenchResult(settings, metrics, out.records, server_metrics), sampler


def problems(result: BenchResult) -> list[str]:
    """What the learner must know before reading the table: failed requests and a missing /metrics."""
    lines = []
    if result.metrics.failed:
        lines.append(t(f"{result.metrics.failed} 个请求失败，第一个错误：{result.first_error}",
                       f"{result.metrics.failed} requests failed; the first error: {result.first_error}"))
    if result.server_metrics not in (None, "available"):
        lines.append(t(f"/metrics 不可用：{result.server_metrics}，KV 使用与抢占无从得知",
                       f"/metrics is {result.server_metrics}: KV usage and preemptions are unknown"))
    return lines
