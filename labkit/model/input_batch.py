"""The runner's inputs for one step: built from lists every step, or from a persistent batch.

``build_from_lists`` is the readable path: flatten every scheduled row's tokens, positions, slots and
block table (``prepare_input``), then turn the lists into tensors. Each step pays for every
row's whole block table again, although a decoding request's table changes once every ``block_size``
steps.

``InputBatch`` (vLLM v1's ``InputBatch``/``BlockTable``) keeps per-request columns that persist across
steps, one row per request::

    row_of = {"a": 0, "b": 1, "c": 2}          block_table (rows x max_blocks, int32)
    num_blocks = [2, 1, 3]                     row 0: [7, 2, 0, ...]
                                               row 1: [4, 0, 0, ...]
                                               row 2: [9, 5, 8, ...]

Each step it writes only what changed, and it is told what changed: it never compares tables, starts or
lengths to find out. A row it binds now (a request it did not hold last step: new, forked, or back after a
step without a row) holds no copy, so it gets the whole table. For a row it keeps, the decision names each
change (vLLM v1's runner is told ``new_block_ids`` and ``resumed_from_preemption`` the same way)::

    admitted    admitted (again, after a preemption)   the whole table
    truncated   rid -> n: rejected drafts rolled back  the row keeps n entries
    replaced    rid -> j: a copy-on-write target       entry j
    appended    rid -> j: blocks new at the end        entries j on

The scheduler names admissions; the KV manager logs the rest as it changes a table that already exists
(``kv/table_changes.py``). A change the decision leaves out is never written: the row keeps its old
entries (``tests/engine/test_input_batch_changes.py``). A decision with no rows is not run, and changes no
table a kept row holds: with no rows, no request was given blocks, and a preempted one comes back admitted.

The step's tensors are then slices and vectorised arithmetic over those columns:
``block_tables = block_table[rows]``, slots by ``kv.slots.slot_mapping_rows`` (the one slot formula), in numpy
on the host. The decision's own columns (starts, token ids) become arrays in one C loop each. Both
builders read the same ``SchedulerOutput`` and give the same values (``tests/sim_oracle.py`` writes and
reads its shadow KV cache through whichever builder the engine uses).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np
import torch

from labkit.attention.metadata import AttentionMetadata
from labkit.kv.slots import slot, slot_mapping_rows
from labkit.scheduler_output import SchedulerOutput


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


def prepare_input(decision: SchedulerOutput) -> ModelInput:
    """Flatten the step's rows: row i's tokens sit at positions ``starts[i]`` on, their K/V go to
    ``kv.slots.slot``, and a row that wants k logits rows gets its last k tokens'."""
    inp = ModelInput(list(decision.token_ids), [], [], list(decision.num_tokens), [], list(decision.block_tables), [], [])
    positions, slots, logits_indices, bs = inp.positions, inp.slot_mapping, inp.logits_indices, decision.block_size
    offset = 0
    rows = zip(decision.starts, decision.num_tokens, decision.block_tables, decision.num_logits)
    for i, (start, num_new, table, num_logits) in enumerate(rows):
        end = start + num_new
        inp.seq_lens.append(end)
        inp.logits_rows.append((len(logits_indices), num_logits))
        if num_new == 1:                 # a decode row, most rows of most steps: no ranges to build
            positions.append(start)
            slots.append(slot(table, start, bs))
            if num_logits:
                logits_indices.append(offset)
        else:
            positions += range(start, end)
            slots += decision.slot_mapping(i)
            logits_indices += range(offset + num_new - num_logits, offset + num_new)
        offset += num_new
    return inp


@dataclass
class BatchInput:
    """What the forward pass reads: flat token ids and positions, which rows need logits, and the
    attention metadata (block tables, slot mapping, lengths)."""

    input_ids: torch.Tensor        # [num_tokens] int64
    positions: torch.Tensor        # [num_tokens] int64
    logits_indices: torch.Tensor   # [num_logits] int64, flat token indices whose logits are wanted
    metadata: AttentionMetadata


