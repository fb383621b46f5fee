"""Each array of the model's input holds what its definition says, on both input builders.

For a step's rows (``model/input_batch.py``, ``attention/metadata.py``), with ``offset`` the row's first
flat token::

    input_ids        every row's tokens back to back
    positions        row i's tokens at starts[i], starts[i] + 1, ...
    slot_mapping     block_table[p // block_size] * block_size + p % block_size for each position p
    logits_indices   the flat indices of each row's last num_logits tokens
    query_start_loc  0, then the running sum of the rows' token counts
    seq_lens         starts[i] + num_tokens[i]: the context each row's last token attends to
    block_tables     one row per request, as wide as the longest table (at least 1), padded

The expected values below are worked out by hand from these definitions, for decisions built by hand:
the list path (``build_from_lists``) and the persistent batch (``InputBatch.prepare``) must each give them.
"""

from __future__ import annotations

import pytest
import torch

from labkit.config import EngineConfig
from labkit.model.input_batch import InputBatch, build_from_lists, input_builder, long_tensor, prepare_input
from labkit.scheduler_output import SchedulerOutput, StepKind

BLOCK = 4


def decision(*rows) -> SchedulerOutput:
    """Rows of (request id, tokens, start, block table, kind, num_logits, num_spec)."""
    out = SchedulerOutput(BLOCK)
    for rid, tokens, start, table, kind, num_logits, num_spec in rows:
        out.add_row(rid, tokens, start, table, kind, num_logits, num_spec)
    out.close(len(out.token_ids))
    return out


def builders():
    """Both paths, each as ``decision -> BatchInput`` on the CPU (a fresh persistent batch each time)."""
    return {"lists": lambda d: build_from_lists(d, BLOCK, "cpu"),
            "persistent": lambda d: InputBatch(4, 8, BLOCK, "cpu").prepare(d)}


def arrays(got) -> dict:
    """Every array of a ``BatchInput`` as a list, every size as a number."""
    meta = got.metadata
    return {"input_ids": got.input_ids.tolist(), "positions": got.positions.tolist(),
            "slot_mapping": meta.slot_mapping.tolist(), "logits_indices": got.logits_indices.tolist(),
            "query_start_loc": meta.query_start_loc.tolist(), "seq_lens": meta.seq_lens.tolist(),
            "block_tables": meta.block_tables.tolist(), "query_lens_list": meta.query_lens_list,
            "seq_lens_list": meta.seq_lens_list, "max_query_len": meta.max_query_len,
            "max_seq_len": meta.max_seq_len, "block_size": meta.block_size}


def dtypes(got) -> dict:
    """The kernels read the token arrays as int64 and the lengths and tables as int32."""
    meta = got.metadata
    return {"input_ids": got.input_ids.dtype, "positions": got.positions.dtype,
            "logits_indices": got.logits_indices.dtype, "slot_mapping": meta.slot_mapping.dtype,
            "query_start_loc": meta.query_start_loc.dtype, "seq_lens": meta.seq_lens.dtype,
            "block_tables": meta.block_tables.dtype}


DTYPES = {"input_ids": torch.int64, "positions": torch.int64, "logits_indices": torch.int64,
          "slot_mapping": torch.int64, "query_start_loc": torch.int32, "seq_lens": torch.int32,
          "block_tables": torch.int32}

# p: a prefill chunk in the middle of its prompt (no logits); d: a decode row; v: the last token and two
# drafts to verify (3 logits rows); e: a whole short prompt, ending (1 logits row).
MIXED = decision(("p", (11, 12, 13), 4, [5, 9], StepKind.PREFILL, 0, 0),
                 ("d", (21,), 6, [2, 7], StepKind.DECODE, 1, 0),
                 ("v", (31, 32, 33), 3, [4, 1], StepKind.VERIFY, 3, 2),
                 ("e", (41, 42), 0, [3], StepKind.PREFILL, 1, 0))
MIXED_ARRAYS = {
    "input_ids": [11, 12, 13, 21, 31, 32, 33, 41, 42],
    "positions": [4, 5, 6, 6, 3, 4, 5, 0, 1],
    # p: block 9 holds positions 4..7; d: block 7 position 6; v: block 4 position 3, block 1 positions 4, 5;
    # e: block 3 positions 0, 1
    "slot_mapping": [36, 37, 38, 30, 19, 4, 5, 12, 13],
    "logits_indices": [3, 4, 5, 6, 8],          # d's token; v's three; e's last (flat tokens 7, 8)
    "query_start_loc": [0, 3, 4, 7, 9],
    "seq_lens": [7, 7, 6, 2],
    "block_tables": [[5, 9], [2, 7], [4, 1], [3, 0]],
    "query_lens_list": [3, 1, 3, 2], "seq_lens_list": [7, 7, 6, 2], "max_query_len": 3, "max_seq_len": 7,
    "block_size": BLOCK,
}


@pytest.mark.parametrize("path", ["lists", "persistent"])
def test_a_mixed_steps_arrays_are_their_definitions(path):
    got = builders()[path](MIXED)
    assert arrays(got) == MIXED_ARRAYS
    assert dtypes(got) == DTYPES


def test_the_flat_lists_name_each_rows_logits_rows():
    """``logits_rows[i]``: (the first logits row of row i, how many it has); a row without logits has none."""
    flat = prepare_input(MIXED)
    assert flat.logits_rows == [(0, 0), (0, 1), (1, 3), (4, 1)]
    assert (flat.positions, flat.slot_mapping, flat.logits_indices) == (
        MIXED_ARRAYS["positions"], MIXED_ARRAYS["slot_mapping"], MIXED_ARRAYS["logits_indices"])


