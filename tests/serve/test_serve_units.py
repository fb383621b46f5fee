"""labkit serve's rules, each from its definition, on its own functions (no model, no server, no sockets).

These are the fast selection ``make mutation`` gives the serve modules: each rule at its exact boundary
(one byte, one request, one token either side), each unit in its own scale, each counter counting what
its name says. The same rules are also checked end to end over HTTP by test_serve*.py (slower).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from labkit.sampling_params import SamplingParams
from labkit.serve import limits, protocol, responses
from labkit.serve.engine_loop import Accepted, Rejected, SequenceDelta, check_context
from labkit.serve.limits import ConcurrencyGate, RequestBody, ServeLimits
from labkit.serve.prometheus import COUNTERS, E2E_BUCKETS, GAUGES, ITL_BUCKETS, TTFT_BUCKETS, ServerMetrics
from labkit.serve.protocol import ChatCompletionRequest, CompletionRequest
from labkit.serve.request_stream import RequestStream

# ------------------------------------------------------------------------------------------ metrics


def samples(payload: bytes) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value, from Prometheus text."""
    out = {}
    for family in text_string_to_metric_families(payload.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_engine_stats_are_exported_under_their_names_with_kv_usage_as_a_fraction():
    metrics = ServerMetrics("m")
    stats = {"num_requests_running": 3, "num_requests_waiting": 5, "kv_cache_usage_perc": 37.5,
             "prefix_cache_queries": 11, "prefix_cache_hits": 7, "num_preemptions": 2, "spec_decode_num_drafts": 13,
             "spec_decode_num_draft_tokens": 17, "spec_decode_num_accepted_tokens": 19}
    got = samples(metrics.render(stats))
    label = (("model_name", "m"),)
    assert got[("labkit:num_requests_running", label)] == 3
    assert got[("labkit:num_requests_waiting", label)] == 5
    assert got[("labkit:kv_cache_usage_perc", label)] == 0.375          # engine: percent; exported: 0..1
    for key, (name, _) in COUNTERS.items():
        assert got[(name + "_total", label)] == stats[key], key
    # Absent or None: 0, for gauges and counters alike.
    empty = samples(metrics.render({"num_requests_running": None}))
    for name, _ in list(GAUGES.values()):
        assert empty[(name, label)] == 0
    for name, _ in COUNTERS.values():
        assert empty[(name + "_total", label)] == 0


def test_each_metric_says_what_it_is_in_its_help_and_type():
    text = ServerMetrics("m").render({}).decode()
    for name, doc in list(GAUGES.values()):
        assert f"# HELP {name} {doc}\n# TYPE {name} gauge" in text
    for name, doc in COUNTERS.values():
        assert f"# HELP {name}_total {doc}\n# TYPE {name}_total counter" in text
    # The server's own histograms and counters: what a Prometheus user reads each one is.
    for name, kind, doc in [
            ("labkit:time_to_first_token_seconds", "histogram", "Time to first token (arrival to first token)."),
            ("labkit:inter_token_latency_seconds", "histogram", "Gap between consecutive output tokens of one request."),
            ("labkit:e2e_request_latency_seconds", "histogram", "Arrival to finish."),
            ("labkit:request_success_total", "counter", "Requests finished, by reason."),
            ("labkit:prompt_tokens_total", "counter", "Prompt tokens of accepted requests."),
            ("labkit:generation_tokens_total", "counter", "Output tokens produced.")]:
        assert f"# HELP {name} {doc}\n# TYPE {name} {kind}" in text, name


def test_the_streams_schema_ends_with_the_literal_done_event():
    data = responses._sse(protocol.CompletionRequest)["itemSchema"]["properties"]["data"]["anyOf"]
    assert data[1] == {"const": "[DONE]", "description": "the last event"}


def test_a_finished_request_is_counted_by_reason_and_its_latencies_observed_in_seconds():
    metrics = ServerMetrics("m")

    class Timings:
        ttft_s, e2e_s = 0.03, 2.0

    metrics.observe_finished(Timings, [1.0, 1.125, 1.375, 1.75], "stop")
    metrics.observe_finished(Timings, [], "length")
    metrics.observe_finished(type("T", (), {"ttft_s": None, "e2e_s": None}), [5.0], "abort")
    got = samples(metrics.render({}))
    label = (("model_name", "m"),)
    for reason, count in (("stop", 1), ("length", 1), ("abort", 1)):
        assert got[("labkit:request_success_total", (("finished_reason", reason), ("model_name", "m")))] == count
    assert got[("labkit:time_to_first_token_seconds_count", label)] == 2        # None is not observed
    assert got[("labkit:time_to_first_token_seconds_sum", label)] == pytest.approx(0.06)
    assert got[("labkit:e2e_request_latency_seconds_count", label)] == 2
    assert got[("labkit:e2e_request_latency_seconds_sum", label)] == pytest.approx(4.0)
    # Three gaps between four tokens (0.125, 0.25, 0.375 s); one token alone has none.
    assert got[("labkit:inter_token_latency_seconds_count", label)] == 3
    assert got[("labkit:inter_token_latency_seconds_sum", label)] == 0.75
    for le, count in (("0.1", 0), ("0.15", 1), ("0.2", 1), ("0.3", 2), ("0.4", 3)):
        assert got[("labkit:inter_token_latency_seconds_bucket", (("le", le),) + label)] == count, le
    assert got[("labkit:time_to_first_token_seconds_bucket", (("le", "0.02"),) + label)] == 0
    assert got[("labkit:time_to_first_token_seconds_bucket", (("le", "0.04"),) + label)] == 2


def test_token_counters_count_what_they_are_told_and_the_histograms_have_their_buckets():
    metrics = ServerMetrics("m")
    metrics.prompt_tokens.inc(18)
    metrics.generation_tokens.inc(3)
    got = samples(metrics.render({}))
    label = (("model_name", "m"),)
    assert got[("labkit:prompt_tokens_total", label)] == 18
    assert got[("labkit:generation_tokens_total", label)] == 3
    for name, buckets in (("time_to_first_token_seconds", TTFT_BUCKETS), ("inter_token_latency_seconds", ITL_BUCKETS),
                          ("e2e_request_latency_seconds", E2E_BUCKETS)):
        les = [float(dict(k[1])["le"]) for k in got if k[0] == f"labkit:{name}_bucket"]
        assert les == [*buckets, float("inf")], name


def test_two_servers_in_one_process_keep_their_own_counts():
    a, b = ServerMetrics("a"), ServerMetrics("b")
    a.generation_tokens.inc(5)
    assert samples(b.render({}))[("labkit:generation_tokens_total", (("model_name", "b"),))] == 0
    assert samples(a.render({}))[("labkit:generation_tokens_total", (("model_name", "a"),))] == 5


# ------------------------------------------------------------------------------------------ protocol


def completion(**body):
    return CompletionRequest.model_validate({"model": "m", "prompt": "hi", **body})


def chat(**body):
    return ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}], **body})


def refused_field(make, **body) -> str:
    with pytest.raises(ValidationError) as info:
        make(**body)
    return ".".join(str(part) for part in info.value.errors()[0]["loc"])


def test_an_integral_float_is_its_integer_and_anything_else_is_refused():
    assert completion(max_tokens=5.0).max_tokens == 5
    assert type(completion(max_tokens=5.0).max_tokens) is int
    for bad in (5.5, True, "5"):
        assert refused_field(completion, max_tokens=bad).startswith("max_tokens"), bad


@pytest.mark.parametrize("make,field", [(completion, "max_tokens"), (completion, "n"), (completion, "temperature"),
                                        (completion, "top_p"), (completion, "top_k"), (completion, "seed"),
                                        (chat, "max_tokens"), (chat, "max_completion_tokens")])
