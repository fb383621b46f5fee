"""Turn logits into tokens: greedy, temperature, top-k, top-p, each request with its own generator.

The same ``to_probs`` transform produces the target distribution p that speculative decoding's
rejection sampler compares with the draft's q, so sampling and verification agree exactly.

Every valid ``SamplingParams`` is honoured in float32: top-p always keeps the most likely token (a top_p
of 1e-46 rounds to 0.0 and means "only the most likely"). A row whose logits give no distribution at
all (NaN or infinite logits: a numerical fault of the model on that sequence) never reaches
``torch.multinomial``: it raises ``InvalidDistribution``, and ``Sampler`` records it as that request's
failure (``take_failed``) so the engine ends that request alone and the rest of the batch goes on.
"""

from __future__ import annotations

import math

import torch

from labkit.sample.rejection_sampler import (
    greedy_verify,
    greedy_verify_batch,
    rejection_sample,
    rejection_sample_batch,
)
from labkit.sampling_params import SamplingParams
from labkit.scheduler_output import SampledTokens, SchedulerOutput


def to_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """logits: [n, vocab] -> probabilities [n, vocab] after temperature, top-k and top-p.

    Greedy params give a one-hot distribution on the argmax.
    """
    logits = logits.float()
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / params.temperature
    if params.top_k > 0 and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(-1)
        # Drop a token when the tokens ranked above it already cover top_p. The most likely token
        # stays whatever top_p is: a top_p below float32's range (1e-46) compares as 0.0 and would
        # drop every token, leaving softmax nothing but NaN.
        drop = (sorted_probs.cumsum(-1) - sorted_probs) >= params.top_p
        drop[..., 0] = False
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    return logits.softmax(-1)


class InvalidDistribution(ValueError):
    """A logits row that gives no probability distribution (NaN or infinite logits)."""


def check_distribution(probs: torch.Tensor) -> None:
    """Raise ``InvalidDistribution`` unless every row of probs [n, vocab] is finite with a positive sum,
    which is what ``torch.multinomial`` and the rejection sampler need. One sum per row: a NaN or an
    infinity anywhere in a row makes its sum non-finite (and NaN fails every comparison)."""
    for total in probs.sum(-1).tolist():
        if not 0.0 < total < math.inf:
            raise InvalidDistribution(f"the logits give no probability distribution (probabilities sum to "
                                      f"{total}): NaN or infinite logits")


def sample_tokens(logits: torch.Tensor, params: list[SamplingParams],
                  generators: list[torch.Generator | None]) -> list[int]:
    """One token per row of logits [n, vocab]; greedy rows share a single argmax call. Raises
    ``InvalidDistribution`` for a sampled row with no distribution (nothing NaN reaches multinomial)."""
    tokens = logits.argmax(-1).tolist()
    for i, (p, gen) in enumerate(zip(params, generators)):
        if not p.greedy:
            probs = to_probs(logits[i:i + 1], p)
            check_distribution(probs)
            tokens[i] = int(torch.multinomial(probs[0].cpu(), 1, generator=gen).item())
    return tokens


