"""What one forward pass needs to know about its ragged batch, passed explicitly to every layer.

A batch is a flat list of ``num_tokens`` new tokens belonging to ``num_seqs`` sequences. Sequence s
owns query tokens ``query_start_loc[s] : query_start_loc[s+1]``; those are the *last* query_len
tokens of its context of ``seq_lens[s]`` tokens. So one call mixes a prefill chunk, a single decode
token and k+1 verification tokens::

    seq 0 (prefill chunk) |  cached ....... | q q q q q |      seq_len 9, query_len 5
    seq 1 (decode)        |  cached ................. | q |    seq_len 12, query_len 1
    seq 2 (verify k=3)    |  cached ......... | q q q q |      seq_len 10, query_len 4

Query token j of sequence s sits at position ``seq_lens[s] - query_len_s + j`` and attends to
positions 0..that position (causal). Key/value entries are read through ``block_tables``: position p
of sequence s lives in slot ``block_tables[s, p // block_size] * block_size + p % block_size``.
New K/V are written to ``slot_mapping[i]`` for flat token i before attention reads them.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import torch


@dataclass
class AttentionMetadata:
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32, cumulative query lengths
    seq_lens: torch.Tensor         # [num_seqs] int32, context length incl. the new tokens
    block_tables: torch.Tensor     # [num_seqs, max_blocks_per_seq] int32, padded with 0
    slot_mapping: torch.Tensor     # [num_tokens] int64, where each new token's K/V is written
    block_size: int
    max_query_len: int
    max_seq_len: int
    # Host-side copies, so backends never synchronise a device to read sizes.
    query_lens_list: list[int]
    seq_lens_list: list[int]
    # Per-forward scratch for backends: index tensors and masks that are the same in every layer are
    # built once per step (first layer) and reused by the others. Not part of the contract.
    scratch: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens_list)

    @classmethod
    def build(cls, query_lens: list[int], seq_lens: list[int], block_tables: list[list[int]],
              slot_mapping: list[int], block_size: int, device: torch.device | str = "cpu"
              ) -> "AttentionMetadata":
        """Build from plain Python lists (what the scheduler and KV manager produce)."""
        if len(query_lens) != len(seq_lens) or len(seq_lens) != len(block_tables):
            raise ValueError("query_lens, seq_lens and block_tables must have one entry per sequence")
        starts = [0]
        for q in query_lens:
            starts.append(starts[-1] + q)
        width = max((len(t) for t in block_tables), default=1) or 1
        # One flat int32 array (C loops, no Python int per element), padded with 0 to `width`.
        padded, zeros = array("i"), array("i", bytes(4 * width))
        for t in block_tables:
            padded.extend(t)
            padded.extend(zeros[:width - len(t)])
        return cls(
            query_start_loc=_int32(starts, device),
            seq_lens=_int32(seq_lens, device),
            block_tables=_int32(padded, device).reshape(len(block_tables), width),
            slot_mapping=torch.tensor(slot_mapping, dtype=torch.int64, device=device),
            block_size=block_size,
            max_query_len=max(query_lens, default=0),
            max_seq_len=max(seq_lens, default=0),
            query_lens_list=list(query_lens),
            seq_lens_list=list(seq_lens),
        )


def _int32(values, device) -> torch.Tensor:
    """A list or ``array('i')`` of ints as an int32 tensor on ``device``."""
    if not len(values):
        return torch.zeros(0, dtype=torch.int32, device=device)
    data = values if isinstance(values, array) else array("i", values)
    return torch.frombuffer(data, dtype=torch.int32).to(device)