def test_a_boolean_is_never_a_number(make, field):
    """``true`` is not 1 and ``false`` is not 0 (JSON has booleans; Python's are ints): refused, by name."""
    for value in (True, False):
        assert refused_field(make, **{field: value}).startswith(field), value


@pytest.mark.parametrize("field,low,high", [("max_tokens", 1, protocol.MAX_TOKENS_LIMIT),
                                            ("top_k", None, protocol.MAX_TOKENS_LIMIT),
                                            ("seed", None, protocol.MAX_SEED)])
def test_integer_bounds_hold_at_the_exact_limit(field, low, high):
    assert getattr(completion(**{field: high}), field) == high
    assert refused_field(completion, **{field: high + 1}).startswith(field)
    if low is not None:
        assert getattr(completion(**{field: low}), field) == low
        assert refused_field(completion, **{field: low - 1}).startswith(field)
    for make in (chat,) if field == "max_tokens" else ():
        assert make(max_completion_tokens=high).max_completion_tokens == high
        assert refused_field(make, max_completion_tokens=high + 1).startswith("max_completion_tokens")
        assert refused_field(make, max_completion_tokens=0).startswith("max_completion_tokens")


def test_prompt_token_ids_are_non_negative_and_not_empty():
    assert completion(prompt=[0, 5]).prompt == [0, 5]
    assert refused_field(completion, prompt=[-1]).startswith("prompt")
    assert refused_field(completion, prompt=[]).startswith("prompt")


def test_max_tokens_defaults_to_16_for_completions_and_is_unset_for_chat():
    assert completion().requested_max_tokens() == 16
    assert completion(max_tokens=None).requested_max_tokens() == 16
    assert completion(max_tokens=3).requested_max_tokens() == 3
    assert chat().requested_max_tokens() is None
    assert chat(max_tokens=3).requested_max_tokens() == 3
    assert chat(max_completion_tokens=4).requested_max_tokens() == 4
    assert chat(max_tokens=3, max_completion_tokens=4).requested_max_tokens() == 4
    assert chat(max_tokens=4, max_completion_tokens=3).requested_max_tokens() == 3


def test_null_is_the_default_and_the_sampling_params_carry_each_field():
    params = completion(temperature=None, top_p=None, top_k=None, n=None, seed=None).sampling_params(7)
    # OpenAI's defaults (temperature 1, not SamplingParams' greedy 0).
    assert (params.temperature, params.top_p, params.top_k, params.n, params.seed, params.ignore_eos,
            params.max_tokens) == (1.0, 1.0, 0, 1, None, False, 7)
    params = completion(temperature=0.5, top_p=0.25, top_k=3, n=2, seed=9, ignore_eos=True).sampling_params(4)
    assert (params.temperature, params.top_p, params.top_k, params.n, params.seed, params.ignore_eos,
            params.max_tokens) == (0.5, 0.25, 3, 2, 9, True, 4)
    assert completion(ignore_eos=None).sampling_params(1).ignore_eos is False
    defaults = completion()
    assert (defaults.temperature, defaults.top_p, defaults.top_k, defaults.n, defaults.seed, defaults.stream,
            defaults.ignore_eos, defaults.stop) == (1.0, 1.0, 0, 1, None, False, False, None)


def test_the_document_states_the_ranges_the_server_accepts():
    props = CompletionRequest.model_json_schema()["properties"]
    assert props["temperature"]["minimum"] == 0 and props["temperature"]["maximum"] == 100
    assert props["top_p"]["exclusiveMinimum"] == 0 and props["top_p"]["maximum"] == 1
    assert props["top_k"]["minimum"] == -1
    assert props["n"]["minimum"] == 1 and props["n"]["maximum"] == 64
    assert props["seed"]["minimum"] == 0
    text = json.dumps(props["stop"])
    assert '"maxItems": 4' in text and '"maxLength": 64' in text and '"minLength": 1' in text
    assert json.dumps(props["max_tokens"]).count(f'"maximum": {1 << 31}') == 1
    schema = CompletionRequest.model_json_schema()
    assert schema["if"]["required"] == ["stream_options"] and schema["then"]["properties"]["stream"] == {"const": True}


@pytest.mark.parametrize("stops,ok", [(["a", "b", "c", "d"], True), (["a", "b", "c", "d", "e"], False),
                                      (["x" * 64], True), (["x" * 65], False), ([""], False), (["a", ""], False)])
def test_stop_strings_at_their_limits(stops, ok):
    request = completion(stop=stops)
    if ok:
        assert request.stop_strings() == stops
    else:
        with pytest.raises(ValueError, match="stop"):
            request.stop_strings()


def test_a_single_stop_string_is_a_list_of_one_and_none_is_empty():
    assert completion(stop="\n").stop_strings() == ["\n"]
    assert completion().stop_strings() == []
    with pytest.raises(ValueError, match="at most 64 characters, got one of 65"):
        completion(stop=["ab", "x" * 65]).stop_strings()
    with pytest.raises(ValueError, match="at most 4 strings, got 5"):
        completion(stop=list("abcde")).stop_strings()


def test_stream_options_need_stream_and_usage_is_sent_only_when_asked():
    assert completion().include_usage() is False
    assert completion(stream=True).include_usage() is False
    assert completion(stream=True, stream_options={}).include_usage() is False
    assert completion(stream=True, stream_options={"include_usage": False}).include_usage() is False
    assert completion(stream=True, stream_options={"include_usage": None}).include_usage() is False
    assert completion(stream=True, stream_options={"include_usage": True}).include_usage() is True
    for stream in (False, None):
        with pytest.raises(ValueError, match="stream_options is only allowed when stream is true"):
            completion(stream=stream, stream_options={"include_usage": True}).include_usage()


@pytest.mark.parametrize("name", list(protocol.UNSUPPORTED))
def test_an_unsupported_field_is_refused_by_name_unless_it_carries_its_neutral_value(name):
    for neutral in protocol.UNSUPPORTED[name]:
        assert protocol.unsupported_field({name: neutral}) is None
    assert protocol.unsupported_field({name: None}) is None
    assert protocol.unsupported_field({name: "something"}) == name
    assert protocol.unsupported_field({name: True}) == name          # never the neutral 1, nor "on"
    assert protocol.unsupported_field({name: False}) == name         # never the neutral 0


def test_the_first_unsupported_field_is_named_and_unknown_fields_are_ignored():
    assert protocol.unsupported_field({}) is None
    assert protocol.unsupported_field({"whatever": 3}) is None
    assert protocol.unsupported_field({"logit_bias": {"1": 2}, "tools": [{}]}) == "tools"     # the list's order
    assert protocol.unsupported_field({"presence_penalty": 0.0, "best_of": 2}) == "best_of"
    assert completion(whatever=3).model_extra == {"whatever": 3}


def test_an_invalid_string_is_named_by_its_path():
    bad = "\ud800"
    assert protocol.invalid_unicode_field(bad) == "body"
    assert protocol.invalid_unicode_field("fine") is None
    assert protocol.invalid_unicode_field({"prompt": bad}) == "prompt"
    assert protocol.invalid_unicode_field({"messages": [{"role": "user", "content": "ok"},
                                                        {"role": "user", "content": bad}]}) == "messages[1].content"
    assert protocol.invalid_unicode_field({"stop": ("a", bad)}) == "stop[1]"
    assert protocol.invalid_unicode_field({"a": {bad: 1}}) == f"a.{bad}"
    assert protocol.invalid_unicode_field({"a": {"b": 1, "c": [1, 2, "x"]}, "d": 5.0}) is None
    assert protocol.invalid_unicode_field([bad]) == "[0]"


