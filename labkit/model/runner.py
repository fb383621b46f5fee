"""The model runner: turns a scheduler decision into one forward pass over a ragged batch."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from labkit.attention.metadata import AttentionMetadata
from labkit.kv.paged_kv import PagedKVCache
from labkit.model.llama import LlamaModel
from labkit.scheduler.continuous import ScheduledRequest


@dataclass
class ModelInput:
    input_ids: list[int]
    positions: list[int]
    slot_mapping: list[int]
    query_lens: list[int]
    seq_lens: list[int]
    block_tables: list[list[int]]
    logits_indices: list[int]
    logits_rows: list[tuple[int, int]]    # per scheduled request: (first row, number of rows)


def prepare_input(scheduled: list[ScheduledRequest], kv_manager) -> ModelInput:
    """Flatten the step's tokens. A request gets logits rows only when this step reaches the end of
    its known tokens: 1 row for prefill/decode, 1 + k rows when verifying k drafts."""
    inp = ModelInput([], [], [], [], [], [], [], [])
    for s in scheduled:
        req, start = s.request, s.request.num_computed_tokens
        end = start + s.num_new_tokens
        rid = req.request_id
        offset = len(inp.input_ids)
        inp.input_ids += req.token_ids_with_spec()[start:end]
        inp.positions += range(start, end)
        inp.slot_mapping += kv_manager.slot_mapping(rid, start, end)
        inp.query_lens.append(s.num_new_tokens)
        inp.seq_lens.append(end)
        inp.block_tables.append(kv_manager.block_table(rid))
        rows = 1 + s.num_spec_tokens if end == req.num_tokens_with_spec else 0
        inp.logits_rows.append((len(inp.logits_indices), rows))
        inp.logits_indices += range(offset + s.num_new_tokens - rows, offset + s.num_new_tokens)
    return inp


class ModelRunner:
    def __init__(self, model: LlamaModel, kv_cache: PagedKVCache, device: torch.device, backend):
        self.model, self.kv_cache, self.device, self.backend = model, kv_cache, device, backend

    def execute(self, scheduled: list[ScheduledRequest], kv_manager) -> list[torch.Tensor | None]:
        """Run one step; returns per scheduled request its logits [rows, vocab] (None for a
        prefill chunk that does not reach the end of the prompt)."""
        self.kv_cache.copy_blocks(kv_manager.take_pending_copies())
        inp = prepare_input(scheduled, kv_manager)
        dev = self.device
        meta = AttentionMetadata.build(inp.query_lens, inp.seq_lens, inp.block_tables, inp.slot_mapping,
                                       kv_manager.meta_block_size, device=dev)
        logits = self.model(torch.tensor(inp.input_ids, device=dev), torch.tensor(inp.positions, device=dev),
                            self.kv_cache.layer_caches(kv_manager.meta_block_size), meta,
                            torch.tensor(inp.logits_indices, dtype=torch.long, device=dev), self.backend)
        return [logits[a:a + n] if n else None for a, n in inp.logits_rows]
