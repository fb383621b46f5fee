"""The result file of ``labkit bench`` (JSON) and what a notebook does with it.

    from labkit.serve_bench import load_results, results_table, latency_cdf, ttft_vs_rate
    results = load_results("results/*.json")       # one call: every run, sorted by request rate
    results_table(results)                          # the summary table (HTML in Jupyter)
    latency_cdf(results, "ttft"); ttft_vs_rate(results)
"""

from __future__ import annotations

import glob
import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from labkit.report.tables import Table
from labkit.serve_bench.client import failure_kind
from labkit.serve_bench.client_metrics import BenchMetrics, RequestRecord, Summary

LATENCIES = ("ttft", "tpot", "itl", "e2el")


@dataclass
class BenchResult:
    """One run: how it was driven, what it measured, and every request's record."""

    settings: dict
    metrics: BenchMetrics
    requests: list[RequestRecord] = field(default_factory=list)
    server_metrics: str | None = None       # "available" / "not available (HTTP 404)"; None: not probed

    @property
    def first_error(self) -> str | None:
        """Why the first failed request failed (a run of 0 completed says why here)."""
        return next((r.error or "failed" for r in self.requests if not r.success and r.sent and not r.cut), None)

    @property
    def failures(self) -> dict[str, int]:
        """Failed requests by kind of failure, most frequent first ({"finish_reason 'abort'": 31})."""
        kinds = Counter(failure_kind(r.error or "failed") for r in self.requests
                        if not r.success and r.sent and not r.cut)
        return dict(kinds.most_common())

    @property
    def request_rate(self) -> float:
        return float(self.settings.get("request_rate", math.inf))

    @property
    def label(self) -> str:
        rate = self.request_rate
        return f"{self.settings.get('model', '?')} @ {'inf' if math.isinf(rate) else f'{rate:g}'} req/s"

    def to_json(self) -> dict:
        settings = {k: (str(v) if isinstance(v, float) and math.isinf(v) else v) for k, v in self.settings.items()}
        requests = [{k: v for k, v in asdict(r).items() if k != "text"} for r in self.requests]
        return {"settings": settings, "metrics": asdict(self.metrics), "first_error": self.first_error,
                "failures": self.failures, "server_metrics": self.server_metrics, "requests": requests}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1, ensure_ascii=False), encoding="utf-8")
        return path

    @classmethod
    def from_json(cls, data: dict) -> "BenchResult":
        settings = dict(data["settings"])
        if isinstance(settings.get("request_rate"), str):
            settings["request_rate"] = float(settings["request_rate"])
        m = dict(data["metrics"])
        for name in LATENCIES:
            m[name] = Summary(**m[name])
        return cls(settings, BenchMetrics(**m), [RequestRecord(**r) for r in data.get("requests", [])],
                   data.get("server_metrics"))


def load_result(path: str | Path) -> BenchResult:
    return BenchResult.from_json(json.loads(Path(path).read_text(encoding="utf-8")))


def load_results(*patterns: str | Path) -> list[BenchResult]:
    """Every result file matching the glob patterns, sorted by request rate."""
    paths = sorted({p for pattern in patterns for p in glob.glob(str(pattern))})
    if not paths:
        raise FileNotFoundError(f"no result files match {patterns}")
    return sorted((load_result(p) for p in paths), key=lambda r: r.request_rate)


def results_table(results: list[BenchResult], caption: str = "labkit bench") -> Table:
    headers = ["request rate (req/s)", "completed", "req/s", "output tok/s", "goodput (req/s)",
               "TTFT median / P99 (ms)", "TPOT median / P99 (ms)", "ITL median / P99 (ms)", "E2EL median (ms)"]
    rows = []
    for r in results:
        m = r.metrics
        rows.append([f"{r.request_rate:g}", m.completed, f"{m.request_throughput:.2f}", m.output_throughput,
                     None if m.goodput is None else f"{m.goodput:.2f}", _pair(m.ttft), _pair(m.tpot), _pair(m.itl),
                     m.e2el.median_ms])
    return Table(headers, rows, caption=caption,
                 notes=["TPOT = (E2EL − TTFT) / (output tokens − 1); ITL = every gap between streamed chunks "
                        "(vllm bench serve's definitions; AIPerf's 'ITL' is this TPOT)."])


def _pair(s: Summary) -> str:
    if s.median_ms is None:
        return "—"
    return f"{s.median_ms:,.1f} / {s.p99_ms:,.1f}"