def test_unsupported_features_written_as_their_own_fields_are_refused():
    assert refused_field(completion, echo=True).startswith("echo")
    assert completion(echo=False).echo is False and completion(echo=None).echo is None
    assert refused_field(completion, logprobs=1).startswith("logprobs")
    assert refused_field(chat, logprobs=True).startswith("logprobs")
    assert chat(logprobs=False).logprobs is False


def test_chat_messages_roles_and_text_parts():
    request = chat(messages=[{"role": "system", "content": "a"}, {"role": "developer", "content": "b"},
                             {"role": "assistant", "content": [{"type": "text", "text": "c"},
                                                               {"type": "text", "text": "d"}]},
                             {"role": "user", "content": "e", "name": "ignored"}])
    assert [m.text() for m in request.messages] == ["a", "b", "cd", "e"]
    assert refused_field(chat, messages=[]).startswith("messages")
    assert refused_field(chat, messages=[{"role": "tool", "content": "x"}]).startswith("messages")
    assert refused_field(chat, messages=[{"role": "user", "content": [{"type": "image", "text": "x"}]}]).startswith(
        "messages")
    assert refused_field(completion, stream_options={"include_usage": 1}).startswith("stream_options")


# ------------------------------------------------------------------------------------------ limits


def test_the_default_body_limit_is_exactly_a_mib_plus_32_bytes_a_token():
    assert limits.default_max_body_bytes(0) == 1 << 20
    assert limits.default_max_body_bytes(8192) == (1 << 20) + 32 * 8192
    assert ServeLimits().body_limit(8192) == (1 << 20) + 32 * 8192
    assert ServeLimits(max_body_bytes=5).body_limit(8192) == 5


@pytest.mark.parametrize("name", ["header_timeout_s", "body_timeout_s", "timeout_graceful_shutdown",
                                  "stalled_stream_timeout_s", "timeout_keep_alive"])
def test_every_time_limit_must_be_positive_and_is_named(name):
    ServeLimits(**{name: 1e-3 if name.endswith("_s") else 1})
    for bad in (0, -1):
        with pytest.raises(ValueError, match=f"^{name} must be > 0, got {bad}$"):
            ServeLimits(**{name: bad})


def test_the_defaults_and_the_count_and_byte_limits_at_their_boundary():
    d = ServeLimits()
    assert (d.header_timeout_s, d.body_timeout_s, d.limit_concurrency, d.timeout_graceful_shutdown,
            d.max_body_bytes, d.stalled_stream_timeout_s, d.timeout_keep_alive) == (10.0, 10.0, 256, 5, None, 30.0, 10)
    assert ServeLimits(limit_concurrency=1).limit_concurrency == 1
    with pytest.raises(ValueError, match="^limit_concurrency must be >= 1, got 0$"):
        ServeLimits(limit_concurrency=0)
    assert ServeLimits(max_body_bytes=1).max_body_bytes == 1
    for bad in (0, 1.5, "9"):
        with pytest.raises(ValueError, match="max_body_bytes must be an int >= 1"):
            ServeLimits(max_body_bytes=bad)


def test_the_error_body_is_openais_shape():
    assert json.loads(limits.error_body(413, "too big", "invalid_request_error")) == {
        "error": {"message": "too big", "type": "invalid_request_error", "param": None, "code": None}}


class Wire:
    """An ASGI receive / send pair: ``messages`` are received in order, then a disconnect; what was sent is kept."""

    def __init__(self, *messages, hang: bool = False):
        self.messages, self.sent, self.hang, self.received = list(messages), [], hang, 0

    async def receive(self):
        self.received += 1
        if self.messages:
            return self.messages.pop(0)
        if self.hang:
            await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(self, message):
        self.sent.append(message)

    def status(self):
        return next(m["status"] for m in self.sent if m["type"] == "http.response.start")

    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")


def http(headers=()):
    return {"type": "http", "headers": list(headers)}


def chunk(body: bytes, more: bool = False):
    return {"type": "http.request", "body": body, "more_body": more}


class App:
    def __init__(self):
        self.bodies, self.calls = [], 0

    async def __call__(self, scope, receive, send):
        self.calls += 1
        self.bodies.append((await receive())["body"])
        self.after = await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("pieces", [[b"x" * 10], [b"x" * 4, b"x" * 6], [b"x" * 9, b"x"]])
def test_a_body_of_exactly_the_limit_reaches_the_app_whole(pieces):
    app, wire = App(), Wire(*[chunk(p, more=i < len(pieces) - 1) for i, p in enumerate(pieces)])
    run(RequestBody(app, timeout_s=5, max_bytes=10)(http([(b"content-length", b"10")]), wire.receive, wire.send))
    assert app.bodies == [b"x" * 10] and wire.status() == 200
    assert app.after == {"type": "http.disconnect"}          # after the replay, the real receive again


def test_a_declared_length_one_byte_past_the_limit_is_a_413_before_the_body_is_read():
    app, wire = App(), Wire(chunk(b"x" * 11))
    run(RequestBody(app, timeout_s=5, max_bytes=10)(http([(b"Content-Length", b"11")]), wire.receive, wire.send))
    assert app.calls == 0 and wire.status() == 413
    error = json.loads(wire.body())["error"]
    assert error["message"].startswith("the request body has 11 bytes, more than this server's limit of 10 bytes")
    assert error["type"] == "invalid_request_error"
    assert error["message"] == ("the request body has 11 bytes, more than this server's limit of 10 bytes "
                                "(--max-body-bytes; by default 1 MiB + 32 bytes per token of max_model_len)")
    start, payload, end = wire.sent
    assert start["status"] == 413 and dict(start["headers"]) == {
        b"content-type": b"application/json", b"connection": b"close",
        b"content-length": str(len(payload["body"])).encode()}
    # The error goes out first, the end of the response only after the rest of the body was read and dropped.
    assert payload == {"type": "http.response.body", "body": payload["body"], "more_body": True}
    assert end == {"type": "http.response.body", "body": b"", "more_body": False}


def test_a_client_waiting_for_100_continue_is_not_lingered_on():
    wire = Wire(chunk(b"x", more=True), hang=True)
    scope = http([(b"content-length", b"11"), (b"expect", b"100-continue")])
    run(RequestBody(App(), timeout_s=5, max_bytes=10)(scope, wire.receive, wire.send))
    assert wire.received == 0 and wire.status() == 413


def test_a_refused_body_is_read_to_its_end_so_the_client_sees_the_413():
    wire = Wire(chunk(b"x" * 6, more=True), chunk(b"x" * 5, more=True), chunk(b"rest", more=True), chunk(b"end"),
                chunk(b"never"))
    run(RequestBody(App(), timeout_s=5, max_bytes=10)(http(), wire.receive, wire.send))
    assert wire.status() == 413 and wire.received == 4          # read to the chunk without more_body, no further
    assert "the request body passed the limit" in json.loads(wire.body())["error"]["message"]


def test_lingering_ends_at_a_chunk_without_more_body_or_when_the_body_timeout_runs_out():
    wire = Wire(chunk(b"x" * 11, more=True), {"type": "http.request", "body": b"end"}, chunk(b"never"), hang=True)
    run(RequestBody(App(), timeout_s=0.5, max_bytes=10)(http(), wire.receive, wire.send))
    assert wire.received == 2 and wire.status() == 413         # ASGI: no more_body means the last chunk
    wire = Wire(chunk(b"x" * 11, more=True), chunk(b"x", more=True), hang=True)   # a client that never ends
    run(RequestBody(App(), timeout_s=0.05, max_bytes=10)(http(), wire.receive, wire.send))
    assert wire.received == 3 and wire.sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


