"""The model runner: turns a scheduler decision into one forward pass over a ragged batch.

It computes from the ``SchedulerOutput`` alone (tokens, positions, block tables, slot mappings and
block copies are all in it); it never reads or changes the scheduler's or the KV manager's state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from labkit.attention.backend import AttentionBackend
from labkit.attention.metadata import AttentionMetadata
from labkit.kv.paged_kv import PagedKVCache
from labkit.model.llama import LlamaModel
from labkit.scheduler_output import ScheduledRequest, SchedulerOutput


@dataclass
class ModelInput:
    input_ids: list[int]
    positions: list[int]
    slot_mapping: list[int]
    query_lens: list[int]
    seq_lens: list[int]
    block_tables: list[tuple[int, ...]]
    logits_indices: list[int]
    logits_rows: list[tuple[int, int]]    # per scheduled request: (first row, number of rows)


def prepare_input(scheduled: list[ScheduledRequest]) -> ModelInput:
    """Flatten the step's tokens. A request gets logits rows only when this step reaches the end of
    its known tokens: 1 row for prefill/decode, 1 + k rows when verifying k drafts."""
    inp = ModelInput([], [], [], [], [], [], [], [])
    for s in scheduled:
        offset = len(inp.input_ids)
        inp.input_ids += s.token_ids
        inp.positions += range(s.start, s.end)
        inp.slot_mapping += s.slot_mapping
        inp.query_lens.append(s.num_new_tokens)
        inp.seq_lens.append(s.end)
        inp.block_tables.append(s.block_table)
        inp.logits_rows.append((len(inp.logits_indices), s.num_logits))
        inp.logits_indices += range(offset + s.num_new_tokens - s.num_logits, offset + s.num_new_tokens)
    return inp


class ModelRunner:
    def __init__(self, model: LlamaModel, kv_cache: PagedKVCache, device: torch.device,
                 backend: AttentionBackend, block_size: int, compile: bool = False):
        self.model, self.kv_cache, self.device, self.backend = model, kv_cache, device, backend
        self.block_size = block_size            # of the layout the attention reads (meta_block_size)
        # torch.compile'd layer halves (EngineConfig(compile=True)); None runs eagerly.
        self.pieces = None
        if compile:
            from labkit.model.compiled import compiled_pieces  # imports torch._dynamo only when asked
            self.pieces = compiled_pieces()
        self.last_model_s = 0.0

    def execute(self, sched: SchedulerOutput) -> torch.Tensor | None:
        """Run one step; returns the logits [sum of num_logits, vocab] (each scheduled request's
        rows back to back: 1, or 1 + k when verifying, or none for a mid-prompt chunk)."""
        t0 = time.perf_counter()
        self.kv_cache.copy_blocks(sched.block_copies)
        inp = prepare_input(sched.scheduled)
        dev = self.device
        meta = AttentionMetadata.build(inp.query_lens, inp.seq_lens, inp.block_tables, inp.slot_mapping,
                                       self.block_size, device=dev)
        logits = self.model(torch.tensor(inp.input_ids, device=dev), torch.tensor(inp.positions, device=dev),
                            self.kv_cache.layer_caches(self.block_size), meta,
                            torch.tensor(inp.logits_indices, dtype=torch.long, device=dev), self.backend,
                            self.pieces)
        self.last_model_s = time.perf_counter() - t0
        return logits if inp.logits_indices else None
