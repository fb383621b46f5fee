"""``labkit bench`` against a server no one here wrote: ``transformers serve --continuous-batching``
on the default model directory, offline, on 127.0.0.1. It accepts only the OpenAI API (``ignore_eos``
is a 422) and has no ``/metrics``, so this is the engine-neutral path end to end.

The completions run uses the CLI's defaults (the ``chat`` prompt set, 32 requests, 128 output tokens at
most, all sent at once), as a user would: sent as raw completions, some of those questions end at once
with the end-of-sequence token, and such an empty reply must count as completed.
On the 2-core lab machine the completions run takes about 45 s; the smaller chat run about 15 s."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

import httpx
import pytest

from labkit.serve_bench.cli import DEFAULT_OUTPUT_LEN, add_bench_args, run_bench
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
                                 "--device", "cpu", "--dtype", "float32", "--continuous-batching",
                                 # a KV cache of 16,384 tokens (32 requests of ~100 + 128 tokens need ~7,500):
                                 # sized from free memory instead, it took 13.7 GB beside the suite and
                                 # the kernel's OOM killer ended it
                                 "--cb-block-size", "32", "--cb-num-blocks", "512"],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
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


# The completions run uses the CLI's defaults, as a user would, and must meet empty replies; the chat run is
# smaller (8 prompts, 32 tokens): it covers the other endpoint's parsing, and the suite's time is shared.
@pytest.mark.parametrize("endpoint,extra", [("chat", ["--num-prompts", "8", "--output-len", "32"]),
                                            ("completions", [])])
def test_bench_with_no_extra_flags_completes_against_transformers_serve(transformers_server, endpoint, extra):
    base_url, model_dir = transformers_server
    parser = argparse.ArgumentParser()
    add_bench_args(parser)
    args = parser.parse_args(["--base-url", base_url, "--model", model_dir, "--endpoint", endpoint,
                              "--no-progress", "--request-timeout", "240", "--max-duration", "270", *extra])
    if not extra:
        assert (args.dataset, args.num_prompts, args.output_len) == ("chat", 32, DEFAULT_OUTPUT_LEN)   # the defaults
    result = run_bench(args)
    m = result.metrics
    assert (m.completed, m.failed) == (args.num_prompts, 0), result.first_error
    tokens = [r.output_tokens for r in result.requests]
    assert all(0 <= n <= args.output_len for n in tokens) and max(tokens) == args.output_len, tokens
    assert m.total_output_tokens == sum(tokens) and m.total_input_tokens == sum(r.prompt_tokens for r in result.requests)
    assert all(r.prompt_tokens > 0 for r in result.requests)
    assert result.server_metrics == "not available (HTTP 404)"
    empty = [r for r in result.requests if not r.text]
    # A reply that is only the end-of-sequence token: transformers serve counts that token (usage 1).
    assert all(r.output_tokens <= 1 and r.tpot_s is None and not r.itl_s and r.ttft_s > 0 for r in empty)
    if endpoint == "completions":     # the case this test exists for: the run must have met empty replies
        assert empty, "no request ended at once; this run no longer covers empty completions"