def test_a_chunk_that_passes_the_limit_and_ends_the_body_is_not_lingered_on():
    wire = Wire(chunk(b"x" * 6, more=True), chunk(b"x" * 5), hang=True)
    run(RequestBody(App(), timeout_s=5, max_bytes=10)(http(), wire.receive, wire.send))
    assert wire.status() == 413 and wire.received == 2


def test_a_body_that_does_not_arrive_in_time_is_a_408():
    app, wire = App(), Wire(chunk(b"x", more=True), hang=True)
    run(RequestBody(app, timeout_s=0.05, max_bytes=10)(http(), wire.receive, wire.send))
    assert app.calls == 0 and wire.status() == 408
    assert json.loads(wire.body())["error"] == {"message": "the request body did not arrive within 0.05 s",
                                                "type": "timeout", "param": None, "code": None}


def test_a_client_that_leaves_mid_body_gets_nothing_and_other_scopes_pass_through():
    app, wire = App(), Wire(chunk(b"x", more=True))
    run(RequestBody(app, timeout_s=5, max_bytes=10)(http(), wire.receive, wire.send))
    assert app.calls == 0 and wire.sent == []
    seen = []

    async def lifespan_app(scope, receive, send):
        seen.append(scope["type"])

    run(RequestBody(lifespan_app, timeout_s=5, max_bytes=0)({"type": "lifespan"}, wire.receive, wire.send))
    assert seen == ["lifespan"]


def test_a_malformed_content_length_is_not_a_length():
    assert limits._content_length(http([(b"content-length", b"abc")])) is None
    assert limits._content_length(http()) is None
    assert limits._content_length({"type": "http"}) is None
    assert limits._content_length(http([(b"x", b"1"), (b"CONTENT-LENGTH", b"7")])) == 7


@pytest.mark.parametrize("connections,tasks,refused", [(1, 2, False), (2, 2, True), (1, 3, True), (0, 0, False)])
def test_the_concurrency_gate_refuses_at_the_limit_of_connections_and_past_it_of_requests(connections, tasks, refused):
    app, wire = App(), Wire(chunk(b"{}"))
    gate = ConcurrencyGate(app, 2, set(range(connections)), set(range(tasks)))
    run(gate(http(), wire.receive, wire.send))
    assert (app.calls == 0) is refused
    if refused:
        assert wire.status() == 503
        assert json.loads(wire.body())["error"] == {
            "message": "the server is at its limit of 2 connections and requests (--limit-concurrency); retry later",
            "type": "service_unavailable", "param": None, "code": None}
    gate = ConcurrencyGate(app, 0, {1}, {1})
    calls = app.calls
    run(gate({"type": "lifespan"}, Wire(chunk(b"")).receive, wire.send))      # only http is gated
    assert app.calls == calls + 1


def test_why_a_body_is_not_json_names_the_byte_the_nesting_or_the_syntax():
    assert limits.unparsable_body(b'{"a": "\xff"}') == ("the request body is not valid UTF-8 (byte 0xff at offset 7); "
                                                         "JSON must be UTF-8")
    assert limits.unparsable_body(b"[" * 100_000 + b"]" * 100_000).startswith("the request body is JSON nested too "
                                                                               "deeply")
    assert limits.unparsable_body(b'{"a": }').startswith("the request body is not valid JSON: Expecting value")
    assert limits.unparsable_body(b"{}") == "the request body could not be parsed as JSON"


# ------------------------------------------------------------------------------------------ engine loop


def test_prompt_plus_max_tokens_must_fit_the_context_to_the_token():
    check_context(10, 6, 16)                    # exactly the context
    with pytest.raises(ValueError) as info:
        check_context(10, 7, 16)                # one token past it
    assert str(info.value) == ("max_tokens (7) + prompt (10 tokens) = 17 tokens, more than this model's maximum "
                               "context length (16 tokens); max_tokens may be at most 6")
    check_context(16, 5, 16)                    # a prompt that alone fills it: the engine's own message
    check_context(17, 5, 16)
    with pytest.raises(ValueError):
        check_context(15, 2, 16)


# ------------------------------------------------------------------------------------------ request stream


class FakeLoop:
    def __init__(self):
        self.submitted, self.aborted = [], []

    def submit(self, submit):
        self.submitted.append(submit)

    def abort(self, request_id):
        self.aborted.append(request_id)


def stream_of(n=1, stall_timeout_s=30.0):
    loop = FakeLoop()
    stream = RequestStream(loop, "r1", [1, 2, 3], SamplingParams(n=n, max_tokens=8), ["\n"], stall_timeout_s)
    return loop, stream


def test_usage_counts_prompt_tokens_from_the_engine_and_output_tokens_whatever_the_text():
    async def go():
        loop, stream = stream_of(n=2)
        stream._put(Accepted(num_prompt_tokens=7))          # the engine's count, not len(prompt_ids)
        assert await stream.start() is None
        assert loop.submitted[0].request_id == "r1" and loop.submitted[0].prompt_ids == [1, 2, 3]
        assert loop.submitted[0].stop == ["\n"]
        for delta in (SequenceDelta(0, "", 3), SequenceDelta(1, "ab", 1), SequenceDelta(0, "c", 2, "length"),
                      SequenceDelta(0, "", 0, "abort"), SequenceDelta(1, "", 4, "error", "boom")):
            stream._put(delta)
        got = [d async for d in stream.deltas()]
        assert [d.text for d in got] == ["", "ab", "c", ""]           # the late abort of sequence 0 is dropped
        assert stream.finish_reasons == {0: "length", 1: "error"} and stream.errors == {1: "boom"}
        assert stream.usage().as_dict() == {"prompt_tokens": 7, "completion_tokens": 10, "total_tokens": 17}
        stream.close()
        assert loop.aborted == []                            # finished: nothing to abort

    asyncio.run(go())


def test_a_refused_request_ends_every_sequence_as_rejected_and_an_open_one_is_aborted_on_close():
    async def go():
        loop, stream = stream_of(n=3)
        stream._put(Rejected("too long"))
        reply = await stream.start()
        assert reply == Rejected("too long") and stream.finish_reasons == {0: "rejected", 1: "rejected", 2: "rejected"}
        assert stream.finished
        loop, stream = stream_of(n=2)
        stream._put(Accepted(1))
        await stream.start()
        stream._put(SequenceDelta(0, "x", 1, "stop"))
        stream._put(SequenceDelta(1, "x", 1))
        seen = []
        async for d in stream.deltas():
            seen.append(d)
            if len(seen) == 2:
                break
        assert not stream.finished
        stream.close()
        assert loop.aborted == ["r1"]

    asyncio.run(go())


def test_a_refused_request_counts_no_tokens():
    async def go():
        loop, stream = stream_of()
        stream._put(Rejected("too long"))
        await stream.start()
        assert stream.usage().as_dict() == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}

    asyncio.run(go())


