"""``labkit serve`` options: where to listen, which model, and the EngineConfig switches."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from labkit.config import EngineConfig, SpecConfig
from labkit.serve.limits import ServeLimits

DEFAULT_MODEL_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"


def add_serve_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default=None,
                        help="a local HF Llama directory, 'sim' (the cost model), or omit for SmolLM2-135M-Instruct")
    parser.add_argument("--served-model-name", default=None, help="the name clients send as `model`")
    parser.add_argument("--log-level", default="info")
    limits = parser.add_argument_group("client limits")
    limits.add_argument("--header-timeout", type=float, default=ServeLimits.header_timeout_s,
                        help="seconds a client has to send its request headers (then the connection is closed)")
    limits.add_argument("--body-timeout", type=float, default=ServeLimits.body_timeout_s,
                        help="seconds a client has to send its request body (then 408)")
    limits.add_argument("--limit-concurrency", type=int, default=ServeLimits.limit_concurrency,
                        help="connections and requests open at once; past it new requests get a 503")
    limits.add_argument("--timeout-graceful-shutdown", type=int, default=ServeLimits.timeout_graceful_shutdown,
                        help="seconds open streams get to end (finish_reason 'abort') after SIGTERM / SIGINT")
    limits.add_argument("--max-body-bytes", type=int, default=None,
                        help="largest request body; past it a 413 before parsing (default: 1 MiB + 32 bytes per "
                             "token of max_model_len)")
    limits.add_argument("--stalled-stream-timeout", type=float, default=ServeLimits.stalled_stream_timeout_s,
                        help="seconds a stream's output may wait unread before the request is aborted")
    limits.add_argument("--timeout-keep-alive", type=int, default=ServeLimits.timeout_keep_alive,
                        help="seconds an idle keep-alive connection stays open (longer than clients keep it)")
    engine = parser.add_argument_group("engine (EngineConfig)")
    engine.add_argument("--block-size", type=int, default=16)
    engine.add_argument("--num-blocks", type=int, default=None)
    engine.add_argument("--kv-cache-bytes", type=int, default=None)
    engine.add_argument("--max-num-seqs", type=int, default=32)
    engine.add_argument("--max-num-batched-tokens", type=int, default=1024)
    engine.add_argument("--max-model-len", type=int, default=None)
    engine.add_argument("--scheduler", choices=("continuous", "static"), default="continuous")
    engine.add_argument("--kv-cache", choices=("paged", "contiguous"), default="paged")
    engine.add_argument("--enable-prefix-caching", action="store_true")
    engine.add_argument("--no-chunked-prefill", action="store_true")
    engine.add_argument("--speculative", choices=("ngram", "draft"), default=None)
    engine.add_argument("--num-speculative-tokens", type=int, default=4)
    engine.add_argument("--draft-model", default=None)
    engine.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    engine.add_argument("--dtype", choices=("auto", "float32", "float16", "bfloat16"), default="auto")
    engine.add_argument("--seed", type=int, default=0)
    engine.add_argument("--weights", choices=("dense", "q4_1"), default="dense",
                        help="dense: fp32 reference weights; q4_1: the GGUF's 4-bit codes (an approximation)")


def engine_config(args: argparse.Namespace) -> EngineConfig:
    spec = None
    if args.speculative is not None:
        spec = SpecConfig(method=args.speculative, num_speculative_tokens=args.num_speculative_tokens,
                          draft_model=args.draft_model)
    return EngineConfig(block_size=args.block_size, num_blocks=args.num_blocks, kv_cache_bytes=args.kv_cache_bytes,
                        max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                        max_model_len=args.max_model_len, scheduler=args.scheduler, kv_cache=args.kv_cache,
                        enable_prefix_caching=args.enable_prefix_caching,
                        enable_chunked_prefill=not args.no_chunked_prefill, speculative=spec,
                        device=args.device, dtype=args.dtype, seed=args.seed, weights=args.weights)


def serve_limits(args: argparse.Namespace) -> ServeLimits:
    return ServeLimits(args.header_timeout, args.body_timeout, args.limit_concurrency,
                       args.timeout_graceful_shutdown, args.max_body_bytes, args.stalled_stream_timeout,
                       args.timeout_keep_alive)


def served_model_name(args: argparse.Namespace) -> str:
    if args.served_model_name:
        return args.served_model_name
    if args.model is None:
        return DEFAULT_MODEL_NAME
    return "sim" if args.model == "sim" else Path(args.model).name


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="labkit serve", description="OpenAI-compatible server over labkit")
    add_serve_args(parser)
    args = parser.parse_args(argv)
    try:
        config, limits = engine_config(args), serve_limits(args)
    except ValueError as exc:
        parser.error(str(exc))
    from labkit.llm import LLM
    from labkit.serve.app import ServedModel
    from labkit.serve.server import bind, run_foreground

    try:                         # before the model loads: a busy port fails now, not after a minute
        sock = bind(args.host, args.port)
    except OSError as exc:
        parser.exit(2, f"labkit serve: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}\n")
    llm = LLM(model=args.model, config=config)
    print(f"labkit serve: {served_model_name(args)} on http://{args.host}:{args.port}/v1", flush=True)
    try:
        run_foreground(ServedModel(llm.engine, served_model_name(args)), sock, args.log_level, limits)
    except KeyboardInterrupt:    # uvicorn re-raises the SIGINT it handled; the shutdown was clean
        sys.exit(130)
