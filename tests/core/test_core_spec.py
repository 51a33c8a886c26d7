"""Speculative decoding's backend-free parts: prompt lookup and greedy acceptance."""

from __future__ import annotations

import numpy as np
import pytest

from twinserve.core.spec import NgramProposer, SpecConfig, accept_greedy


def test_ngram_proposes_what_followed_the_latest_match():
    p = NgramProposer(ngram_min=1, ngram_max=3)
    #            0  1  2  3  4  5  6  7  8  9
    toks = np.array([5, 6, 7, 8, 9, 5, 6, 7, 1, 2, 5, 6, 7])
    # "5 6 7" occurred at 0 and 5; the latest (5) was followed by 1 2 5 6
    assert p.propose(toks, 4).tolist() == [1, 2, 5, 6]
    assert p.propose(toks, 1).tolist() == [1]
    # the proposal stops at the known tokens' end
    assert p.propose(np.array([3, 4, 3]), 5).tolist() == [4, 3]


def test_ngram_prefers_the_longest_n_and_falls_back():
    p = NgramProposer(ngram_min=1, ngram_max=2)
    # the bigram "1 2" matches at 0 (followed by 9); the unigram "2" alone matched later at 4 (followed by 8)
    toks = np.array([1, 2, 9, 3, 2, 8, 1, 2])
    assert p.propose(toks, 1).tolist() == [9]
    # no bigram match: the unigram's latest match
    toks = np.array([4, 2, 8, 7, 2])
    assert p.propose(toks, 2).tolist() == [8, 7]
    # nothing matches at all
    assert p.propose(np.array([1, 2, 3]), 3).size == 0
    assert p.propose(np.array([1]), 3).size == 0
    assert NgramProposer(ngram_min=2, ngram_max=2).propose(np.array([4, 2, 8, 7, 2]), 2).size == 0


def test_accept_greedy():
    assert accept_greedy(np.array([3, 4, 5]), np.array([3, 4, 5, 6])).tolist() == [3, 4, 5, 6]
    assert accept_greedy(np.array([3, 9, 5]), np.array([3, 4, 5, 6])).tolist() == [3, 4]
    assert accept_greedy(np.array([9, 4, 5]), np.array([3, 4, 5, 6])).tolist() == [3]
    assert accept_greedy(np.array([], dtype=np.int64), np.array([7])).tolist() == [7]
    with pytest.raises(ValueError):
        accept_greedy(np.array([1, 2]), np.array([1, 2]))


def test_spec_config_validation():
    SpecConfig().validate()
    SpecConfig("ngram", 3).validate()
    assert SpecConfig("ngram", 3).enabled and not SpecConfig().enabled
    with pytest.raises(ValueError, match="unknown spec.method"):
        SpecConfig("medusa", 2).validate()
    with pytest.raises(ValueError, match="num_tokens"):
        SpecConfig("ngram", 0).validate()
    assert isinstance(SpecConfig("ngram", 2).proposer(), NgramProposer)