def test_a_stream_is_aborted_once_output_waits_unread_past_the_stall_timeout(monkeypatch, caplog):
    caplog.set_level("INFO", logger="labkit.serve")
    clock = [100.0]
    monkeypatch.setattr("labkit.serve.request_stream.time.monotonic", lambda: clock[0])

    async def go():
        loop, stream = stream_of(n=2, stall_timeout_s=5.0)
        stream._put(Accepted(2))
        await stream.start()
        stream._put(SequenceDelta(0, "a", 1))               # output waits from t = 100
        clock[0] = 105.0
        stream._put(SequenceDelta(0, "b", 1))               # exactly the timeout: not yet
        assert loop.aborted == [] and not stream.stalled
        clock[0] = 105.001
        stream._put(Accepted(0))                            # not output: no stall
        assert loop.aborted == []
        stream._put(SequenceDelta(0, "c", 1))               # past it
        assert loop.aborted == ["r1"] and stream.stalled
        assert caplog.messages == ["labkit serve: request r1 aborted: its client read nothing for 5 s"]
        stream._put(SequenceDelta(0, "d", 1))
        assert loop.aborted == ["r1"]                       # once
        items = [await stream._take() for _ in range(stream._queue.qsize())]
        aborts = [i for i in items if isinstance(i, SequenceDelta) and i.finish_reason == "abort"]
        assert [(a.index, a.text, a.num_new_tokens) for a in aborts] == [(0, "", 0), (1, "", 0)]

    asyncio.run(go())


def test_what_the_loop_thread_delivers_reaches_the_handler_in_order():
    async def go():
        loop, stream = stream_of()
        started = asyncio.ensure_future(stream.start())
        await asyncio.sleep(0)                              # start() has submitted and waits
        [submit] = loop.submitted
        assert (submit.request_id, submit.prompt_ids, submit.stop) == ("r1", [1, 2, 3], ["\n"])
        assert submit.params == SamplingParams(n=1, max_tokens=8)
        items = [Accepted(3), SequenceDelta(0, "a", 1), SequenceDelta(0, "b", 1, "length")]
        sender = threading.Thread(target=lambda: [submit.deliver(item) for item in items])
        sender.start()
        assert await asyncio.wait_for(started, 10) is None and stream.num_prompt_tokens == 3
        got = await asyncio.wait_for(collect(stream), 10)
        sender.join()
        assert got == items[1:]

    async def collect(stream):
        return [d async for d in stream.deltas()]

    asyncio.run(go())


