"""Assemble an engine from a model and an EngineConfig: the one place that wires the parts."""

from __future__ import annotations

from labkit.config import EngineConfig
from labkit.engine import LLMEngine

DEFAULT_NUM_BLOCKS = 512
DEFAULT_MAX_MODEL_LEN = 4096


def resolve_max_model_len(config: EngineConfig, model_limit: int) -> int:
    if config.max_model_len is None:
        return min(model_limit, DEFAULT_MAX_MODEL_LEN)
    if config.max_model_len > model_limit:
        raise ValueError(f"max_model_len must be <= the model's limit {model_limit}, got {config.max_model_len}")
    return config.max_model_len


def resolve_num_blocks(config: EngineConfig, bytes_per_token: int) -> int:
    from labkit.kv.paged_kv import num_blocks_for_bytes

    if config.num_blocks is not None:
        return config.num_blocks
    if config.kv_cache_bytes is not None:
        return num_blocks_for_bytes(config.kv_cache_bytes, bytes_per_token * config.block_size)
    return DEFAULT_NUM_BLOCKS


def make_kv_manager(config: EngineConfig, num_blocks: int, max_model_len: int):
    if config.kv_cache == "contiguous":
        from labkit.kv.contiguous import ContiguousKVManager
        return ContiguousKVManager(num_blocks * config.block_size, config.block_size, config.contiguous_reserve,
                                   max_model_len)
    from labkit.kv.kv_cache_manager import KVCacheManager
    return KVCacheManager(num_blocks, config.block_size, config.enable_prefix_caching)


def make_scheduler(config: EngineConfig, kv_manager, max_model_len: int):
    if config.scheduler == "static":
        from labkit.scheduler.static import StaticScheduler
        return StaticScheduler(config, kv_manager, max_model_len)
    from labkit.scheduler.continuous import ContinuousScheduler
    return ContinuousScheduler(config, kv_manager, max_model_len)


def build_engine(model, config: EngineConfig, progress: bool = True, **sim_options) -> LLMEngine:
    if isinstance(model, str) and model == "sim":
        from labkit.sim.engine import build_sim_engine
        return build_sim_engine(config, **sim_options)
    if sim_options:
        raise ValueError(f"unknown LLM options {sorted(sim_options)} (only model='sim' takes extra options)")
    from labkit.kv.paged_kv import PagedKVCache
    from labkit.attention.backend import get_backend
    from labkit.llm import load_model, pick_device, pick_dtype
    from labkit.model.runner import ModelRunner

    device = pick_device(config.device)
    dtype = pick_dtype(config.dtype, device)
    backend = get_backend(config.attention_backend, device)
    net, cfg, tokenizer, model_dir = load_model(model, device, dtype, progress=progress)
    max_model_len = resolve_max_model_len(config, cfg.max_position_embeddings)
    num_blocks = resolve_num_blocks(config, cfg.kv_bytes_per_token(dtype.itemsize))
    kv_cache = PagedKVCache(cfg.num_hidden_layers, num_blocks, config.block_size, cfg.num_key_value_heads,
                            cfg.head_dim, dtype, device)
    kv_manager = make_kv_manager(config, num_blocks, max_model_len)
    scheduler = make_scheduler(config, kv_manager, max_model_len)
    runner = ModelRunner(net, kv_cache, device, backend)
    engine = LLMEngine(config=config, tokenizer=tokenizer, runner=runner, kv_manager=kv_manager,
                       scheduler=scheduler, max_model_len=max_model_len, vocab_size=cfg.vocab_size)
    engine.model_config, engine.model_dir, engine.kv_cache = cfg, model_dir, kv_cache
    if config.speculative is not None:
        from labkit.spec_decode.factory import make_proposer
        engine.proposer = make_proposer(config.speculative, engine)
    return engine
