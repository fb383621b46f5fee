"""The proposers' edges from their definitions (``labkit.spec_decode.proposer``, ``ngram``).

``draft_budget``: drafts plus the one bonus token must fit both ``max_tokens`` and ``max_model_len``:
``max(0, min(k, remaining - 1))`` with ``remaining`` the smaller of the two rooms. A ``Proposal``'s
``probs`` has one row per draft token. The n-gram rule at its edges: nothing to look back on, a
sequence of one repeated token, a match that ends right before the last token, ``min_n == max_n``.
"""

from __future__ import annotations

import pytest
import torch

from labkit.config import SpecConfig
from labkit.request import Request
from labkit.sampling_params import SamplingParams
from labkit.spec_decode.ngram import NgramProposer, NgramSpecProposer, suffix_match_lengths
from labkit.spec_decode.proposer import Proposal, draft_budget


def request(num_prompt: int, num_output: int, max_tokens: int) -> Request:
    req = Request("r", list(range(1, num_prompt + 1)), SamplingParams(max_tokens=max_tokens), 0.0)
    for t in range(num_output):
        req.output_token_ids.append(100 + t)
        req.all_token_ids.append(100 + t)
    return req


@pytest.mark.parametrize("num_output, max_tokens, max_model_len, expected", [
    (0, 10, 100, 4),      # plenty of room: k
    (5, 10, 100, 4),      # 5 tokens left for 4 drafts + 1 bonus: exactly k
    (6, 10, 100, 3),      # 4 left: one draft fewer
    (9, 10, 100, 0),      # 1 left: the bonus token only
    (10, 10, 100, 0),     # none left: never negative
    (0, 100, 18, 4),      # the context: 10 prompt tokens, 8 slots left: k
    (0, 100, 14, 3),      # 4 slots left: 3 drafts + 1 bonus
    (0, 100, 11, 0),      # 1 slot left
    (2, 100, 12, 0),      # the context is full
])
def test_the_draft_budget_leaves_room_for_the_bonus_token_within_both_limits(num_output, max_tokens,
                                                                              max_model_len, expected):
    assert draft_budget(request(10, num_output, max_tokens), 4, max_model_len) == expected


def test_a_proposal_has_one_probability_row_per_draft_token():
    assert len(Proposal([5, 6, 7])) == 3 and Proposal([5]).probs is None
    Proposal([5, 6], torch.zeros(2, 9))
    Proposal([], torch.zeros(0, 9))
    with pytest.raises(ValueError, match=r"probs must have shape \[2, vocab\] \(one row per draft token\), "
                                         r"got \(3, 9\)"):
        Proposal([5, 6], torch.zeros(3, 9))
    with pytest.raises(ValueError, match=r"got \(2,\)"):
        Proposal([5, 6], torch.zeros(2))
    with pytest.raises(ValueError, match=r"got \(2, 1, 9\)"):
        Proposal([5, 6], torch.zeros(2, 1, 9))


@pytest.mark.parametrize("tokens, expected", [
    ([], []), ([7], []),                     # nothing earlier to match
    ([7, 7], [7]),                           # the match ends right before the last token
    ([7, 7, 7, 7, 7], [7]),                  # one repeated token: the most recent longest match, not the first
])
def test_the_ngram_rule_at_the_shortest_sequences(tokens, expected):
    assert NgramProposer(k=3, min_n=1, max_n=2).propose(tokens) == expected


def test_match_lengths_stop_at_max_n_and_at_the_sequence_start():
    tokens = torch.tensor([1, 2, 1, 2, 1, 2]).numpy()
    assert suffix_match_lengths(tokens, 3).tolist() == [0, 2, 0, 3, 0]
    assert suffix_match_lengths(tokens, 1).tolist() == [0, 1, 0, 1, 0]
    assert suffix_match_lengths(tokens[:1], 3).tolist() == []


def test_min_n_equal_to_max_n_takes_only_that_length():
    p = NgramProposer(k=2, min_n=3, max_n=3)
    assert p.propose([1, 2, 3, 9, 8, 2, 3]) == []            # only a 2-gram matches
    assert p.propose([1, 2, 3, 9, 8, 1, 2, 3]) == [9, 8]


def test_the_engine_proposer_cuts_each_proposal_to_its_budget():
    proposer = NgramSpecProposer(SpecConfig(method="ngram", num_speculative_tokens=3), max_model_len=12)
    roomy = Request("a", [1, 2, 3, 4, 1, 2], SamplingParams(max_tokens=50), 0.0)     # budget 3: [3, 4, 1]
    tight = Request("b", [1, 2, 3, 4, 5, 6, 7, 8, 1, 2], SamplingParams(max_tokens=50), 0.0)  # 2 slots: 1 draft
    assert proposer.propose([roomy, tight]) == {"a": Proposal([3, 4, 1]), "b": Proposal([3])}
    assert proposer.forget("a") is None