def test_reading_restarts_the_stall_clock(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr("labkit.serve.request_stream.time.monotonic", lambda: clock[0])

    async def go():
        loop, stream = stream_of(stall_timeout_s=5.0)
        stream._put(SequenceDelta(0, "a", 1))               # waits from t = 0
        stream._put(SequenceDelta(0, "b", 1))
        clock[0] = 4.0
        await stream._take()                                # one read at t = 4: "b" waits from t = 4
        assert stream._waiting_since == 4.0
        clock[0] = 8.0
        stream._put(SequenceDelta(0, "c", 1))               # 4 s after the read: not a stall
        assert loop.aborted == []
        await stream._take()
        await stream._take()
        assert stream._waiting_since is None                # nothing waits
        clock[0] = 20.0
        stream._put(SequenceDelta(0, "d", 1))               # waits from now, not from the last read
        assert loop.aborted == []

    asyncio.run(go())


# ------------------------------------------------------------------------------------------ responses


def test_each_error_status_is_documented_with_the_openai_body_and_a_description_can_be_replaced():
    entries = responses.errors(400, 503, s503="gone")
    assert set(entries) == {400, 503}
    assert entries[400]["description"] == responses._ERROR_DESCRIPTIONS[400]
    assert entries[503]["description"] == "gone"
    for entry in entries.values():
        assert entry["content"] == {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
    with pytest.raises(KeyError):
        responses.errors(418)


def test_a_generation_route_answers_json_or_a_stream_of_chunks_then_done():
    route = responses.generation(responses.Completion, responses.CompletionChunk)
    assert set(route) == {200, 400, 404, 408, 413, 500, 503}
    assert route[200]["model"] is responses.Completion
    assert route[200]["description"] == "a Completion, or with stream: true a stream of CompletionChunk events"
    item = route[200]["content"]["text/event-stream"]["itemSchema"]
    assert item["required"] == ["data"] and item["type"] == "object"
    json_data, done = item["properties"]["data"]["anyOf"]
    assert json_data["contentMediaType"] == "application/json" and json_data["type"] == "string"
    assert json_data["contentSchema"]["anyOf"] == [{"$ref": "#/components/schemas/CompletionChunk"},
                                                   {"$ref": "#/components/schemas/ErrorResponse"}]
    assert done["const"] == "[DONE]"
    assert set(responses.METRICS) == {200, 500, 503} and responses.METRICS[500]["description"] == "engine.stats() failed"
    assert set(responses.HEALTH) == {200, 503}
    assert responses.STREAM_MODELS == (responses.CompletionChunk, responses.ChatCompletionChunk)


# ------------------------------------------------------------------------------------------ engine loop with a fake engine


class FakeRequest:
    def __init__(self, request_id, parent_id=None, num_prompt_tokens=0):
        self.request_id, self.parent_id, self.num_prompt_tokens = request_id, parent_id, num_prompt_tokens
        self.output_token_ids: list[int] = []
        self.token_times: list[float] = []

    def timings(self):
        return type("Timings", (), {"ttft_s": 0.5, "e2e_s": 1.0})


class FakeEngine:
    """The engine calls the loop makes, recorded; ``add`` says what ``add_request`` does."""

    def __init__(self, add=None, num_prompt_tokens=9):
        from labkit.sim.simulator import SimTokenizer
        self.tokenizer, self.requests, self.calls = SimTokenizer(), {}, []
        self.add, self.num_prompt_tokens, self.outputs = add, num_prompt_tokens, []

    def add_request(self, prompt_ids, params, request_id, chat):
        self.calls.append(("add", request_id, chat))
        if self.add is not None:
            raise self.add
        self.requests[request_id] = FakeRequest(request_id, num_prompt_tokens=self.num_prompt_tokens)
        return request_id

    def get_request(self, rid):
        return self.requests[rid]

    def fork(self, parent, child):
        self.requests[child] = FakeRequest(child, parent_id=parent)

    def abort(self, rid):
        self.calls.append(("abort", rid))

    def release(self, rid):
        self.calls.append(("release", rid))

    def stats(self):
        return {"num_requests_running": 1}

    def reset_metrics(self, keep_samples):
        self.calls.append(("reset_metrics", keep_samples))

    def has_unfinished_requests(self):
        return bool(self.outputs)

    def step(self):
        out = self.outputs.pop(0)
        if isinstance(out, Exception):
            raise out
        return out


class Out:
    def __init__(self, request_id, new, finish_reason=None, error=None):
        self.request_id, self.new_token_ids, self.finish_reason, self.error = request_id, new, finish_reason, error
        self.finished = finish_reason is not None


def loop_with(engine=None, n=1, stop=()):
    from labkit.serve.engine_loop import EngineLoop, Submit
    engine = engine or FakeEngine()
    metrics = ServerMetrics("m")
    loop = EngineLoop(engine, metrics)
    got: list = []
    submit = Submit("r", [1, 2, 3], SamplingParams(n=n, max_tokens=8), list(stop), got.append)
    return loop, engine, metrics, submit, got


def emit(engine, out, tokens):
    engine.requests[out.request_id].output_token_ids += tokens
    return out


def counter(metrics, name, **labels):
    return samples(metrics.render({}))[(name, tuple(sorted({"model_name": "m", **labels}.items())))]


def test_an_accepted_request_counts_the_engines_prompt_tokens_and_each_output_token():
    loop, engine, metrics, submit, got = loop_with()
    loop._apply(submit)
    assert got == [Accepted(9)] and engine.calls == [("add", "r", False)]      # token ids: never templated again
    assert counter(metrics, "labkit:prompt_tokens_total") == 9
    loop._dispatch([emit(engine, Out("r", [104, 105, 33]), [104, 105, 33])])    # three tokens in one step
    loop._dispatch([emit(engine, Out("r", [0]), [0])])                          # a token with no text
    loop._dispatch([emit(engine, Out("r", [33], "length"), [33])])
    assert got[1:] == [SequenceDelta(0, "hi!", 3), SequenceDelta(0, "", 1), SequenceDelta(0, "!", 1, "length")]
    assert counter(metrics, "labkit:generation_tokens_total") == 5
    assert counter(metrics, "labkit:request_success_total", finished_reason="length") == 1
    assert engine.calls[-1] == ("release", "r") and loop._groups == {}


def test_a_bad_request_is_a_400_and_a_failing_one_a_500_and_the_loop_goes_on():
    loop, engine, metrics, submit, got = loop_with(FakeEngine(add=ValueError("prompt too long")))
    loop._apply(submit)
    assert got == [Rejected("prompt too long", 400)] and loop.error is None
    loop, engine, metrics, submit, got = loop_with(FakeEngine(add=RuntimeError("bug")))
    loop._apply(submit)
    assert got == [Rejected("RuntimeError: bug", 500)] and "RuntimeError: bug" in loop.error
    assert counter(metrics, "labkit:prompt_tokens_total") == 0 and loop._groups == {}


def test_a_stop_string_ends_the_sequence_with_stop_and_aborts_it_in_the_engine():
    loop, engine, metrics, submit, got = loop_with(stop=["!"])
    loop._apply(submit)
    loop._dispatch([emit(engine, Out("r", [104, 33, 105]), [104, 33, 105])])
    assert got[-1] == SequenceDelta(0, "h", 3, "stop")
    assert ("abort", "r") in engine.calls and engine.calls[-1] == ("release", "r")
    assert counter(metrics, "labkit:request_success_total", finished_reason="stop") == 1
    # Found on the engine's last token: no abort (it has finished), still "stop".
    loop, engine, metrics, submit, got = loop_with(stop=["!"])
    loop._apply(submit)
    loop._dispatch([emit(engine, Out("r", [104, 33], "length"), [104, 33])])
    assert got[-1] == SequenceDelta(0, "h", 2, "stop") and ("abort", "r") not in engine.calls


def test_n_sequences_are_numbered_in_order_and_the_request_ends_with_the_last():
    loop, engine, metrics, submit, got = loop_with(n=2)
    loop._apply(submit)
    engine.fork("r", "r-1")
    loop._dispatch([emit(engine, Out("r", [97], "length"), [97]), emit(engine, Out("r-1", [98]), [98])])
    assert got[1:] == [SequenceDelta(0, "a", 1, "length"), SequenceDelta(1, "b", 1)]
    assert "r" in loop._groups and ("release", "r") not in engine.calls
    loop._dispatch([emit(engine, Out("r-1", [99], "stop"), [99])])
    assert got[-1] == SequenceDelta(1, "c", 1, "stop") and loop._groups == {}
    assert engine.calls[-1] == ("release", "r")
    loop._dispatch([Out("r-1", [1], "stop")])            # nothing left of it: ignored
    assert len(got) == 4


def test_a_request_the_engine_could_not_go_on_with_ends_alone_with_an_error():
    loop, engine, metrics, submit, got = loop_with(n=2)
    loop._apply(submit)
    other = loop_with()[3]
    other.request_id, other_got = "o", []
    other.deliver = other_got.append
    loop._apply(other)
    engine.requests["o"] = FakeRequest("o")
    loop._dispatch([Out("r", [], "error", "NaN logits"), emit(engine, Out("o", [97]), [97])])
    assert got[1:] == [SequenceDelta(0, "", 0, "error", "NaN logits"), SequenceDelta(1, "", 0, "error", "NaN logits")]
    assert other_got[-1] == SequenceDelta(0, "a", 1)
    assert ("abort", "r") in engine.calls and ("release", "r") in engine.calls and set(loop._groups) == {"o"}
    loop._dispatch([Out("o", [], "error")])
    assert other_got[-1] == SequenceDelta(0, "", 0, "error", "the engine could not go on with this request")


def test_output_that_cannot_be_handled_ends_that_request_alone():
    loop, engine, metrics, submit, got = loop_with()
    loop._apply(submit)

    class Broken:
        def update(self, token_ids, final):
            raise UnicodeError("bad bytes")

    loop._groups["r"].texts[0] = Broken()
    loop._dispatch([Out("r", [1])])
    assert got[-1] == SequenceDelta(0, "", 0, "error", "the server could not handle this request's output "
                                                       "(UnicodeError: bad bytes)")
    assert "UnicodeError" in loop.error and loop._groups == {}


def test_abort_ends_the_engines_sequences_and_forgets_the_request():
    loop, engine, metrics, submit, got = loop_with(n=2)
    loop._apply(submit)
    engine.fork("r", "r-1")
    loop._dispatch([emit(engine, Out("r-1", [98]), [98])])
    from labkit.serve.engine_loop import Abort
    loop._apply(Abort("r"))
    assert sorted(c for c in engine.calls if c[0] == "abort") == [("abort", "r"), ("abort", "r-1")]
    assert engine.calls[-1] == ("release", "r") and loop._groups == {}
    calls = list(engine.calls)
    loop._apply(Abort("unknown"))
    assert engine.calls == calls


def test_draining_ends_every_open_stream_with_abort_and_refuses_new_requests():
    from labkit.serve.engine_loop import _DRAIN
    loop, engine, metrics, submit, got = loop_with(n=2)
    loop._apply(submit)
    loop._apply(_DRAIN)
    assert got[1:] == [SequenceDelta(0, "", 0, "abort"), SequenceDelta(1, "", 0, "abort")]
    assert loop._groups == {} and loop.failure is None
    later = []
    submit.deliver = later.append
    loop._apply(submit)
    assert later == [Rejected("the server is shutting down", 503)]


def test_a_failed_step_ends_every_stream_with_an_error_and_the_engine_serves_no_more():
    loop, engine, metrics, submit, got = loop_with()
    loop._apply(submit)
    loop._engine_failed(RuntimeError("device lost"))
    assert loop.failure == "RuntimeError: device lost"
    assert got[-1] == SequenceDelta(0, "", 0, "error", "the engine failed (RuntimeError: device lost); see the "
                                                       "server log")
    later = []
    submit.deliver = later.append
    loop._apply(submit)
    assert later == [Rejected("the engine failed (RuntimeError: device lost) and serves no more requests; restart "
                              "the server (see its log)", 503)]
    assert not loop._has_work()


def test_a_snapshot_is_the_engines_stats_or_its_error():
    from concurrent.futures import Future

    from labkit.serve.engine_loop import Snapshot
    loop, engine, *_ = loop_with()
    future = Future()
    loop._apply(Snapshot(future))
    assert future.result() == {"num_requests_running": 1}
    engine.stats = lambda: 1 / 0
    future = Future()
    loop._apply(Snapshot(future))
    assert isinstance(future.exception(), ZeroDivisionError)


def test_the_loop_thread_steps_while_there_is_work_survives_a_bad_command_and_stops_when_told():
    loop, engine, metrics, submit, got = loop_with()
    loop._apply(submit)
    loop.start()
    assert engine.calls[-1] == ("reset_metrics", False)          # no per-request samples kept while serving
    assert loop.alive
    from concurrent.futures import Future

    from labkit.serve.engine_loop import Abort, Snapshot
    done = Future()
    done.set_result(None)
    loop._commands.put(Snapshot(done))          # applying it raises (a future already set): the loop goes on
    engine.outputs = [[emit(engine, Out("r", [97], "length"), [97])]]
    loop.abort("nobody")
    import time
    deadline = time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got[1] == SequenceDelta(0, "a", 1, "length") and "InvalidStateError" in loop.error
    engine.outputs = [RuntimeError("boom")]
    loop._commands.put(Abort("nobody"))
    while loop.failure is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert loop.failure == "RuntimeError: boom" and not loop.alive and "RuntimeError: boom" in loop.error
    loop.stop(timeout=10)
    assert not loop._thread.is_alive()


def test_stopping_ends_what_is_still_open_with_abort():
    loop, engine, metrics, submit, got = loop_with()
    loop.start()
    loop.submit(submit)
    loop.stop(timeout=10)
    assert got == [Accepted(9), SequenceDelta(0, "", 0, "abort")]


def test_drain_is_a_command_the_loop_applies():
    loop, engine, metrics, submit, got = loop_with()
    loop.start()
    loop.submit(submit)
    loop.drain()
    loop.stop(timeout=10)
    assert got == [Accepted(9), SequenceDelta(0, "", 0, "abort")] and loop._draining


def test_a_request_whose_abort_fails_still_ends_every_sequence_and_is_forgotten():
    loop, engine, metrics, submit, got = loop_with(n=2)
    loop._apply(submit)

    def abort(rid):
        raise RuntimeError("engine.abort failed")

    engine.abort = abort
    loop._dispatch([Out("r", [], "error", "NaN logits")])
    assert got[1:] == [SequenceDelta(0, "", 0, "error", "NaN logits"), SequenceDelta(1, "", 0, "error", "NaN logits")]
    assert loop._groups == {}


def test_stop_messages_are_whole_and_one_stop_string_is_one_string():
    assert completion(stop="END").stop_strings() == ["END"]
    for stops, message in (([""], "stop strings must not be empty"),
                           (["x" * 65], "stop strings may have at most 64 characters, got one of 65 (streamed text "
                                        "is held back by the longest stop string's length)")):
        with pytest.raises(ValueError) as info:
            completion(stop=stops).stop_strings()
        assert str(info.value) == message
    with pytest.raises(ValueError) as info:
        completion(stream_options={"include_usage": True}).include_usage()
    assert str(info.value) == "stream_options is only allowed when stream is true"


def test_output_of_a_request_the_engine_forgot_is_skipped_and_the_rest_delivered():
    loop, engine, metrics, submit, got = loop_with()
    loop._apply(submit)
    loop._dispatch([Out("gone", [1]), emit(engine, Out("r", [97]), [97])])
    assert got[1:] == [SequenceDelta(0, "a", 1)]


def test_the_last_delta_carries_the_text_held_back_for_a_stop_string():
    loop, engine, metrics, submit, got = loop_with(stop=["ab"])          # one character held back
    loop._apply(submit)
    loop._dispatch([emit(engine, Out("r", [120, 97]), [120, 97])])
    loop._dispatch([emit(engine, Out("r", [99], "length"), [99])])
    assert [d.text for d in got[1:]] == ["x", "ac"]


def test_a_request_failing_alone_is_logged_with_its_id_and_reason(caplog):
    caplog.set_level("WARNING", logger="labkit.serve")
    loop, engine, metrics, submit, got = loop_with()
    loop._apply(submit)
    loop._dispatch([Out("r", [], "error", "NaN logits")])
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "labkit serve: request r failed alone: NaN logits")]
    caplog.clear()
    loop, engine, metrics, submit, got = loop_with()
    loop._apply(submit)

    class Broken:
        def update(self, token_ids, final):
            raise UnicodeError("bad bytes")

    loop._groups["r"].texts[0] = Broken()
    loop._dispatch([Out("r", [1])])
    [record] = caplog.records
    assert (record.levelname, record.getMessage()) == (
        "ERROR", "labkit serve: handling request r's output failed; it ends with an error")
    assert record.exc_info[0] is UnicodeError


