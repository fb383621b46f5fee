"""A checking stand-in for the model: the simulated engine, with a shadow KV cache that the runner
really writes and reads, and a "model" whose next token depends on what it reads back.

Why: the simulated model's tokens depend only on (request, position), so equal outputs alone would
not show that the KV bookkeeping is right. ``ShadowRunner`` keeps one token id per physical KV slot.
Every step it

    0. checks the decision against the state it was made from: each scheduled request's tokens,
       slots, block table and kind are what the general formulas give (steady decode rows take a
       fast path in the scheduler and the KV manager; it must agree with them),
    1. applies the manager's pending block copies (copy-on-write),
    2. writes each scheduled token into the slot ``slot_mapping`` names,
    3. reads every scheduled sequence's whole context back through its block table and asserts it is
       exactly the request's tokens (a stale prefix-cache block, a missed copy-on-write, two requests
       in one slot or a rollback that lost a token all fail here, at the step they happen),
    4. predicts the next token from that context with ``next_token``.

``next_token`` copies the token ``PERIOD`` places back most of the time, so n-gram speculation gets
real acceptances and rejections, and ends a sequence with EOS now and then. Because it is a pure
function of (request id, context), ``expected_output`` replays it without any scheduling: every
request's output must equal that oracle, whatever batching, preemption or layout the engine used.
"""

from __future__ import annotations

import zlib

import torch

from labkit import LLM, EngineConfig
from labkit.model.input_batch import ModelInput
from labkit.scheduler.continuous import step_kind
from labkit.scheduler_output import PLACEHOLDER
from labkit.sim.cost import step_time
from labkit.sim.simulator import SIM_EOS, SIM_VOCAB, SimRunner

PERIOD = 5          # next_token copies the token this many places back (n-gram lookup can find it)
EOS_ONE_IN = 40     # roughly one position in this many ends the sequence (unless ignore_eos)


def _h(request_id: str, position: int) -> int:
    return zlib.crc32(f"{request_id}@{position}".encode())


def next_token(request_id: str, context: list[int]) -> int:
    """The token at position len(context), a pure function of the request and its context."""
    p = len(context)
    h = _h(request_id, p)
    if h % EOS_ONE_IN == 0:
        return SIM_EOS
    if h % 4 and p >= PERIOD:
        return context[p - PERIOD]
    return 97 + (h >> 8) % 26


def expected_output(request_id: str, prompt: list[int], max_tokens: int, max_model_len: int,
                    ignore_eos: bool = False, first_token: int | None = None) -> list[int]:
    """What the request must output, computed token by token with no batching at all.

    A forked child (parallel sampling) gets its first token from its parent's logits, so pass it as
    ``first_token``; its later tokens follow its own id."""
    tokens, out = list(prompt), []
    while len(out) < max_tokens and len(tokens) < max_model_len:
        t = first_token if (first_token is not None and not out) else next_token(request_id, tokens)
        out.append(t)
        tokens.append(t)
        if t == SIM_EOS and not ignore_eos:
            break
    return out


def flatten_rows(rows) -> ModelInput:
    """The forward's inputs from the decision read row by row (``ScheduledRequest``: its tokens, its
    slots, its logits rows): the reference every input builder is checked against."""
    inp = ModelInput([], [], [], [], [], [], [], [])
    for s in rows:
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


