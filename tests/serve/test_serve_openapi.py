"""``/openapi.json`` describes the server that answers: the errors it really sends (400 / 404 / 408 /
413 / 500 / 503, never FastAPI's 422) with the OpenAI error body, the completion and chat-completion
objects, the stream chunk, ``/metrics`` as text. A bounded schemathesis pass then checks the server
against its own document: no 5xx, every answer's status, media type and body as documented."""

from __future__ import annotations

import itertools

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi import checks as openapi_checks

from labkit.serve import BackgroundServer, ServedModel, build_app
from labkit.serve import openai_format as fmt
from labkit.serve import responses as doc
from tests.serve_util import sim_llm

pytestmark = pytest.mark.timeout(120)


SIM_CONFIG = dict(num_blocks=128, max_num_seqs=8, max_model_len=64)   # a short context keeps every request short


@pytest.fixture(scope="module")
def sim_server():
    with BackgroundServer(ServedModel(sim_llm(**SIM_CONFIG).engine, "sim")) as s:
        yield s


@pytest.fixture(scope="module")
def document(sim_server) -> dict:
    return httpx.get(sim_server.base_url + "/openapi.json", timeout=30).json()


def responses_of(document: dict, path: str, method: str = "post") -> dict:
    return document["paths"][path][method]["responses"]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_the_generation_routes_list_the_errors_they_send_with_the_openai_error_body(document, path):
    answers = responses_of(document, path)
    assert set(answers) == {"200", "400", "404", "408", "413", "500", "503"}      # no 422
    for status in ("400", "404", "408", "413", "500", "503"):
        assert answers[status]["content"] == {"application/json": {"schema": {"$ref":
                                                                               "#/components/schemas/ErrorResponse"}}}
    assert "HTTPValidationError" not in document["components"]["schemas"]


@pytest.mark.parametrize("path, body, chunk", [("/v1/completions", "Completion", "CompletionChunk"),
                                               ("/v1/chat/completions", "ChatCompletion", "ChatCompletionChunk")])
def test_a_200_is_the_completion_object_or_a_stream_of_its_chunks(document, path, body, chunk):
    content = responses_of(document, path)["200"]["content"]
    assert content["application/json"]["schema"] == {"$ref": f"#/components/schemas/{body}"}
    json_data, done = content["text/event-stream"]["itemSchema"]["properties"]["data"]["anyOf"]
    assert {"$ref": f"#/components/schemas/{chunk}"} in json_data["contentSchema"]["anyOf"]
    assert done["const"] == "[DONE]"
    assert {body, chunk, "ErrorResponse", "Usage"} <= set(document["components"]["schemas"])


def test_metrics_is_text_and_health_an_empty_200_or_an_error(document):
    metrics = responses_of(document, "/metrics", "get")
    assert metrics["200"]["content"] == {"text/plain": {"schema": {"type": "string"}}}
    health = responses_of(document, "/health", "get")
    assert health["200"]["content"] == {} and "application/json" in health["503"]["content"]


def test_the_objects_the_server_builds_are_the_documented_models():
    h = fmt.Header("cmpl-1", 0, "sim")
    usage = fmt.Usage(3, 2)
    doc.Completion.model_validate(fmt.completion_response(h, ["ab"], ["length"], usage))
    doc.ChatCompletion.model_validate(fmt.chat_response(h, ["ab"], ["stop"], usage))
    doc.CompletionChunk.model_validate(fmt.completion_chunk(h, 0, "a", None))
    doc.CompletionChunk.model_validate(fmt.usage_chunk(h, "text_completion", usage))
    doc.ChatCompletionChunk.model_validate(fmt.chat_chunk(h, 0, {"role": "assistant", "content": ""}, None))
    doc.ChatCompletionChunk.model_validate(fmt.chat_chunk(h, 0, {}, "error"))


# ------------------------------------------------------------------------------ the schemathesis pass

# The document, built without serving (collection must not start a server; schemathesis's lazy
# ``from_fixture`` does not run under pytest 9); the test below checks it is the one the server serves.
DOCUMENT = build_app(ServedModel(sim_llm(**SIM_CONFIG).engine, "sim")).openapi()
schema = schemathesis.openapi.from_dict(DOCUMENT)
# The one rule no field of the document can state: the prompt's tokens (and max_tokens) must fit the context;
# a text's token count is known only once it is tokenised. A request the document allows is refused for that
# alone, with the engine's or vLLM's message; any other refusal of one is a failure.
DOES_NOT_FIT = ("more than this model's maximum context length", "prompts must be shorter than max_model_len",
                "this model's max_model_len")                     # refused before tokenising: prompt.py


@schemathesis.check
def accepts_what_the_document_allows(ctx, response, case):
    """schemathesis's positive_data_acceptance, less the context rule above."""
    if response.status_code == 400 and any(rule in response.json()["error"]["message"] for rule in DOES_NOT_FIT):
        return None
    return openapi_checks.positive_data_acceptance(ctx, response, case)


CHECKS = [schemathesis.checks.not_a_server_error, openapi_checks.status_code_conformance,
          openapi_checks.content_type_conformance, openapi_checks.response_schema_conformance,
          accepts_what_the_document_allows, openapi_checks.unsupported_method]


def test_the_context_rule_is_the_only_exception_to_positive_data_acceptance(sim_server):
    fits = httpx.post(sim_server.base_url + "/v1/completions", timeout=30,
                      json={"model": "sim", "prompt": "abc", "max_tokens": 61}).json()
    assert fits["usage"]["completion_tokens"] <= 61
    too_long = httpx.post(sim_server.base_url + "/v1/completions", timeout=30,
                          json={"model": "sim", "prompt": "abc", "max_tokens": 62}).json()["error"]
    assert DOES_NOT_FIT[0] in too_long["message"] and too_long["param"] == "max_tokens"
    longest = DOCUMENT["components"]["schemas"]["CompletionRequest"]["properties"]["prompt"]["anyOf"][0]["maxLength"]
    prompt_too_long = httpx.post(sim_server.base_url + "/v1/completions", timeout=30,
                                 json={"model": "sim", "prompt": "0" * longest}).json()["error"]
    assert DOES_NOT_FIT[1] in prompt_too_long["message"] and prompt_too_long["param"] == "prompt"


def test_the_fuzzed_document_is_the_one_the_server_serves(document):
    assert document == DOCUMENT


ASK_FOR_THE_MODEL = itertools.cycle([True, False])


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_the_server_answers_as_its_document_says(case, sim_server):
    # Every other body names the served model, so that generation (and streaming) is fuzzed too, not
    # only the 404 for a model this server does not have.
    if isinstance(case.body, dict) and next(ASK_FOR_THE_MODEL):
        case.body["model"] = "sim"
    case.call_and_validate(base_url=sim_server.base_url, checks=CHECKS, timeout=30)