def test_a_failed_step_is_logged_as_an_error_with_its_traceback_and_what_the_server_does_now(caplog):
    caplog.set_level("ERROR", logger="labkit.serve")
    loop, *_ = loop_with()
    lost = RuntimeError("device lost")
    try:
        raise lost
    except RuntimeError:
        loop._engine_failed(lost)
    [record] = caplog.records
    assert (record.levelname, record.getMessage()) == (
        "ERROR", "labkit serve: engine.step() failed; every open request ends with an error, new requests get a "
                 "503 and GET /health answers 503 until the server is restarted")
    assert record.exc_info[1] is lost and "RuntimeError: device lost" in loop.error


def test_the_request_itself_is_completion_0_whichever_sequence_answers_first():
    # Choice 0 is the request the engine was given (with a seed, the completion n=1 would give); its forked
    # children are numbered from 1, in the order their first output arrives.
    loop, engine, metrics, submit, got = loop_with(n=3)
    loop._apply(submit)
    engine.fork("r", "r-1")
    engine.fork("r", "r-2")
    loop._dispatch([emit(engine, Out("r-2", [98]), [98])])
    loop._dispatch([emit(engine, Out("r", [97]), [97]), emit(engine, Out("r-1", [99]), [99])])
    assert got[1:] == [SequenceDelta(1, "b", 1), SequenceDelta(0, "a", 1), SequenceDelta(2, "c", 1)]


def test_a_client_that_leaves_aborts_its_request_through_the_command_queue():
    loop, engine, metrics, submit, got = loop_with()
    loop._apply(submit)
    loop.abort("r")                                     # from the handler's thread: only a command
    assert engine.calls == [("add", "r", False)]
    assert loop._drain(block=False)                    # the loop applies it between two steps
    assert engine.calls[1:] == [("abort", "r"), ("release", "r")] and loop._groups == {}


def test_the_engine_is_stepped_by_a_daemon_thread_named_for_thread_dumps():
    # A daemon thread: a step that never returns cannot keep the process alive after the server exits. The
    # name is what a thread dump (faulthandler, py-spy, pytest-timeout) shows for it.
    loop, *_ = loop_with()
    loop.start()
    try:
        assert loop._thread.is_alive() and loop._thread.daemon and loop._thread.name == "labkit-engine-loop"
    finally:
        loop.stop(timeout=10)


def test_an_idle_loop_waits_on_its_commands_without_spinning():
    loop, engine, *_ = loop_with()
    polls = []

    def has_unfinished_requests():
        polls.append(time.monotonic())
        return False

    engine.has_unfinished_requests = has_unfinished_requests
    loop.start()
    time.sleep(0.3)
    loop.stop(timeout=10)
    assert not loop._thread.is_alive() and len(polls) <= 3        # one look before it blocks, not thousands


def test_the_engine_gets_the_handlers_token_ids_and_sampling_params_as_they_are():
    loop, engine, metrics, submit, got = loop_with()
    given = []
    add_request = engine.add_request

    def recording_add_request(prompt_ids, params, request_id, chat):
        given.append((prompt_ids, params))
        return add_request(prompt_ids, params, request_id, chat)

    engine.add_request = recording_add_request
    loop._apply(submit)
    assert given == [([1, 2, 3], SamplingParams(n=1, max_tokens=8))]


def test_the_loop_thread_answers_snapshots_while_idle_and_refuses_requests_once_the_engine_failed():
    loop, engine, metrics, submit, got = loop_with()
    loop.start()
    try:
        for _ in range(2):                              # an idle loop answers, and is still there to answer again
            assert loop.snapshot().result(timeout=10) == {"num_requests_running": 1}
        assert loop.alive
        engine.outputs = [RuntimeError("device lost")]
        loop.snapshot().result(timeout=10)              # wakes the loop, which steps and fails
        refused = []
        answered = threading.Event()

        def deliver(item):
            refused.append(item)
            answered.set()

        submit.deliver = deliver
        loop.submit(submit)
        assert answered.wait(10), "a request sent after the engine failed got no answer"
        assert refused[0].status == 503 and "device lost" in refused[0].message
    finally:
        loop.stop(timeout=10)


