"""``labkit bench`` against a server no one here wrote: ``transformers serve`` on the default model
directory, offline, on 127.0.0.1. It accepts only the OpenAI API (``ignore_eos`` is a 422) and has
no ``/metrics``, so this is the engine-neutral path end to end."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from labkit.benchmark.cli import add_bench_args, run_bench
from tests.serve_util import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _free_port() -> int:
    from labkit.serve.server import bind
    with bind("127.0.0.1", 0) as sock:
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def transformers_server(tmp_path_factory):
    cli = shutil.which("transformers") or os.path.join(os.path.dirname(sys.executable), "transformers")
    if not os.path.exists(cli):
        pytest.skip("the `transformers` CLI is not installed")
    from labkit.model.loader import ensure_default_converted
    try:
        model_dir = str(ensure_default_converted(progress=False))
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    log = tmp_path_factory.mktemp("tf-serve") / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([cli, "serve", model_dir, "--host", "127.0.0.1", "--port", str(port),
                                 "--device", "cpu", "--dtype", "float32"], stdout=out, stderr=subprocess.STDOUT,
                                env=env)
    base_url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(base_url + "/v1/models", timeout=2).status_code == 200
        except httpx.HTTPError:
            return proc.poll() is not None          # stop waiting if it died
    try:
        assert wait_until(up, timeout=180, interval=0.5) and proc.poll() is None, log.read_text()[-3000:]
        yield base_url, model_dir
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


# Raw completions get text a model continues; the chat questions could end at once (EOS), and a
# stream with no text counts as failed (as in vllm bench serve).
CONTINUATIONS = ["Once upon a time, in a small village by the sea, there lived", "The three primary colors are",
                 "def fibonacci(n):\n    ", "A list of fruits: apples, bananas,"]


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_bench_with_no_extra_flags_completes_against_transformers_serve(transformers_server, endpoint, tmp_path):
    base_url, model_dir = transformers_server
    dataset = "chat"
    if endpoint == "completions":
        dataset = str(tmp_path / "continue.jsonl")
        Path(dataset).write_text("".join(json.dumps({"prompt": p}) + "\n" for p in CONTINUATIONS))
    parser = argparse.ArgumentParser()
    add_bench_args(parser)
    args = parser.parse_args(["--base-url", base_url, "--model", model_dir, "--endpoint", endpoint,
                              "--dataset", dataset, "--num-prompts", "4", "--output-len", "8",
                              "--max-concurrency", "2", "--no-progress", "--request-timeout", "120"])
    result = run_bench(args)
    m = result.metrics
    assert (m.completed, m.failed) == (4, 0), result.first_error
    tokens = [r.output_tokens for r in result.requests]
    assert all(1 <= n <= 8 for n in tokens) and max(tokens) == 8, tokens      # the bound was sent and kept
    assert m.total_output_tokens == sum(tokens) and m.total_input_tokens == sum(r.prompt_tokens for r in result.requests)
    assert all(r.prompt_tokens > 0 for r in result.requests)
    assert result.server_metrics == "not available (HTTP 404)"