def long_tensor(values: list[int]) -> torch.Tensor:
    """A Python list of ints as an int64 tensor, through an ``array`` (about 3x faster than
    ``torch.tensor(list)`` at a thousand values: one C loop instead of one Python object per element)."""
    if not values:
        return torch.zeros(0, dtype=torch.long)
    return torch.frombuffer(array("q", values), dtype=torch.long)


def build_from_lists(decision: SchedulerOutput, block_size: int, device) -> BatchInput:
    inp = prepare_input(decision)
    meta = AttentionMetadata.build(inp.query_lens, inp.seq_lens, inp.block_tables, inp.slot_mapping, block_size,
                                   device=device)
    return BatchInput(long_tensor(inp.input_ids).to(device), long_tensor(inp.positions).to(device),
                      long_tensor(inp.logits_indices).to(device), meta)


class InputBatch:
    """Persistent per-request columns; ``prepare(decision)`` updates what changed and slices the rest.

    The columns and the step's index arithmetic are numpy arrays on the host (as vLLM's are): an
    operation on a few hundred integers costs about a microsecond in numpy and several in torch, and a
    step does some twenty of them. The step's tensors are made from fresh arrays (``torch.from_numpy``
    shares their memory; nothing writes to them afterwards) and moved to the device at the end."""

    def __init__(self, max_num_reqs: int, max_blocks_per_req: int, block_size: int, device):
        self.block_size, self.device = block_size, device
        self.block_table = np.zeros((max_num_reqs, max_blocks_per_req), dtype=np.int32)
        self.num_blocks = np.zeros(max_num_reqs, dtype=np.int32)     # valid entries per row
        self.row_of: dict[str, int] = {}
        self._free_rows = list(range(max_num_reqs - 1, -1, -1))
        self._rids: list[str] = []                  # the last step's requests, in row order
        self._row_list: list[int] = []              # their rows (and as an array, below)
        self._index: dict[str, int] = {}            # request id -> its position in this step
        self._rows = np.zeros(0, dtype=np.int64)

    # -- which row holds which request -------------------------------------------------------------
    def _bind(self, rids: list[str]) -> list[int]:
        """Rows for this step's requests: new ones get a free row, gone ones free theirs. Returns the step
        positions of the requests given a row now (the batch holds no copy of their tables)."""
        present = set(rids)
        for rid in [r for r in self.row_of if r not in present]:
            self._free_rows.append(self.row_of.pop(rid))
        bound = []
        for i, rid in enumerate(rids):
            if rid not in self.row_of:
                if not self._free_rows:
                    self._grow()
                self.row_of[rid] = self._free_rows.pop()
                bound.append(i)
        self._rids = rids
        self._row_list = [self.row_of[r] for r in rids]
        self._index = {rid: i for i, rid in enumerate(rids)}
        self._rows = np.array(self._row_list, dtype=np.int64)
        return bound

    def _grow(self) -> None:
        """More sequences than rows (n > 1 children count beyond max_num_seqs): double the rows."""
        n = len(self.num_blocks)
        self.block_table = np.concatenate([self.block_table, np.zeros_like(self.block_table)])
        self.num_blocks = np.concatenate([self.num_blocks, np.zeros_like(self.num_blocks)])
        self._free_rows.extend(range(2 * n - 1, n - 1, -1))

    def _write_tables(self, decision: SchedulerOutput, bound: list[int]) -> None:
        """Apply the decision's named table changes to the rows of this step's requests::

            bound this step, or admitted    write the whole table       num_blocks = its length
            truncated[rid] = n              write nothing               num_blocks = n
            replaced[rid] = j               write entry j
            appended[rid] = j               write entries j on          num_blocks = its length

        ``bound``: the step positions of rows bound now. A change named for a request without a row this
        step is skipped: its row was freed, and it is written whole when it is bound again."""
        index, tables, row_list, num_blocks = self._index, decision.block_tables, self._row_list, self.num_blocks
        for rid, n in decision.truncated.items():
            i = index.get(rid)
            if i is not None:
                num_blocks[row_list[i]] = n
        rows, cols, values = [], [], []
        for rid, j in decision.replaced.items():
            i = index.get(rid)
            if i is not None:
                rows.append(row_list[i])
                cols.append(j)
                values.append(tables[i][j])
        first = dict.fromkeys(bound, 0)                   # step position -> first entry to write, once per row
        for rid in decision.admitted:                     # (a request admitted now is usually bound now too)
            i = index.get(rid)
            if i is not None:
                first[i] = 0
        for rid, j in decision.appended.items():
            i = index.get(rid)
            if i is not None:
                first[i] = min(first.get(i, j), j)
        for i, j in first.items():
            table, row = tables[i], row_list[i]
            rows += [row] * (len(table) - j)
            cols += range(j, len(table))
            values += table[j:]
            num_blocks[row] = len(table)
        if rows:
            if max(cols) >= self.block_table.shape[1]:
                raise ValueError(f"a block table has more than max_blocks_per_req ({self.block_table.shape[1]}) blocks")
            self.block_table[rows, cols] = values

    # -- one step ----------------------------------------------------------------------------------
    def prepare(self, decision: SchedulerOutput) -> BatchInput:
        rids, start_list, n = decision.request_ids, decision.starts, decision.num_rows
        bound = self._bind(rids) if rids != self._rids else []    # steady decode: the same requests, same order
        self._write_tables(decision, bound)
        starts = np.array(start_list, dtype=np.int64)
        width = max(int(self.num_blocks[self._rows].max()), 1) if n else 1
        if decision.num_scheduled_tokens == n:      # one token per row: decode steps, every array a slice
            positions, token_rows = starts, self._rows
            query_lens, seq = [1] * n, starts + 1
            seq_lens = seq.tolist()
            starts_loc = np.arange(n + 1, dtype=np.int32)
            logits_indices = (np.arange(n, dtype=np.int64) if decision.num_logits.count(1) == n else
                              np.array([i for i, k in enumerate(decision.num_logits) if k], dtype=np.int64))
        else:
            flat = prepare_input(decision)
            query_lens, seq_lens = flat.query_lens, flat.seq_lens
            positions = np.array(flat.positions, dtype=np.int64)
            token_rows = np.repeat(self._rows, query_lens)
            logits_indices = np.array(flat.logits_indices, dtype=np.int64)
            seq = np.array(seq_lens, dtype=np.int64)
            starts_loc = np.zeros(n + 1, dtype=np.int32)
            starts_loc[1:] = np.cumsum(query_lens)
        bs, dev = self.block_size, self.device
        slot_mapping = slot_mapping_rows(self.block_table, token_rows, positions, bs)
        meta = AttentionMetadata(query_start_loc=_tensor(starts_loc, dev), seq_lens=_tensor(seq.astype(np.int32), dev),
                                 block_tables=_tensor(self.block_table[self._rows, :width], dev),
                                 slot_mapping=_tensor(slot_mapping, dev), block_size=bs,
                                 max_query_len=max(query_lens, default=0), max_seq_len=max(seq_lens, default=0),
                                 query_lens_list=query_lens, seq_lens_list=seq_lens)
        return BatchInput(long_tensor(decision.token_ids).to(dev), _tensor(positions, dev),
                          _tensor(logits_indices, dev), meta)


def _tensor(values: np.ndarray, device) -> torch.Tensor:
    """A step's array as a tensor on ``device`` (on the CPU it shares the array's memory)."""
    return torch.from_numpy(values).to(device)


def input_builder(config, max_model_len: int, block_size: int, device="cpu"):
    """``decision -> BatchInput`` for an engine: the persistent batch's ``prepare`` when
    ``config.persistent_batch``, else the list path. ``block_size``: the layout attention reads."""
    if config.persistent_batch:
        max_blocks = -(-max_model_len // block_size) + 1
        return InputBatch(config.max_num_seqs, max_blocks, block_size, device).prepare
    return lambda decision: build_from_lists(decision, block_size, device)
