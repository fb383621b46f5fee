"""Assemble an engine from a model and an EngineConfig: the one place that wires the parts.

Layers, bottom up: weights (``model.loader``) → KV tensors and runner → KV manager and scheduler
(``kv``, ``scheduler``) → sampler and proposer → ``LLMEngine``, which receives every part through
its constructor.
"""

from __future__ import annotations

from labkit.attention.backend import get_backend
from labkit.config import DEFAULT_NUM_BLOCKS, EngineConfig
from labkit.engine import LLMEngine
from labkit.executor import WorkerThreadExecutor
from labkit.kv import make_kv_manager
from labkit.kv.paged_kv import PagedKVCache, num_blocks_for_bytes
from labkit.model import q4_model
from labkit.model.input_batch import input_builder
from labkit.model.loader import load_model, pick_device, pick_dtype
from labkit.model.q4_model import q4_1_model
from labkit.model.runner import ModelRunner
from labkit.sample.sampler import Sampler
from labkit.scheduler import make_scheduler
from labkit.sim.simulator import build_sim_engine
from labkit.spec_decode.factory import make_proposer


def resolve_num_blocks(config: EngineConfig, bytes_per_token: int) -> int:
    if config.num_blocks is not None:
        return config.num_blocks
    if config.kv_cache_bytes is not None:
        return num_blocks_for_bytes(config.kv_cache_bytes, bytes_per_token * config.block_size)
    return DEFAULT_NUM_BLOCKS


def build_engine(model, config: EngineConfig, progress: bool = True, **sim_options) -> LLMEngine:
    if isinstance(model, str) and model == "sim":
        return build_sim_engine(config, **sim_options)
    if sim_options:
        raise ValueError(f"unknown LLM options {sorted(sim_options)} (only model='sim' takes extra options)")
    device = pick_device(config.device)
    dtype = pick_dtype(config.dtype, device)
    net, cfg, tokenizer, model_dir = load_model(model, device, dtype, progress=progress)
    net.tune()      # the product forms for this CPU and these weights (disk cache, or timed once)
    if config.weights == "q4_1":
        net = q4_1_model(net, model_dir)
        q4_model.tune(net)
    max_model_len = config.resolve_max_model_len(cfg.max_position_embeddings)
    num_blocks = resolve_num_blocks(config, cfg.kv_bytes_per_token(dtype.itemsize))
    kv_cache = PagedKVCache(cfg.num_hidden_layers, num_blocks, config.block_size, cfg.num_key_value_heads,
                            cfg.head_dim, dtype, device)
    kv_manager = make_kv_manager(config, num_blocks, max_model_len)
    runner = ModelRunner(net, kv_cache, device, get_backend(config.attention_backend, device),
                         kv_manager.meta_block_size, compile=config.compile,
                         build_input=input_builder(config, max_model_len, kv_manager.meta_block_size, device))
    sampler = Sampler(config.seed, config.batched_sampling)
    proposer = None if config.speculative is None else make_proposer(
        config.speculative, config, max_model_len, runner=runner, kv_manager=kv_manager, sampler=sampler,
        vocab_size=cfg.vocab_size)
    return LLMEngine(config=config, tokenizer=tokenizer, runner=runner, kv_manager=kv_manager,
                     scheduler=make_scheduler(config, kv_manager, max_model_len), sampler=sampler,
                     proposer=proposer, max_model_len=max_model_len, vocab_size=cfg.vocab_size,
                     model_config=cfg, model_dir=model_dir,
                     executor=WorkerThreadExecutor() if config.async_scheduling else None)
