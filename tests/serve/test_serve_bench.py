"""labkit bench: metric arithmetic on known timings, the load model, result files, and a run
against labkit serve whose counts and token totals must agree with the server's /metrics."""

from __future__ import annotations

import asyncio
import json
import math
import threading

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from labkit.i18n import get_language, set_language
from labkit.labs.lab05_engine_choice import external
from labkit.labs.lab05_engine_choice.ablation import Workload
from labkit.serve import BackgroundServer, ServedModel
from labkit.serve.limits import ServeLimits
from labkit.serve_bench import BenchResult, compute_metrics, latency_cdf, load_results, results_table, ttft_vs_rate
from labkit.serve_bench.cli import DEFAULT_OUTPUT_LEN, format_report
from labkit.serve_bench.cli import main as bench_main
from labkit.serve_bench.client import Target
from labkit.serve_bench.client_metrics import RequestRecord, Summary, parse_goodput
from labkit.serve_bench.load_generator import LoadShape, arrival_gaps, run_load
from labkit.serve_bench.workload import BenchRequest, build_workload
from tests.serve_util import PacedEngine, running, scrape, serving, sim_llm, strict_openai_server, wait_until

pytestmark = pytest.mark.timeout(180)     # a stuck run fails its test with every thread's stack

# ------------------------------------------------------------------------ a scripted fake server


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class ScriptedStream(httpx.AsyncByteStream):
    """Server-sent events of an OpenAI completion; the clock moves by ``delays[i]`` before chunk i."""

    def __init__(self, clock: FakeClock, texts: list[str], delays: list[float], usage: dict):
        self.clock, self.texts, self.delays, self.usage = clock, texts, delays, usage

    async def __aiter__(self):
        for text, delay in zip(self.texts, self.delays):
            self.clock.now += delay
            chunk = {"choices": [{"index": 0, "text": text, "finish_reason": None}]}
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        self.clock.now += self.delays[len(self.texts)]       # the gap before the stream ends
        yield f"data: {json.dumps({'choices': [], 'usage': self.usage})}\n\ndata: [DONE]\n\n".encode()


class ScriptedServer(httpx.AsyncBaseTransport):
    """Answers request i with ``scripts[i]`` = (delays, output tokens); records the bodies sent."""

    def __init__(self, clock: FakeClock, scripts: list[tuple[list[float], int]]):
        self.clock, self.scripts, self.bodies = clock, list(scripts), []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        delays, num_tokens = self.scripts[len(self.bodies) - 1]
        texts = [f"t{i} " for i in range(len(delays) - 1)]
        usage = {"prompt_tokens": 5, "completion_tokens": num_tokens, "total_tokens": 5 + num_tokens}
        return httpx.Response(200, stream=ScriptedStream(self.clock, texts, delays, usage),
                              headers={"content-type": "text/event-stream"})


def test_ttft_tpot_itl_e2el_and_goodput_from_scripted_timings_are_exact():
    # request: delays before each chunk, then before the end; chunks carry 1 token except the last run
    scripts = [([0.100, 0.020, 0.030, 0.050, 0.000], 4),
               ([0.200, 0.010, 0.010, 0.010, 0.070], 4),
               ([0.300, 0.040, 0.000], 6)]              # 6 tokens in 2 chunks (e.g. speculative decoding)
    clock = FakeClock()
    server = ScriptedServer(clock, scripts)
    target = Target("http://fake", "m", "completions")
    outcome = asyncio.run(run_load(target, [BenchRequest("p", 4)] * 3, LoadShape(max_concurrency=1),
                                   progress=False, transport=server, clock=clock))
    m = compute_metrics(outcome.records, outcome.duration_s, parse_goodput(["ttft:250", "tpot:30"]))
    approx = lambda x: pytest.approx(x, rel=1e-9, abs=1e-9)   # noqa: E731
    assert [r.ttft_s for r in outcome.records] == [approx(0.1), approx(0.2), approx(0.3)]
    assert [r.e2el_s for r in outcome.records] == [approx(0.2), approx(0.3), approx(0.34)]
    assert [r.tpot_s for r in outcome.records] == [approx(0.1 / 3), approx(0.1 / 3), approx(0.04 / 5)]
    assert outcome.duration_s == approx(0.84) and m.completed == 3 and m.total_output_tokens == 14
    itl_ms = sorted([20, 30, 50, 10, 10, 10, 40])
    assert m.itl.mean_ms == approx(sum(itl_ms) / 7) and m.itl.median_ms == approx(20)
    assert m.itl.p99_ms == approx(50 - 0.06 * 10)               # linear interpolation between 40 and 50
    assert m.ttft.mean_ms == approx(200) and m.ttft.p90_ms == approx(280)
    assert m.e2el.median_ms == approx(300)
    assert m.request_throughput == approx(3 / 0.84) and m.output_throughput == approx(14 / 0.84)
    # TPOT 33.3 ms misses 30 ms for the first two; the third misses TTFT 250 ms: nobody meets both.
    assert m.goodput == 0.0
    assert compute_metrics(outcome.records, 0.84, {"ttft": 250}).goodput == approx(2 / 0.84)
    assert server.bodies[0]["stream"] is True and "ignore_eos" not in server.bodies[0]      # opt-in only
    assert server.bodies[0]["stream_options"] == {"include_usage": True} and server.bodies[0]["max_tokens"] == 4