# One token per row, but not every row wants logits: a one-token chunk in the middle of a prompt (c) beside
# two decode rows.
ONE_TOKEN_ROWS = decision(("a", (7,), 5, [1, 6], StepKind.DECODE, 1, 0),
                          ("c", (50,), 2, [8], StepKind.PREFILL, 0, 0),
                          ("b", (9,), 9, [2, 3, 4], StepKind.DECODE, 1, 0))
ONE_TOKEN_ARRAYS = {
    "input_ids": [7, 50, 9], "positions": [5, 2, 9],
    "slot_mapping": [25, 34, 17],               # block 6 position 5; block 8 position 2; block 4 position 9
    "logits_indices": [0, 2],                   # c wants none
    "query_start_loc": [0, 1, 2, 3], "seq_lens": [6, 3, 10],
    "block_tables": [[1, 6, 0], [8, 0, 0], [2, 3, 4]],
    "query_lens_list": [1, 1, 1], "seq_lens_list": [6, 3, 10], "max_query_len": 1, "max_seq_len": 10,
    "block_size": BLOCK,
}


@pytest.mark.parametrize("path", ["lists", "persistent"])
def test_a_one_token_per_row_step_gives_logits_only_to_the_rows_that_want_them(path):
    got = builders()[path](ONE_TOKEN_ROWS)
    assert arrays(got) == ONE_TOKEN_ARRAYS
    assert dtypes(got) == DTYPES


NO_LOGITS = {
    "one token a row": decision(("c", (50,), 2, [8], StepKind.PREFILL, 0, 0),
                                ("f", (51,), 1, [3], StepKind.PREFILL, 0, 0)),
    "a chunk": decision(("p", (11, 12, 13), 4, [5, 9], StepKind.PREFILL, 0, 0)),
}


@pytest.mark.parametrize("path", ["lists", "persistent"])
@pytest.mark.parametrize("name", NO_LOGITS)
def test_a_step_that_wants_no_logits_has_an_empty_int64_logits_index(path, name):
    """Mid-prompt chunks only. A table of one block is one column wide."""
    got = builders()[path](NO_LOGITS[name])
    assert got.logits_indices.tolist() == [] and dtypes(got) == DTYPES
    assert got.metadata.block_tables.shape[1] == (1 if name == "one token a row" else 2)


@pytest.mark.parametrize("path", ["lists", "persistent"])
def test_a_step_with_no_rows_gives_empty_inputs(path):
    """No tokens, no lengths, a table of no rows (and one column, the narrowest a table is), and the
    running sum's 0: for a batch that never held a row, and for one that held rows the step before."""
    empty = {"input_ids": [], "positions": [], "slot_mapping": [], "logits_indices": [], "query_start_loc": [0],
             "seq_lens": [], "block_tables": [], "query_lens_list": [], "seq_lens_list": [], "max_query_len": 0,
             "max_seq_len": 0, "block_size": BLOCK}
    if path == "lists":
        runs = [lambda d: build_from_lists(d, BLOCK, "cpu")]
    else:
        fresh, used = InputBatch(4, 8, BLOCK, "cpu"), InputBatch(4, 8, BLOCK, "cpu")
        used.prepare(MIXED)
        runs = [fresh.prepare, used.prepare]
    for run in runs:
        got = run(decision())
        assert arrays(got) == empty and dtypes(got) == DTYPES
        assert got.metadata.block_tables.shape == (0, 1)


def test_long_tensor_keeps_every_int64_and_an_empty_list_is_int64_too():
    assert long_tensor([]).dtype == torch.int64 and long_tensor([]).shape == (0,)
    values = [-1, 0, 2**40, -(2**63), 2**63 - 1]
    got = long_tensor(values)
    assert got.dtype == torch.int64 and got.tolist() == values


@pytest.mark.parametrize("persistent", [False, True])
def test_the_inputs_are_made_on_the_builders_device(persistent):
    """``meta``: a device other than the CPU that every torch build has (it holds shapes, no values)."""
    build = input_builder(EngineConfig(max_num_seqs=4, persistent_batch=persistent), 32, BLOCK, device="meta")
    got = build(MIXED)
    meta = got.metadata
    tensors = {"input_ids": got.input_ids, "positions": got.positions, "logits_indices": got.logits_indices,
               "query_start_loc": meta.query_start_loc, "seq_lens": meta.seq_lens,
               "block_tables": meta.block_tables, "slot_mapping": meta.slot_mapping}
    assert {name: t.device.type for name, t in tensors.items()} == dict.fromkeys(tensors, "meta")
    assert meta.block_size == BLOCK


@pytest.mark.parametrize("max_model_len", [16, 17])
def test_the_persistent_batch_holds_the_table_of_a_sequence_of_max_model_len_tokens(max_model_len):
    """A sequence of ``max_model_len`` tokens has a table of ceil(max_model_len / block_size) blocks."""
    prepare = input_builder(EngineConfig(max_num_seqs=2, persistent_batch=True), max_model_len, BLOCK)
    num_blocks = -(-max_model_len // BLOCK)
    table = list(range(1, num_blocks + 1))
    last = max_model_len - 1
    got = prepare(decision(("a", (5,), last, table, StepKind.DECODE, 1, 0)))
    assert got.metadata.block_tables.tolist() == [table]
    assert got.metadata.slot_mapping.tolist() == [table[last // BLOCK] * BLOCK + last % BLOCK]
