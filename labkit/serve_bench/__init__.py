"""``labkit bench``: a client for any OpenAI-compatible server, with ``vllm bench serve``'s load
model and metrics (docs/serving.md). Notebooks load its result files with ``load_results``."""

from labkit.serve_bench.client_metrics import BenchMetrics, RequestRecord, compute_metrics
from labkit.serve_bench.results import BenchResult, load_result, load_results, results_table

__all__ = ["BenchMetrics", "BenchResult", "RequestRecord", "compute_metrics", "load_result", "load_results",
           "results_table", "latency_cdf", "ttft_vs_rate"]


def __getattr__(name):
    # plotly is imported only when a figure is asked for.
    if name in ("latency_cdf", "ttft_vs_rate"):
        from labkit.serve_bench import figures
        return getattr(figures, name)
    raise AttributeError(f"module 'labkit.serve_bench' has no attribute {name!r}")
