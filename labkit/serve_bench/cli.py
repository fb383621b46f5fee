"""``labkit bench``: drive any OpenAI-compatible server and print ``vllm bench serve``'s metrics."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import math
import platform

from labkit.serve_bench.client import ENDPOINTS, Target, probe_metrics
from labkit.serve_bench.client_metrics import BenchMetrics, compute_metrics, parse_goodput
from labkit.serve_bench.load_generator import LoadShape, run_load
from labkit.serve_bench.results import BenchResult
from labkit.serve_bench.workload import DATASETS, build_workload

DEFAULT_OUTPUT_LEN = 128


def add_bench_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-url", default="http://127.0.0.1:8000", help="the server (with or without /v1)")
    parser.add_argument("--model", required=True, help="the model name the server expects")
    parser.add_argument("--endpoint", choices=tuple(ENDPOINTS), default="completions")
    parser.add_argument("--dataset", default="chat", help=f"one of {DATASETS}, or a .jsonl of prompts")
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=DEFAULT_OUTPUT_LEN,
                        help="max_tokens for prompt-set / JSONL prompts without their own "
                             f"(default {DEFAULT_OUTPUT_LEN}: a run is always bounded)")
    parser.add_argument("--ignore-eos", action="store_true",
                        help="send ignore_eos: true, so each request produces exactly its output length "
                             "(a vLLM / SGLang / labkit serve extension; other servers refuse it)")
    parser.add_argument("--max-prompt-len", type=int, default=256, help="trace datasets: longest prompt (words)")
    parser.add_argument("--max-output-len", type=int, default=128, help="trace datasets: longest output (tokens)")
    parser.add_argument("--request-rate", type=float, default=math.inf, help="requests/s; inf = all at once")
    parser.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of the gaps; 1 = Poisson")
    parser.add_argument("--max-concurrency", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--goodput", nargs="+", default=None, metavar="NAME:MS",
                        help="objectives, e.g. ttft:2000 tpot:200 e2el:10000 (milliseconds)")
    parser.add_argument("--request-timeout", type=float, default=600.0, help="seconds per request")
    parser.add_argument("--max-duration", type=float, default=3600.0, help="seconds for the whole run")
    parser.add_argument("--result-file", default=None, help="write the result JSON here")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--no-progress", action="store_true")


def run_bench(args: argparse.Namespace) -> BenchResult:
    slo = parse_goodput(args.goodput)
    shape = LoadShape(args.request_rate, args.burstiness, args.max_concurrency, args.seed)
    workload = build_workload(args.dataset, args.num_prompts, args.seed, args.output_len,
                              args.max_prompt_len, args.max_output_len)
    if args.output_len is not None and args.output_len < 1:
        raise ValueError(f"output_len must be >= 1, got {args.output_len}")
    target = Target(args.base_url, args.model, args.endpoint, args.temperature, args.api_key, args.ignore_eos)
    outcome = asyncio.run(run_load(target, workload, shape, args.request_timeout, args.max_duration,
                                   progress=not args.no_progress))
    metrics = compute_metrics(outcome.records, outcome.duration_s, slo)
    settings = {k: getattr(args, k) for k in ("base_url", "model", "endpoint", "dataset", "num_prompts",
                                              "output_len", "ignore_eos", "request_rate", "burstiness",
                                              "max_concurrency", "seed", "temperature")}
    settings.update(goodput_slo_ms=slo, date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    client_host=platform.node(), client_cpu=platform.processor() or platform.machine())
    return BenchResult(settings, metrics, outcome.records, probe_metrics(target))


def format_report(metrics: BenchMetrics, settings: dict, first_error: str | None = None,
                  server_metrics: str | None = None, failures: dict[str, int] | None = None) -> str:
    rows = [("Successful requests", metrics.completed), ("Failed requests", metrics.failed)]
    if metrics.incomplete:
        rows.append(("  of which incomplete streams", metrics.incomplete))
    if metrics.cut or metrics.not_sent:
        rows += [("Cut at --max-duration (in flight)", metrics.cut), ("Not sent before --max-duration", metrics.not_sent)]
    rows += [("Benchmark duration (s)", metrics.duration_s), ("Total input tokens", metrics.total_input_tokens),
             ("Total generated tokens", metrics.total_output_tokens),
             ("Request throughput (req/s)", metrics.request_throughput),
             ("Output token throughput (tok/s)", metrics.output_throughput),
             ("Total token throughput (tok/s)", metrics.total_token_throughput)]
    if metrics.goodput is not None:
        rows.append(("Request goodput (req/s)", metrics.goodput))
    lines = [" Serving Benchmark Result ".center(56, "="),
             f"{'Request rate (req/s)':<40}{settings.get('request_rate')!s:>16}"]
    lines += [f"{name:<40}{value:>16.2f}" if isinstance(value, float) else f"{name:<40}{value:>16}"
              for name, value in rows]
    for key, title in (("ttft", "Time to First Token"), ("tpot", "Time per Output Token (excl. 1st token)"),
                       ("itl", "Inter-token Latency"), ("e2el", "End-to-end Latency")):
        s = getattr(metrics, key)
        lines.append(f" {title} ".center(56, "-"))
        for stat, value in (("Mean", s.mean_ms), ("Median", s.median_ms), ("P90", s.p90_ms), ("P99", s.p99_ms)):
            shown = "—" if value is None else f"{value:.2f}"
            lines.append(f"{f'{stat} {key.upper()} (ms)':<40}{shown:>16}")
    lines.append("=" * 56)
    for kind, count in (failures or {}).items():
        lines.append(f"{'Failed: ' + kind:<48}{count:>8}")
    if first_error is not None:
        lines.append(f"First error: {first_error}")
    if server_metrics is not None:
        lines.append(f"Server /metrics: {server_metrics}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="labkit bench",
                                     description="Benchmark any OpenAI-compatible server (vllm bench serve's metrics)")
    add_bench_args(parser)
    args = parser.parse_args(argv)
    try:
        result = run_bench(args)
    except ValueError as exc:
        parser.error(str(exc))
    print(format_report(result.metrics, result.settings, result.first_error, result.server_metrics,
                        result.failures))
    if args.result_file:
        print(f"result file: {result.save(args.result_file)}")
