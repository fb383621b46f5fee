"""Specification of labkit.spec_decode.ngram: prompt lookup decoding.

Rule under test: the longest n in [min_n, max_n] whose last-n tokens occur earlier wins; among that
n-gram's earlier occurrences the most recent one is used; the proposal is the (up to k) tokens that
followed it; no match gives [].
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.config import SpecConfig
from labkit.request import Request
from labkit.sampling_params import SamplingParams
from labkit.spec_decode.ngram import NgramProposer, NgramSpecProposer, suffix_match_lengths
from labkit.spec_decode.proposer import Proposal, Proposer


def reference_propose(tokens: list[int], k: int, min_n: int, max_n: int) -> list[int]:
    """The rule written as plainly as possible: longest n first, most recent occurrence first."""
    for n in range(max_n, min_n - 1, -1):
        suffix = tokens[len(tokens) - n:]
        for start in range(len(tokens) - n - 1, -1, -1):  # occurrence ends before the last token
            if tokens[start:start + n] == suffix:
                return tokens[start + n:start + n + k]
    return []


def test_longest_match_is_preferred_over_a_more_recent_shorter_one():
    tokens = [1, 2, 3, 40, 41, 2, 3, 50, 1, 2, 3]
    # "2 3" last occurred at 5-6 (followed by 50), but "1 2 3" occurs at 0-2 (followed by 40 41)
    assert NgramProposer(k=2, min_n=2, max_n=3).propose(tokens) == [40, 41]


def test_most_recent_occurrence_of_the_longest_match_is_used():
    tokens = [5, 6, 10, 5, 6, 20, 5, 6, 30, 5, 6]
    assert NgramProposer(k=1, min_n=2, max_n=4).propose(tokens) == [30]


def test_up_to_k_tokens_are_proposed():
    tokens = [7, 8, 1, 2, 3, 4, 5, 6, 7, 8]
    assert NgramProposer(k=3).propose(tokens) == [1, 2, 3]


def test_fewer_than_k_tokens_when_the_sequence_ends_first():
    tokens = [4, 5, 6, 4, 5]  # "4 5" at 0-1 is followed only by 6, 4, 5
    assert NgramProposer(k=5, min_n=2, max_n=2).propose(tokens) == [6, 4, 5]
    assert NgramProposer(k=5, min_n=2, max_n=2).propose([3, 3, 3]) == [3]  # overlapping match


def test_no_earlier_occurrence_gives_no_proposal():
    assert NgramProposer(k=3).propose([1, 2, 3, 4, 5]) == []
    assert NgramProposer(k=3).propose([]) == []
    assert NgramProposer(k=3).propose([1]) == []


def test_matches_shorter_than_min_n_are_ignored():
    tokens = [1, 9, 2, 3, 4, 9]  # only the 1-gram "9" occurs earlier
    assert NgramProposer(k=2, min_n=2, max_n=4).propose(tokens) == []
    assert NgramProposer(k=2, min_n=1, max_n=4).propose(tokens) == [2, 3]


def test_matches_longer_than_max_n_count_as_max_n():
    # the 3-gram "1 2 3" repeats, but with max_n = 2 the most recent "2 3" wins
    tokens = [1, 2, 3, 7, 0, 2, 3, 8, 1, 2, 3]
    assert NgramProposer(k=1, min_n=2, max_n=2).propose(tokens) == [8]
    assert NgramProposer(k=1, min_n=2, max_n=3).propose(tokens) == [7]


def test_accepts_numpy_arrays_and_returns_python_ints():
    out = NgramProposer(k=2).propose(np.array([1, 2, 3, 1, 2], dtype=np.int32))
    assert out == [3, 1] and all(type(t) is int for t in out)


@pytest.mark.parametrize("kwargs, message", [
    (dict(k=0), "k must be an int >= 1, got 0"), (dict(k=2, min_n=0), "min_n must be an int >= 1, got 0"),
    (dict(k=2, max_n=0), "max_n must be an int >= 1, got 0"), (dict(k=2, min_n=3, max_n=2), "max_n must be >= min_n, got 2 < 3"),
    (dict(k=True), "k must be an int >= 1, got True"), (dict(k=2.0), "k must be an int >= 1, got 2.0")])
def test_invalid_parameters_raise_value_error_naming_the_field(kwargs, message):
    with pytest.raises(ValueError) as caught:
        NgramProposer(**kwargs)
    assert str(caught.value) == message


def test_its_defaults_are_the_engine_configs():
    proposer, spec = NgramProposer(k=3), SpecConfig(num_speculative_tokens=3)
    assert (proposer.min_n, proposer.max_n) == (spec.prompt_lookup_min, spec.prompt_lookup_max) == (2, 4)


def test_built_from_spec_config():
    proposer = NgramProposer.from_config(SpecConfig(num_speculative_tokens=5, prompt_lookup_min=1,
                                                    prompt_lookup_max=3))
    assert (proposer.k, proposer.min_n, proposer.max_n) == (5, 1, 3)


def test_the_engine_proposer_gives_point_mass_proposals_per_request_within_their_budget():
    proposer = NgramSpecProposer(SpecConfig(method="ngram", num_speculative_tokens=2), max_model_len=64)
    roomy = Request("a", [1, 2, 3, 1, 2], SamplingParams(max_tokens=10), 0.0)
    no_match = Request("b", [4, 5, 6], SamplingParams(max_tokens=10), 0.0)
    last_token = Request("c", [1, 2, 3, 1, 2], SamplingParams(max_tokens=1), 0.0)   # no room for a bonus
    assert isinstance(proposer, Proposer)
    assert proposer.propose([roomy, no_match, last_token]) == {
        "a": Proposal([3, 1], None), "b": Proposal([], None), "c": Proposal([], None)}


# --- properties on random sequences (small alphabets make repeats common) -----------------------

sequences = st.lists(st.integers(0, 3), max_size=60)
params = st.tuples(st.integers(1, 6), st.integers(1, 4), st.integers(0, 3)).map(
    lambda t: (t[0], t[1], t[1] + t[2]))  # (k, min_n, max_n >= min_n)


@settings(max_examples=300, deadline=None)
@given(sequences, params)
def test_every_proposal_continues_an_earlier_occurrence_of_the_suffix(tokens, kmn):
    k, min_n, max_n = kmn
    proposal = NgramProposer(k, min_n, max_n).propose(tokens)
    if not proposal:
        return
    witnesses = [(n, start) for n in range(min_n, max_n + 1)
                 for start in range(len(tokens) - n)
                 if tokens[start:start + n] == tokens[len(tokens) - n:]
                 and tokens[start + n:start + n + k] == proposal]
    assert witnesses
    assert len(proposal) <= k


@settings(max_examples=300, deadline=None)
@given(sequences, params)
def test_proposal_equals_the_plain_reference_rule(tokens, kmn):
    k, min_n, max_n = kmn
    assert NgramProposer(k, min_n, max_n).propose(tokens) == reference_propose(tokens, k, min_n,
                                                                               max_n)


@settings(max_examples=100, deadline=None)
@given(sequences.filter(lambda t: len(t) >= 4), params)
def test_a_repeated_suffix_always_gets_a_proposal(tokens, kmn):
    k, min_n, max_n = kmn
    repeated = tokens + tokens[:min_n]  # the first min_n tokens now recur at the end
    assert NgramProposer(k, min_n, max_n).propose(repeated) != []


def test_match_lengths_have_one_entry_per_earlier_end_and_none_for_a_single_token():
    """``match[e]`` for each end e in [0, L - 2]: none at all for L = 0 or 1 (nothing earlier to match)."""
    assert suffix_match_lengths(np.array([], dtype=np.int64), 3).tolist() == []
    assert suffix_match_lengths(np.array([5]), 3).tolist() == []
    assert suffix_match_lengths(np.array([5, 6, 5]), 3).tolist() == [1, 0]