def test_a_failed_request_is_counted_not_averaged():
    ok = RequestRecord(success=True, ttft_s=0.1, e2el_s=0.5, output_tokens=5, itl_s=[0.1] * 4)
    m = compute_metrics([ok, RequestRecord(error="HTTP 500")], duration_s=1.0)
    assert (m.completed, m.failed, m.goodput) == (1, 1, None) and m.tpot.mean_ms == pytest.approx(100)


def test_goodput_objectives_are_checked():
    assert parse_goodput(["ttft:500", "e2el:2000"]) == {"ttft": 500.0, "e2el": 2000.0}
    for bad in (["ttfb:5"], ["ttft"], ["tpot:fast"], ["e2el:-1"]):
        with pytest.raises(ValueError, match="goodput"):
            parse_goodput(bad)


# ------------------------------------------------- what counts as a completed request (vLLM's rule)


def sse(*chunks) -> list[bytes]:
    """Server-sent event lines: dicts as JSON chunks, strings as they are (``[DONE]``, bad data)."""
    return [f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n".encode() for c in chunks]


ROLE_ONLY = {"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
EMPTY_STOP = {"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "stop"}]}
USAGE_0 = {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 0, "total_tokens": 7}}


class RawStream(httpx.AsyncByteStream):
    """Sends ``parts`` in order, the clock moving 50 ms before each; an exception part is raised."""

    def __init__(self, clock: FakeClock, parts: list):
        self.clock, self.parts = clock, parts

    async def __aiter__(self):
        for part in self.parts:
            self.clock.now += 0.050
            if isinstance(part, Exception):
                raise part
            yield part


class RawServer(httpx.AsyncBaseTransport):
    """Answers request i with ``replies[i]`` = (HTTP status, the body's parts)."""

    def __init__(self, clock: FakeClock, replies: list[tuple[int, list]]):
        self.clock, self.replies, self.sent = clock, list(replies), 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        status, parts = self.replies[self.sent]
        self.sent += 1
        return httpx.Response(status, stream=RawStream(self.clock, parts),
                              headers={"content-type": "text/event-stream" if status == 200 else "application/json"})


def run_raw(replies: list[tuple[int, list]], endpoint: str = "chat") -> tuple[list[RequestRecord], float]:
    clock = FakeClock()
    outcome = asyncio.run(run_load(Target("http://fake", "m", endpoint), [BenchRequest("p", 8)] * len(replies),
                                   LoadShape(max_concurrency=1), progress=False,
                                   transport=RawServer(clock, replies), clock=clock))
    return outcome.records, outcome.duration_s


@pytest.mark.parametrize("endpoint, parts", [
    ("chat", sse(ROLE_ONLY, EMPTY_STOP, USAGE_0, "[DONE]")),                  # transformers serve, EOS at once
    ("chat", sse(ROLE_ONLY, "[DONE]")),                                       # no usage chunk: 0 text chunks
    ("completions", sse({"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}, USAGE_0, "[DONE]")),
    ("completions", sse("[DONE]")),                                            # nothing but the end marker
], ids=["chat-usage", "chat-no-usage", "completions-usage", "completions-done-only"])
def test_an_empty_completion_is_a_success_with_0_output_tokens(endpoint, parts):
    (record,), _ = run_raw([(200, parts)], endpoint)
    assert record.success, record.error
    assert (record.output_tokens, record.text, record.itl_s, record.tpot_s) == (0, "", [], None)
    assert record.ttft_s == pytest.approx(0.050) and record.e2el_s == pytest.approx(0.050 * len(parts))


def test_empty_completions_count_as_completed_and_keep_tpot_itl_goodput_and_figures_defined(tmp_path):
    texted = sse(ROLE_ONLY, *({"choices": [{"index": 0, "delta": {"content": t}}]} for t in ("a", "b", "c")),
                 {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}, "[DONE]")
    empty = sse(ROLE_ONLY, EMPTY_STOP, USAGE_0, "[DONE]")
    records, duration = run_raw([(200, texted), (200, empty), (200, empty)])
    assert [r.success for r in records] == [True] * 3 and [r.output_tokens for r in records] == [3, 0, 0]
    m = compute_metrics(records, duration, {"ttft": 60, "tpot": 60})
    assert (m.completed, m.failed, m.total_output_tokens, m.total_input_tokens) == (3, 0, 3, 21)
    approx = lambda x: pytest.approx(x, rel=1e-9, abs=1e-9)   # noqa: E731
    # TTFT: the first text chunk (100 ms: the role chunk came first) / an empty reply's first chunk (50 ms)
    assert [r.ttft_s for r in records] == [approx(0.1), approx(0.05), approx(0.05)]
    assert m.ttft.median_ms == approx(50) and m.e2el.median_ms == approx(200)
    assert (m.tpot.mean_ms, m.tpot.p99_ms) == (approx(100), approx(100))        # (300 - 100) ms / 2, texted only
    assert m.itl.mean_ms == approx(50) and m.itl.p99_ms == approx(50)          # 2 gaps, both from the texted one
    assert m.goodput == approx(2 / duration) and m.output_throughput == approx(3 / duration)
    none = compute_metrics(records[1:], duration, {"tpot": 1})
    assert none.tpot == none.itl == Summary(None, None, None, None) and none.goodput == approx(2 / duration)
    report = format_report(none, {"request_rate": math.inf})
    assert "Mean TPOT (ms)" in report and "—" in report and reported(report, "Successful requests") == "2"
    BenchResult({"model": "m", "request_rate": 2.0}, m, records).save(tmp_path / "a.json")
    BenchResult({"model": "m", "request_rate": math.inf}, none, records[1:]).save(tmp_path / "b.json")
    results = load_results(tmp_path / "*.json")
    assert [r.metrics.completed for r in results] == [3, 2] and all(r.first_error is None for r in results)
    assert "—" in results_table(results)._repr_html_() and len(ttft_vs_rate(results).data) == 2
    for metric in ("ttft", "tpot", "itl", "e2el"):
        assert len(latency_cdf(results, metric).data) == 2
    assert list(latency_cdf(results, "tpot").data[1].x) == []


@pytest.mark.parametrize("status, parts, error", [
    (500, [b'{"error": {"message": "boom"}}'], "HTTP 500: "),
    (200, [], "the stream ended without a single valid chunk"),                 # closed at once
    (200, [b": keep-alive\n\n", b"event: ping\n\n"], "the stream ended without a single valid chunk"),
    (200, sse(ROLE_ONLY, "not json"), "malformed chunk (not JSON): 'not json'"),
    (200, sse({"object": "chat.completion.chunk"}, "[DONE]"), "malformed chunk (not an OpenAI stream chunk)"),
    (200, sse({"error": {"message": "out of memory", "code": 500}}, "[DONE]"),
     'the server reported an error mid-stream: {"message": "out of memory"'),
    (200, sse(ROLE_ONLY, {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}, {"error": {"message": "abort"}}),
     'the server reported an error mid-stream: {"message": "abort"}'),      # text first, then the error
    (200, sse(ROLE_ONLY) + [httpx.ReadError("connection reset")], "ReadError: connection reset"),
], ids=["http-500", "closed-at-once", "only-comments", "not-json", "not-a-chunk", "error-chunk",
        "error-after-text", "connection-reset"])
def test_a_request_fails_on_http_and_transport_errors_malformed_chunks_or_no_chunk(status, parts, error):
    (record,), duration = run_raw([(status, parts)])
    assert not record.success and record.error.startswith(error), record.error
    m = compute_metrics([record], duration, {"ttft": 1000})
    assert (m.completed, m.failed, m.total_output_tokens, m.goodput, m.ttft.mean_ms) == (0, 1, 0, 0.0, None)


# ------------------------------------------------------------------------------- the load model

def test_gaps_are_gamma_distributed_with_mean_one_over_the_rate():
    for burstiness in (0.5, 1.0, 4.0):
        gaps = arrival_gaps(20_000, LoadShape(request_rate=8.0, burstiness=burstiness, seed=1))
        mean = sum(gaps) / len(gaps)
        var = sum((g - mean) ** 2 for g in gaps) / len(gaps)
        assert mean == pytest.approx(1 / 8, rel=0.03)
        assert var / mean**2 == pytest.approx(1 / burstiness, rel=0.08)     # gamma: CV² = 1 / shape
    assert arrival_gaps(3, LoadShape()) == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="request_rate"):
        LoadShape(request_rate=0)


def test_workloads_come_from_prompt_sets_traces_and_jsonl(tmp_path):
    assert len(build_workload("chat", 40)) == 40
    trace = build_workload("azure-code", 20, seed=2, max_prompt_len=64, max_output_len=16)
    assert all(len(r.prompt.split()) <= 64 and 1 <= r.output_len <= 16 for r in trace)
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a", "output_len": 3}\n{"prompt": "b"}\n')
    assert build_workload(str(path), 3, output_len=7) == [BenchRequest("a", 3), BenchRequest("b", 7),
                                                          BenchRequest("a", 3)]
    with pytest.raises(ValueError, match="dataset"):
        build_workload("nope", 3)


# ------------------------------------------------------------------------------ against labkit serve

def test_bench_against_labkit_serve_agrees_with_the_servers_metrics(tmp_path, capsys):
    with serving(sim_llm(num_blocks=256, max_num_seqs=16), "sim") as server:
        before = scrape(server.base_url)
        result_file = tmp_path / "run.json"
        bench_main(["--base-url", server.base_url, "--model", "sim", "--dataset", "synthetic",
                    "--num-prompts", "24", "--request-rate", "60", "--max-output-len", "24",
                    "--goodput", "ttft:60000", "--result-file", str(result_file), "--no-progress",
                    "--request-timeout", "60", "--max-duration", "120"])
        after = scrape(server.base_url)
    result = load_results(tmp_path / "*.json")[0]
    m = result.metrics
    delta = lambda name: after.get(name, 0) - before.get(name, 0)   # noqa: E731
    assert (m.completed, m.failed) == (24, 0) and m.goodput == pytest.approx(m.request_throughput)
    assert m.completed == delta("labkit:request_success_total")
    assert m.total_output_tokens == delta("labkit:generation_tokens_total")
    assert m.total_input_tokens == delta("labkit:prompt_tokens_total")
    assert m.total_output_tokens == sum(r.output_tokens for r in result.requests)
    assert "Serving Benchmark Result" in capsys.readouterr().out


def test_result_files_load_into_a_table_and_figures(tmp_path):
    for rate in (2.0, math.inf):
        rec = RequestRecord(success=True, ttft_s=0.2 if rate == 2 else 0.5, e2el_s=1.0, output_tokens=3,
                            itl_s=[0.3, 0.5])
        BenchResult({"model": "m", "request_rate": rate}, compute_metrics([rec], 1.0), [rec]).save(
            tmp_path / f"r{rate}.json")
    results = load_results(tmp_path / "*.json")
    assert [r.request_rate for r in results] == [2.0, math.inf]
    assert "TTFT" in results_table(results)._repr_html_()
    assert len(latency_cdf(results, "itl").data) == 2 and len(ttft_vs_rate(results).data) == 2
    assert "Mean TTFT (ms)" in format_report(results[0].metrics, results[0].settings)


# ------------------------------------------------------------------- against servers without extensions

def reported(out: str, name: str) -> str:
    """The value on the summary line that starts with ``name``."""
    return next(line[len(name):].strip() for line in out.splitlines() if line.startswith(name))


def bench_args(base_url: str, *extra: str) -> list[str]:
    return ["--base-url", base_url, "--model", "m", "--dataset", "chat", "--num-prompts", "4", "--no-progress",
            "--request-timeout", "30", "--max-duration", "60", *extra]


@pytest.mark.parametrize("endpoint, length_field", [("completions", "max_tokens"), ("chat", "max_completion_tokens")])
def test_by_default_bench_sends_only_the_openai_api_and_a_strict_server_completes_it(endpoint, length_field, capsys):
    with strict_openai_server() as (base_url, bodies):
        bench_main(bench_args(base_url, "--endpoint", endpoint, "--output-len", "5"))
    out = capsys.readouterr().out
    assert len(bodies) == 4 and all(b[length_field] == 5 and "ignore_eos" not in b for b in bodies), bodies
    assert (reported(out, "Successful requests"), reported(out, "Failed requests")) == ("4", "0")
    assert reported(out, "Total generated tokens") == "20" and "First error" not in out


def test_a_dataset_without_output_lengths_still_sends_a_bound_on_every_request():
    with strict_openai_server() as (base_url, bodies):
        bench_main(bench_args(base_url))
    assert [b.get("max_tokens") for b in bodies] == [DEFAULT_OUTPUT_LEN] * 4


def test_ignore_eos_is_opt_in_and_a_server_that_refuses_it_is_reported_with_a_missing_metrics(tmp_path, capsys):
    with strict_openai_server() as (base_url, bodies):
        bench_main(bench_args(base_url, "--ignore-eos", "--output-len", "5", "--result-file", str(tmp_path / "r.json")))
    out = capsys.readouterr().out
    assert all(b["ignore_eos"] is True for b in bodies) and len(bodies) == 4
    assert "First error: HTTP 422" in out and "ignore_eos" in out.split("First error:")[1]
    assert "Server /metrics: not available (HTTP 404)" in out
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["metrics"]["completed"] == 0 and saved["first_error"].startswith("HTTP 422")
    assert saved["server_metrics"] == "not available (HTTP 404)" and saved["settings"]["ignore_eos"] is True
    assert load_results(tmp_path / "*.json")[0].server_metrics == "not available (HTTP 404)"


def test_with_ignore_eos_labkit_serve_produces_exactly_the_requested_lengths(capsys):
    with serving(sim_llm(num_blocks=256, max_num_seqs=16), "sim") as server:
        bench_main(["--base-url", server.base_url, "--model", "sim", "--dataset", "chat", "--num-prompts", "6",
                    "--output-len", "9", "--ignore-eos", "--no-progress", "--request-timeout", "60"])
    out = capsys.readouterr().out
    assert reported(out, "Total generated tokens") == "54" and reported(out, "Server /metrics:") == "available"


def test_lab05_external_path_says_why_a_run_failed_and_when_metrics_are_missing():
    requests = tuple(BenchRequest(f"question {i}", 4) for i in range(3))
    workload = Workload("chat", "对话", "chat", requests)
    with strict_openai_server() as (base_url, _):
        plain, _ = external.bench_external(external.EngineTarget(base_url, "m", "transformers"), workload, {})
        refused, _ = external.bench_external(external.EngineTarget(base_url, "m", "transformers", ignore_eos=True),
                                             workload, {})
    assert plain.metrics.completed == 3 and plain.metrics.total_output_tokens == 12
    before = get_language()
    set_language("en")
    try:
        assert external.problems(plain) == ["/metrics is not available (HTTP 404): KV usage and preemptions are unknown"]
        first = external.problems(refused)[0]
    finally:
        set_language(before)
    assert refused.metrics.completed == 0 and first.startswith("3 requests failed; the first error: HTTP 422")


# ------------------------------------------------------------------ streams the server ends early

def test_a_stream_that_ends_with_finish_reason_abort_or_error_is_a_failure_with_its_reason():
    text = {"choices": [{"index": 0, "text": "a", "finish_reason": None}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    records, _ = run_raw([(200, sse(text, {"choices": [{"index": 0, "text": "", "finish_reason": reason}]}, usage,
                                    "[DONE]")) for reason in ("abort", "error", "length")], "completions")
    assert [r.success for r in records] == [False, False, True]
    assert records[0].error == "the server ended the stream with finish_reason 'abort' after 1 output tokens"
    assert "finish_reason 'error'" in records[1].error


def aborting_app(bodies: list[dict]):
    """A server that ends some streams early, as a restart or an engine failure does. Request i of
    every four: 0 runs to max_tokens; 1 ends with finish_reason "abort" after 2 tokens; 2 stops early
    (finish_reason "stop", 2 tokens: a short reply, unless ignore_eos asked for the full length);
    3 sends an error event. Every stream reports usage and ends with [DONE]."""
    app = FastAPI()

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        kind = len(bodies) % 4
        bodies.append(body)
        n = body["max_tokens"] if kind == 0 else 2

        def events():
            for i in range(n):
                last = i == n - 1
                reason = {0: "length", 1: "abort", 2: "stop"}.get(kind) if last else None
                yield sse_line({"choices": [{"index": 0, "text": f" w{i}", "finish_reason": reason}]})
            if kind == 3:
                yield sse_line({"error": {"message": "the engine failed", "type": "internal_error"}})
            yield sse_line({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n}})
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def sse_line(payload: dict) -> str:
    return f"data: {json.dumps(payload)}\n\n"


@pytest.mark.parametrize("ignore_eos", [True, False], ids=["ignore-eos", "plain"])
def test_bench_counts_streams_the_server_ended_early_as_failed_with_their_reasons(tmp_path, capsys, ignore_eos):
    bodies: list[dict] = []
    with running(aborting_app(bodies)) as base_url:
        bench_main(bench_args(base_url, "--num-prompts", "8", "--output-len", "6", "--max-concurrency", "1",
                              "--result-file", str(tmp_path / "r.json"), *(["--ignore-eos"] if ignore_eos else [])))
    out = capsys.readouterr().out
    short = "fewer output tokens than asked (ignore_eos)"
    expected = {"finish_reason 'abort'": 2, "the server reported an error mid-stream": 2}
    if ignore_eos:
        expected[short] = 2
    assert (reported(out, "Successful requests"), reported(out, "Failed requests")) == (
        str(8 - sum(expected.values())), str(sum(expected.values())))
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["failures"] == expected and saved["metrics"]["failed"] == sum(expected.values())
    assert all(reported(out, f"Failed: {kind}") == str(count) for kind, count in expected.items())
    errors = [r["error"] for r in saved["requests"]]
    assert errors[1] == "the server ended the stream with finish_reason 'abort' after 2 output tokens"
    assert errors[2] == ("with ignore_eos the stream ended after 2 of the 6 output tokens asked (finish_reason 'stop')"
                         if ignore_eos else "")


def test_bench_against_labkit_serve_whose_engine_fails_counts_every_open_stream_failed(tmp_path, capsys, monkeypatch):
    llm = sim_llm(num_blocks=256, max_num_seqs=16)
    with BackgroundServer(ServedModel(PacedEngine(llm.engine, steps_per_s=200), "sim")) as server:
        def device_lost(decision):
            raise RuntimeError("device lost")

        def fail_soon():                                       # the engine stops mid-run
            wait_until(lambda: llm.engine.step_count > 20, timeout=30)
            monkeypatch.setattr(llm.engine.runner, "execute", device_lost)

        threading.Thread(target=fail_soon, daemon=True).start()
        bench_main(["--base-url", server.base_url, "--model", "sim", "--dataset", "chat", "--num-prompts", "4",
                    "--output-len", "300", "--ignore-eos", "--no-progress", "--request-timeout", "60",
                    "--result-file", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert (reported(out, "Successful requests"), reported(out, "Failed requests")) == ("0", "4")
    saved = json.loads((tmp_path / "r.json").read_text())
    assert "device lost" in saved["first_error"] and sum(saved["failures"].values()) == 4


# ------------------------------------------------------------------------------ every way a stream ends

TEXT = {"choices": [{"index": 0, "text": "a", "finish_reason": None}]}
LENGTH = {"choices": [{"index": 0, "text": "b", "finish_reason": "length"}]}
USAGE_2 = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
INCOMPLETE_KIND = "incomplete (no finish_reason, usage or [DONE])"


@pytest.mark.parametrize("parts, kind", [
    (sse(TEXT, LENGTH, USAGE_2, "[DONE]"), None),                       # every mark of an end
    (sse(TEXT, LENGTH), None),                                          # finish_reason alone
    (sse(TEXT, USAGE_2), None),                                         # usage alone
    (sse(TEXT, "[DONE]"), None),                                        # [DONE] alone
    (sse(TEXT, TEXT), INCOMPLETE_KIND),                                 # text, then a clean close
    (sse(ROLE_ONLY), INCOMPLETE_KIND),                                  # the role, then a clean close
    (sse(TEXT) + [httpx.ReadError("reset")], "ReadError"),              # cut: a transport error
    (sse(TEXT, {"choices": [{"index": 0, "text": "", "finish_reason": "abort"}]}, "[DONE]"),
     "finish_reason 'abort'"),
], ids=["complete", "finish-reason-only", "usage-only", "done-only", "incomplete-text", "incomplete-role",
        "read-error", "abort"])
def test_each_ending_of_a_stream_is_its_own_outcome_and_failures_are_counted_by_kind(parts, kind):
    (record,), duration = run_raw([(200, parts)], "completions")
    assert record.success == (kind is None), record.error
    m = compute_metrics([record], duration)
    assert (m.completed, m.failed, m.incomplete) == (int(kind is None), int(kind is not None),
                                                     int(kind == INCOMPLETE_KIND))
    result = BenchResult({"request_rate": math.inf}, m, [record])
    assert result.failures == ({} if kind is None else {kind: 1})


def test_an_incomplete_stream_is_reported_against_success_in_the_summary():
    records, duration = run_raw([(200, sse(TEXT, LENGTH, USAGE_2, "[DONE]")), (200, sse(TEXT, TEXT))], "completions")
    m = compute_metrics(records, duration)
    result = BenchResult({"request_rate": math.inf}, m, records)
    out = format_report(m, result.settings, result.first_error, failures=result.failures)
    assert (reported(out, "Successful requests"), reported(out, "Failed requests")) == ("1", "1")
    assert reported(out, "  of which incomplete streams") == "1"
    assert reported(out, f"Failed: {INCOMPLETE_KIND}") == "1" and "First error: incomplete:" in out


class SlowServer(httpx.AsyncBaseTransport):
    """Each reply takes ``seconds`` of real time before its complete stream."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(self.seconds)
        return httpx.Response(200, stream=RawStream(FakeClock(), sse(TEXT, LENGTH, USAGE_2, "[DONE]")),
                              headers={"content-type": "text/event-stream"})


def test_a_time_bounded_run_counts_neither_unsent_nor_cut_requests_as_failures(capsys):
    # 2 requests a second, each answered after 0.3 s, for 1 s: some complete, one is in flight at the end
    # (cut), the rest were never sent.
    shape = LoadShape(request_rate=2.0, burstiness=1e6, max_concurrency=None)        # a gap of ~0.5 s each
    outcome = asyncio.run(run_load(Target("http://fake", "m", "completions"), [BenchRequest("p", 2)] * 20, shape,
                                   max_duration_s=1.0, progress=False, transport=SlowServer(0.3)))
    m = compute_metrics(outcome.records, outcome.duration_s)
    assert m.failed == 0 and m.completed >= 1 and m.not_sent >= 15 and m.completed + m.cut + m.not_sent == 20
    result = BenchResult({"request_rate": 2.0}, m, outcome.records)
    assert result.failures == {} and result.first_error is None
    out = format_report(m, result.settings, result.first_error, failures=result.failures)
    assert reported(out, "Failed requests") == "0" and reported(out, "Not sent before --max-duration") == str(m.not_sent)


def test_the_client_lets_go_of_an_idle_connection_before_the_server_closes_it():
    from labkit.serve.server import make_server
    from labkit.serve_bench.load_generator import KEEPALIVE_EXPIRY_S

    app = FastAPI()
    app.state.engine_loop = None
    assert KEEPALIVE_EXPIRY_S < make_server(app, ServeLimits(), "warning").config.timeout_keep_alive    # labkit
    assert KEEPALIVE_EXPIRY_S < uvicorn.Config(FastAPI()).timeout_keep_alive      # vLLM's server too
    # and labkit serve outlasts httpx's default (the official openai client's)
    assert httpx.Limits().keepalive_expiry < make_server(app, ServeLimits(), "warning").config.timeout_keep_alive
