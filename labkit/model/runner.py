"""The model runner: turns a scheduler decision into one forward pass over a ragged batch.

It computes from the ``SchedulerOutput`` alone (tokens, positions, block tables, slot mappings and
block copies are all in it); it never reads or changes the scheduler's or the KV manager's state.
"""

from __future__ import annotations

import time

import torch

from labkit.attention.backend import AttentionBackend
from labkit.kv.paged_kv import PagedKVCache
from labkit.model.input_batch import ModelInput, build_from_lists, prepare_input
from labkit.model.llama import LlamaModel
from labkit.model.strategies import choose
from labkit.scheduler_output import SchedulerOutput

__all__ = ["ModelInput", "ModelRunner", "prepare_input"]


class ModelRunner:
    def __init__(self, model: LlamaModel, kv_cache: PagedKVCache, device: torch.device,
                 backend: AttentionBackend, block_size: int, compile: bool = False, build_input=None):
        self.model, self.kv_cache, self.device, self.backend = model, kv_cache, device, backend
        self.block_size = block_size            # of the layout the attention reads (meta_block_size)
        # torch.compile'd layer halves (EngineConfig(compile=True)), the strategy then run every step; None: eager.
        self.pieces = None
        if compile:
            from labkit.model.compiled import compiled_pieces  # imports torch._dynamo only when asked
            self.pieces = compiled_pieces()
        self.last_model_s = 0.0
        # decision -> BatchInput (labkit.model.input_batch): the list path unless a persistent batch is given.
        self.build_input = build_input or (lambda decision: build_from_lists(decision, block_size, device))

    def execute(self, sched: SchedulerOutput) -> torch.Tensor | None:
        """Run one step; returns the logits [sum of num_logits, vocab] (each scheduled request's
        rows back to back: 1, or 1 + k when verifying, or none for a mid-prompt chunk)."""
        t0 = time.perf_counter()
        self.kv_cache.copy_blocks(sched.block_copies)
        inp = self.build_input(sched)
        caches = self.kv_cache.layer_caches(self.block_size)
        # how the layers run this step: the plain algorithm, or a faster form of it (labkit.model.strategies)
        strategy = choose(self.model, inp.input_ids, inp.metadata, caches, self.backend, self.pieces)
        logits = self.model(inp.input_ids, inp.positions, caches, inp.metadata, inp.logits_indices, self.backend,
                            strategy)
        self.last_model_s = time.perf_counter() - t0
        return logits if len(inp.logits_indices) else None