def test_stop_returns_within_its_timeout_even_when_a_step_never_returns():
    loop, engine, metrics, submit, got = loop_with()
    loop._apply(submit)
    stepping, release = threading.Event(), threading.Event()

    def stuck_step():
        stepping.set()
        release.wait(5)
        return []

    engine.step, engine.has_unfinished_requests = stuck_step, lambda: True
    loop.start()
    assert stepping.wait(10)
    began = time.monotonic()
    loop.stop(timeout=0.1)
    assert time.monotonic() - began < 2 and loop._thread.is_alive()
    release.set()                                       # the step returns: the loop reads the stop and ends
    loop._thread.join(10)
    assert not loop._thread.is_alive() and got[-1] == SequenceDelta(0, "", 0, "abort")


class Timer:
    def __init__(self, delay, callback):
        self.delay, self.callback, self.cancelled = delay, callback, False

    def cancel(self):
        self.cancelled = True


class ManualLoop:
    """The event loop as the protocol uses it: timers are kept (fired by hand), tasks are not run."""

    def __init__(self):
        self.timers = []

    def call_later(self, delay, callback, *args):
        self.timers.append(Timer(delay, callback))
        return self.timers[-1]

    def create_task(self, coro, **kwargs):
        coro.close()
        return type("Task", (), {"add_done_callback": lambda self, fn: None})()


class Transport(asyncio.Transport):
    def __init__(self):
        super().__init__()
        self.closed = 0

    def get_extra_info(self, name, default=None):
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def is_closing(self):
        return self.closed > 0

    def close(self):
        self.closed += 1

    def write(self, data):
        pass

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


def h11_connection(header_timeout_s=0.5):
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    loop, transport = ManualLoop(), Transport()
    protocol = limits.limited_protocol(header_timeout_s, 10)(config=Config(App(), log_config=None),
                                                             server_state=ServerState(), app_state={}, _loop=loop)
    protocol.connection_made(transport)
    return protocol, loop, transport


def test_a_connection_whose_headers_do_not_complete_in_time_is_closed_and_logged(caplog):
    protocol, loop, transport = h11_connection(0.5)
    assert [(t.delay, t.cancelled) for t in loop.timers] == [(0.5, False)]       # the clock starts at the connection
    protocol.data_received(b"GET / HTTP/1.1\r\nHost: a\r\n")                     # half the headers: still running
    assert len(loop.timers) == 1 and not loop.timers[0].cancelled and transport.closed == 0
    with caplog.at_level("INFO", logger="uvicorn.error"):
        loop.timers[0].callback()
    assert transport.closed == 1
    assert [r.getMessage() for r in caplog.records] == ["closing a connection whose request headers took over 0.5s"]
    loop.timers[0].callback()                                                     # already closing: nothing more
    assert transport.closed == 1


def test_complete_headers_stop_the_header_clock_and_the_next_requests_first_byte_starts_it_again():
    protocol, loop, transport = h11_connection(0.5)
    protocol.data_received(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
    assert loop.timers[0].cancelled and len(loop.timers) == 1
    loop.timers[0].callback()                               # a timer that fires late closes no request in progress
    assert transport.closed == 0
    protocol.cycle.response_complete = True                 # the response went out: the connection is kept alive
    protocol.data_received(b"G")
    assert [(t.delay, t.cancelled) for t in loop.timers] == [(0.5, True), (0.5, False)]
    protocol.connection_lost(ConnectionResetError())
    assert loop.timers[1].cancelled and transport.closed == 0      # lost, not closed again: uvicorn's own rule


def test_an_error_the_layers_answer_on_their_own_states_its_length():
    for status, wire in ((408, Wire(chunk(b"x", more=True), hang=True)), (503, Wire(chunk(b"{}")))):
        if status == 408:
            run(RequestBody(App(), timeout_s=0.01, max_bytes=10)(http(), wire.receive, wire.send))
        else:
            run(ConcurrencyGate(App(), 1, {1}, set())(http(), wire.receive, wire.send))
        start = wire.sent[0]
        assert start["status"] == status and dict(start["headers"]) == {
            b"content-type": b"application/json", b"connection": b"close", b"content-length": str(len(wire.body())).encode()}


def test_asgi_defaults_a_chunk_without_body_to_empty_and_without_more_body_to_the_last():
    app, wire = App(), Wire(chunk(b"abc", more=True), {"type": "http.request"})
    run(RequestBody(app, timeout_s=5, max_bytes=10)(http(), wire.receive, wire.send))
    assert app.bodies == [b"abc"] and wire.status() == 200
    wire = Wire({"type": "http.request", "body": b"x" * 11}, chunk(b"never"), hang=True)
    run(RequestBody(App(), timeout_s=5, max_bytes=10)(http(), wire.receive, wire.send))
    assert wire.status() == 413 and wire.received == 1          # the chunk past the limit was the last: no lingering


def test_a_declared_length_past_the_limit_still_reads_and_drops_what_the_client_sends():
    wire = Wire(chunk(b"x" * 6, more=True), chunk(b"x" * 5), chunk(b"never"))
    run(RequestBody(App(), timeout_s=5, max_bytes=10)(http([(b"content-length", b"11")]), wire.receive, wire.send))
    assert wire.status() == 413 and wire.received == 2
    wire = Wire(chunk(b"x" * 11))
    run(RequestBody(App(), timeout_s=5, max_bytes=10)(http(), wire.receive, wire.send))
    assert json.loads(wire.body())["error"]["message"] == (
        "the request body passed the limit, more than this server's limit of 10 bytes (--max-body-bytes; by default "
        "1 MiB + 32 bytes per token of max_model_len)")


def test_a_scope_that_is_not_http_reaches_the_app_with_its_own_receive_and_send():
    wire = Wire(chunk(b""))

    async def lifespan_app(scope, receive, send):
        await send({"type": "lifespan.startup.complete", "got": await receive()})

    run(RequestBody(lifespan_app, timeout_s=5, max_bytes=0)({"type": "lifespan"}, wire.receive, wire.send))
    assert wire.sent == [{"type": "lifespan.startup.complete", "got": chunk(b"")}]


@pytest.mark.parametrize("route,request_model", [("completions", "CompletionRequest"),
                                                 ("chat completions", "ChatCompletionRequest")])
def test_every_field_of_openais_request_is_implemented_refused_or_harmlessly_ignored(route, request_model):
    """From OpenAI's own request types (the ``openai`` package): a field labkit neither implements nor lists
    would be silently ignored, so a client asking for a feature would get tokens made without it."""
    import typing

    from openai.types import completion_create_params as completion
    from openai.types.chat import completion_create_params as chat

    params = completion if route == "completions" else chat
    openai_fields = set(typing.get_type_hints(params.CompletionCreateParamsBase)) - {"stream"}
    implemented = set(getattr(protocol, request_model).model_fields)
    unlisted = openai_fields - implemented - set(protocol.UNSUPPORTED) - set(protocol.IGNORED)
    assert not unlisted, f"OpenAI's {route} request has fields labkit neither implements nor lists: {sorted(unlisted)}"
    assert not set(protocol.IGNORED) & (implemented | set(protocol.UNSUPPORTED))       # each field in one place


def test_verbosity_other_than_its_default_is_refused_by_name():
    assert protocol.unsupported_field({"verbosity": "medium"}) is None
    assert protocol.unsupported_field({"verbosity": "low"}) == "verbosity"
