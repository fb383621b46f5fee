"""A long-lived server's memory stays flat. Once the engine's run statistics kept every
served request's latencies and every ITL gap: about 1.2 KB a request on the simulated model, the whole
of the growth tracemalloc finds (the soak itself is too long for the suite; see the issue's report)."""

from __future__ import annotations

import httpx
import pytest

from tests.serve_util import serving, sim_llm

pytestmark = pytest.mark.timeout(180)

BODY = {"model": "sim", "max_tokens": 16, "ignore_eos": True, "temperature": 0.7}


def run_requests(client: httpx.Client, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        body = {**BODY, "prompt": f"request {i}"}
        if i % 2:
            body["stream"] = True
            with client.stream("POST", "/v1/completions", json=body) as resp:
                assert resp.status_code == 200 and list(resp.iter_lines())[-2] == "data: [DONE]"
        else:
            assert client.post("/v1/completions", json=body).status_code == 200


def test_a_serving_engine_keeps_counts_but_no_per_request_latency_samples():
    llm = sim_llm(num_blocks=64)
    with serving(llm, "sim") as server, httpx.Client(base_url=server.base_url, timeout=30) as client:
        run_requests(client, 40)
        stats = llm.engine.stats()
    assert not llm.engine.requests                     # delivered requests are forgotten too
    assert stats["num_finished_requests"] == 40 and stats["num_output_tokens"] == 40 * 16
    assert stats["time_to_first_token_seconds"] == [] and stats["inter_token_latency_seconds"] == []