class ShadowRunner(SimRunner):
    """SimRunner's cost model and clock, plus a shadow KV cache that is written and read back."""

    def __init__(self, base: SimRunner, num_slots: int, block_size: int, requests: dict, kv=None):
        super().__init__(base.model, base.hardware, base.clock, base.overlap, base.build_input)
        self.requests = requests      # read-only, to check what the KV cache hands back
        self.kv = kv                  # read-only, to check the decision's slots and block tables
        self.slots: list[int | None] = [None] * num_slots
        self.block_size = block_size
        self.copies: list[tuple[int, int]] = []      # every (src, dst) block copy applied, in order
        self.num_checked_reads = 0

    def execute(self, sched) -> list[torch.Tensor | None]:
        self._check_decision(sched)
        self._copy_blocks(sched.block_copies)
        scheduled = sched.scheduled
        inp = self._built_input(sched)
        assert len(set(inp.slot_mapping)) == len(inp.slot_mapping), "two new tokens share one KV slot"
        for token, slot in zip(inp.input_ids, inp.slot_mapping):
            self.slots[slot] = token
        self.last_model_s = step_time(self.model, self.hardware, inp.query_lens, inp.seq_lens)
        rows = [self._logits(s, table, end, self.block_size, n)
                for s, table, end, (_, n) in zip(scheduled, inp.block_tables, inp.seq_lens, inp.logits_rows)]
        rows = [r for r in rows if r is not None]
        return torch.cat(rows) if rows else None

    def _built_input(self, sched):
        """The engine's own input builder (list path or persistent batch), as plain lists, checked row by
        row against the decision: the forward reads exactly the decision's tokens, slots and tables."""
        built, want = self.build_input(sched), flatten_rows(sched.scheduled)
        meta = built.metadata
        assert built.input_ids.tolist() == want.input_ids and built.positions.tolist() == want.positions
        assert meta.slot_mapping.tolist() == want.slot_mapping
        assert meta.query_lens_list == want.query_lens and meta.seq_lens_list == want.seq_lens
        assert built.logits_indices.tolist() == want.logits_indices
        tables = meta.block_tables.tolist()
        # As wide as the longest table: a persistent batch that missed a change keeps a wrong length.
        assert meta.block_tables.shape[1] == max(max(map(len, want.block_tables), default=1), 1)
        for table, expected in zip(tables, want.block_tables):
            assert table[:len(expected)] == list(expected), (table, expected)
        return want

    def _check_decision(self, sched) -> None:
        """Every row equals the general formulas (``token_slice``, ``slot_mapping``, ``step_kind``).

        The row is already counted in flight (``num_inflight_tokens``, and a placeholder if it yields a
        token). With async scheduling a step in flight before it may be about to append the token a
        decode row computes: positions past the known tokens must be that row's own (filled) token."""
        assert sched.num_scheduled_tokens == sum(s.num_new_tokens for s in sched.scheduled)
        assert PLACEHOLDER not in sched.token_ids, "the runner got a decision with unfilled placeholders"
        for s in sched.scheduled:
            req = self.requests[s.request_id]
            assert s.num_new_tokens >= 1 and PLACEHOLDER not in s.token_ids, s
            assert s.start == req.num_scheduled_end - s.num_new_tokens, s
            known = req.num_tokens_with_spec
            assert tuple(s.token_ids[:max(0, known - s.start)]) == tuple(req.token_slice(s.start, min(s.end, known))), s
            planned_before = req.num_tokens_planned - (1 if s.num_logits else 0)
            assert s.end <= planned_before + len(req.spec_token_ids), s
            assert s.kind == step_kind(req, s.start, s.num_new_tokens, s.num_spec_tokens, planned_before), s
            want_logits = 1 + s.num_spec_tokens if s.end == planned_before + len(req.spec_token_ids) else 0
            assert s.num_logits == want_logits, s
            if self.kv is not None:
                assert list(s.slot_mapping) == self.kv.slot_mapping(s.request_id, s.start, s.end), s
                assert list(s.block_table) == list(self.kv.block_table(s.request_id)), s

    def _copy_blocks(self, copies: list[tuple[int, int]]) -> None:
        bs = self.block_size
        for src, dst in copies:
            self.slots[dst * bs:(dst + 1) * bs] = self.slots[src * bs:(src + 1) * bs]
            self.copies.append((src, dst))

    def _logits(self, s, table: list[int], end: int, block_size: int, rows: int) -> torch.Tensor | None:
        req = self.requests[s.request_id]
        context = [self.slots[table[p // block_size] * block_size + p % block_size] for p in range(end)]
        known = min(end, req.num_tokens_with_spec)
        expected = req.token_slice(0, known) + list(s.token_ids[known - s.start:])   # async: the filled token
        assert context == expected, (
            f"request {req.request_id}: KV read back through its block table differs from its tokens "
            f"at positions {[p for p, (a, b) in enumerate(zip(context, expected)) if a != b][:8]}")
        self.num_checked_reads += 1
        if not rows:
            return None
        logits = torch.full((rows, SIM_VOCAB), -1e4)
        for i in range(rows):
            logits[i, next_token(req.request_id, context[:end - rows + i + 1])] = 0.0
        return logits


def shadow_llm(config: EngineConfig, **sim_options) -> LLM:
    """``LLM(model="sim")`` with its runner replaced by a ``ShadowRunner`` over the same pool."""
    llm = LLM(model="sim", config=config, progress=False, **sim_options)
    engine = llm.engine
    num_slots = engine.kv.capacity_tokens()
    engine.runner = ShadowRunner(engine.runner, num_slots, engine.kv.meta_block_size, engine.requests, engine.kv)
    return llm
