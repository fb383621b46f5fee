"""Schedulers decide, each step, which requests run and how many tokens each computes."""

from __future__ import annotations

from labkit.config import EngineConfig
from labkit.scheduler.continuous import ContinuousScheduler
from labkit.scheduler.static import StaticScheduler


def make_scheduler(config: EngineConfig, kv_manager, max_model_len: int) -> ContinuousScheduler:
    cls = StaticScheduler if config.scheduler == "static" else ContinuousScheduler
    return cls(config, kv_manager, max_model_len)