class Sampler:
    """The torch side of a step's decisions, keyed by request id: each request's sampling params and
    random generator, and the draft probabilities q its drafts were drawn from. ``sample`` turns the
    runner's logits into plain token ids for ``scheduler.update_from_output``.

    One batched call per kind of row: plain rows share one argmax (and one multinomial per sampled
    request); verification rows go through the rejection sampler's batch form, which draws exactly
    the numbers the one-request form would (``rejection_sampler.py``).
    """

    def __init__(self, seed: int = 0, batched: bool = True):
        self.seed, self.batched = seed, batched
        self._params: dict[str, SamplingParams] = {}
        self._generators: dict[str, torch.Generator | None] = {}
        self._pending_forks: dict[str, tuple[str, ...]] = {}
        self._draft_probs: dict[str, torch.Tensor | None] = {}
        self._num_added = 0           # sequences registered: an unseeded one is seeded by its rank
        self._num_random = 0          # live requests that sample (have a generator); 0: all greedy
        self._failed: dict[str, str] = {}   # request id -> why its row could not be sampled (this step)

    # -- per-request state ----------------------------------------------------------------------
    def add(self, request_id: str, params: SamplingParams, child_ids: tuple[str, ...] = ()) -> None:
        """Register a request (and the children it will fork into, n > 1) with their generators."""
        base = params.seed if params.seed is not None else self.seed * 1_000_003 + self._num_added
        self._num_added += 1 + len(child_ids)    # one seed per sequence: the next request's start after these
        for index, rid in enumerate((request_id, *child_ids)):
            self._params[rid] = params
            self._generators[rid] = None if params.greedy else torch.Generator().manual_seed(base + index)
            self._num_random += not params.greedy
        if child_ids:
            self._pending_forks[request_id] = tuple(child_ids)

    def remove(self, request_id: str) -> None:
        """Forget a finished request, and the children it never forked (aborted before its prefill ended)."""
        for rid in (request_id, *self._pending_forks.pop(request_id, ())):
            self._num_random -= self._generators.pop(rid, None) is not None
            self._params.pop(rid, None)
            self._draft_probs.pop(rid, None)

    def take_failed(self) -> dict[str, str]:
        """The requests whose rows gave no distribution since the last call, with why. Each got a
        stand-in token (0, or a draw from a uniform target) that the engine must not apply."""
        failed, self._failed = self._failed, {}
        return failed

    def _draw(self, request_id: str, row: torch.Tensor, generator_of: str | None = None) -> int:
        """One token for ``request_id`` from its logits row [1, vocab] with its own generator (for a
        fork, child ``generator_of``'s). A row with no distribution fails this request alone."""
        gen = self._generators[generator_of or request_id]
        try:
            return sample_tokens(row, [self._params[request_id]], [gen])[0]
        except InvalidDistribution as exc:
            self._failed[request_id] = str(exc)
            return 0

    def _target(self, request_id: str, rows: torch.Tensor) -> torch.Tensor:
        """The target distribution p of verification rows [k + 1, vocab]; rows with no distribution
        fail this request alone (the rejection sampler then gets a uniform stand-in)."""
        probs = to_probs(rows, self._params[request_id])
        try:
            check_distribution(probs)
        except InvalidDistribution as exc:
            self._failed[request_id] = str(exc)
            return torch.full_like(probs, 1.0 / probs.shape[-1])
        return probs

    def generator(self, request_id: str) -> torch.Generator | None:
        return self._generators[request_id]

    def set_draft_probs(self, request_id: str, probs: torch.Tensor | None) -> None:
        """q for the drafts just proposed for ``request_id`` ([k, vocab]), or None (point masses)."""
        self._draft_probs[request_id] = probs

    def draft_probs(self, request_id: str) -> torch.Tensor | None:
        return self._draft_probs.get(request_id)

    def forget_drafts(self, request_id: str) -> None:
        """A preempted request's drafts are void (it is recomputed, then drafted afresh)."""
        self._draft_probs.pop(request_id, None)

    # -- one step -------------------------------------------------------------------------------
    def sample(self, decision: SchedulerOutput, logits: torch.Tensor | None) -> SampledTokens:
        """Tokens for every row of ``decision``. logits: [sum of num_logits, vocab], the rows' logits back
        to back (a prefill chunk has none); None when no row has any."""
        n, ids = decision.num_rows, decision.request_ids
        if logits is None:
            return SampledTokens(ids, [()] * n)
        if self.batched and len(logits) == n and decision.num_logits.count(1) == n:
            # One logits row per row, in order (every step of plain decoding): no rows to pick.
            tokens = self._sample_rows(ids, logits)
            out = SampledTokens(ids, list(zip(tokens)))     # one 1-tuple per row
            if self._pending_forks:
                self._fork_tokens([(i, i, i + 1) for i in range(n)], ids, logits, out)
            return out
        rows, start = [], 0                   # (row, its first logits row, end)
        for i, k in enumerate(decision.num_logits):
            if k:
                rows.append((i, start, start + k))
                start += k
        out = SampledTokens(ids, [()] * n)
        if self.batched:
            self._sample_plain([r for r in rows if r[0] not in decision.num_spec], ids, logits, out)
            self._verify(decision, [(i, logits[a:b]) for i, a, b in rows if i in decision.num_spec], out)
        else:
            self._one_by_one(decision, rows, logits, out)
        self._fork_tokens(rows, ids, logits, out)
        return out

    def _sample_rows(self, request_ids: list[str], logits: torch.Tensor) -> list[int]:
        """One token per logits row, row i for ``request_ids[i]``: one argmax over the batch (greedy);
        a request that samples draws from its own row with its own generator. ``max(-1).indices`` is
        argmax (the first maximal index), about twice as fast on CPU."""
        tokens = logits.max(-1).indices.tolist()
        if self._num_random:
            generators = self._generators
            for i, rid in enumerate(request_ids):
                if generators[rid] is not None:
                    tokens[i] = self._draw(rid, logits[i:i + 1])
        return tokens

    def _fork_tokens(self, rows: list, ids: list[str], logits: torch.Tensor, out: SampledTokens) -> None:
        """n > 1 at the end of its prompt: each child's first token, from the parent's last row."""
        if not self._pending_forks:
            return
        for i, _, end in rows:
            children = self._pending_forks.pop(ids[i], None)
            if children:
                out.fork_token_ids[ids[i]] = [self._draw(ids[i], logits[end - 1:end], c) for c in children]

    def _sample_plain(self, rows: list, ids: list[str], logits: torch.Tensor, out: SampledTokens) -> None:
        """Every plain row in one call: one gather of their last logits rows, then ``_sample_rows``."""
        if not rows:
            return
        picked = logits.index_select(0, torch.tensor([end - 1 for _, _, end in rows], device=logits.device))
        for (i, _, _), token in zip(rows, self._sample_rows([ids[i] for i, _, _ in rows], picked)):
            out.token_ids[i] = (token,)

    def _one_by_one(self, decision: SchedulerOutput, rows: list, logits: torch.Tensor, out: SampledTokens) -> None:
        """The unbatched host path (``EngineConfig(batched_sampling=False)``): one call per request.
        Same tokens as the batched path; kept to measure what batching saves."""
        for i, a, b in rows:
            rid, r, num_spec = decision.request_ids[i], logits[a:b], decision.num_spec.get(i, 0)
            params, gen = self._params[rid], self._generators[rid]
            if not num_spec:
                out.token_ids[i] = (self._draw(rid, r[-1:]),)
            elif params.greedy:
                out.token_ids[i] = tuple(greedy_verify(self._drafts(decision, i), r))
            else:
                q = self._draft_probs.get(rid)
                out.token_ids[i] = tuple(rejection_sample(self._drafts(decision, i), None if q is None else q[:num_spec],
                                                          self._target(rid, r), generator=gen))
            self._draft_probs.pop(rid, None)

    def _verify(self, decision: SchedulerOutput, batch: list, out: SampledTokens) -> None:
        """Greedy requests: accept while draft == argmax. Others: rejection sampling, in two groups
        (drafts with a distribution q, and point-mass drafts such as n-gram lookup)."""
        if not batch:
            return
        ids = decision.request_ids
        groups: dict[str, list] = {"greedy": [], "q": [], "point": []}
        for i, rows in batch:
            rid = ids[i]
            kind = "greedy" if self._params[rid].greedy else "q" if self._draft_probs.get(rid) is not None else "point"
            groups[kind].append((i, rows))
        greedy, with_q, point = groups["greedy"], groups["q"], groups["point"]
        if greedy:
            tokens = greedy_verify_batch([self._drafts(decision, i) for i, _ in greedy], torch.cat([r for _, r in greedy]))
            for (i, _), t in zip(greedy, tokens):
                out.token_ids[i] = tuple(t)
        for group, use_q in ((with_q, True), (point, False)):
            if not group:
                continue
            target = torch.cat([self._target(ids[i], r) for i, r in group])   # [sum k+1, vocab]
            q = torch.cat([self._draft_probs[ids[i]][:decision.num_spec[i]] for i, _ in group]) if use_q else None
            tokens = rejection_sample_batch([self._drafts(decision, i) for i, _ in group], q, target,
                                            [self._generators[ids[i]] for i, _ in group])
            for (i, _), t in zip(group, tokens):
                out.token_ids[i] = tuple(t)
        for i, _ in batch:
            self._draft_probs.pop(ids[i], None)

    @staticmethod
    def _drafts(decision: SchedulerOutput, i: int) -> list[int]:
        """Row i's drafts: the last ``num_spec[i]`` of its tokens."""
        end = sum(decision.num_tokens[:i + 1])
        return decision.token_ids[end - decision.num_spec[i]:end]
