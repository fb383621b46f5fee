"""KV cache bookkeeping (pure Python: ints, lists, dicts) and the device tensors that hold K/V."""

from __future__ import annotations

from labkit.config import EngineConfig
from labkit.kv.contiguous import ContiguousKVManager
from labkit.kv.kv_cache_manager import KVCacheManager


def make_kv_manager(config: EngineConfig, num_blocks: int, max_model_len: int) -> KVCacheManager | ContiguousKVManager:
    """The paged manager, or the contiguous (max-length reservation) baseline over as many slots."""
    if config.kv_cache == "contiguous":
        return ContiguousKVManager(num_blocks * config.block_size, config.block_size, config.contiguous_reserve,
                                   max_model_len)
    return KVCacheManager(num_blocks, config.block_size, config.enable_prefix_caching)
