"""`NgramIndex` (incremental prompt lookup) against the scan of `NgramProposer.propose`."""

from __future__ import annotations

import numpy as np
import pytest

from helpers_core import make_req
from twinserve.core.spec import NgramProposer, SpecConfig
from twinserve.core.request import ReqState
from twinserve.core.spec_ngram import NgramIndex
from twinserve.core.spec_step import SpecDecoding


@pytest.mark.parametrize("first", [0, 150])  # 150: a prompt, indexed in bulk
@pytest.mark.parametrize("min_n,max_n,vocab", [(1, 4, 5), (2, 3, 3), (1, 1, 7), (3, 5, 2)])
def test_index_equals_the_scan_as_the_sequence_grows(min_n: int, max_n: int, vocab: int, first: int) -> None:
    rng = np.random.default_rng(min_n * 100 + max_n * 10 + vocab)
    scan = NgramProposer(ngram_min=min_n, ngram_max=max_n)
    for _ in range(20):
        toks = rng.integers(0, vocab, 300).astype(np.int32)
        idx = NgramIndex(min_n, max_n)
        size = first + int(rng.integers(0, 5))
        while size <= toks.size:
            k = int(rng.integers(1, 6))
            assert idx.lookup(toks[:size], k).tolist() == scan.propose(toks[:size], k).tolist(), size
            size += int(rng.integers(1, 6)) if rng.random() < 0.9 else 40  # a step accepts 1..5 tokens, or bulk


def test_index_rebuilds_for_a_shorter_sequence() -> None:
    idx = NgramIndex(1, 2)
    a = np.array([1, 2, 3, 1, 2], dtype=np.int32)
    assert idx.lookup(a, 2).tolist() == [3, 1]
    b = np.array([4, 2, 9, 2], dtype=np.int32)  # not an extension of a
    assert idx.lookup(b, 2).tolist() == [9, 2]


def test_per_request_indexes_follow_the_running_requests() -> None:
    spec = SpecDecoding(SpecConfig("ngram", 2, 1, 2))
    proposer_indexes = spec._retain.__self__._indexes  # the proposer behind the default propose
    r = make_req(7, [1, 2, 3, 1, 2], max_tokens=8)
    r.append_tokens(np.array([3], dtype=np.int32), 1)  # an output: the request decodes
    spec.prepare_step([r])
    assert spec.draft(r, budget=8) == 2 and 7 in proposer_indexes
    spec.prepare_step([])  # r stopped running: its index goes (a reused rid starts afresh)
    assert proposer_indexes == {}


@pytest.mark.parametrize("min_n,max_n,vocab", [(1, 3, 4), (2, 4, 4), (3, 4, 3), (3, 3, 6)])
def test_may_match_after_is_exactly_whether_some_next_token_matches(min_n: int, max_n: int, vocab: int) -> None:
    """``may_match_after(toks)`` is true exactly when some token y makes ``lookup(toks + [y])``
    propose: false means no next token can give a proposal (the engine may overlap then)."""
    rng = np.random.default_rng(min_n * 10 + vocab)
    seen = set()
    for _ in range(30):
        toks = rng.integers(0, vocab, 60).astype(np.int32)
        idx = NgramIndex(min_n, max_n)
        for size in range(1, toks.size):
            got = idx.may_match_after(toks[:size])
            want = any(NgramIndex(min_n, max_n).lookup(np.append(toks[:size], y).astype(np.int32), 1).size
                       for y in range(vocab))
            assert got == want, (size, toks[:size].tolist())
            seen.add(got)
            if size % 7 == 0:  # the same index answers lookups in between
                assert idx.lookup(toks[:size], 2).tolist() == NgramIndex(min_n, max_n).lookup(toks[:size], 2).tolist()
    assert seen == ({True} if min_n == 1 else {True, False})


def test_may_draft_next_looks_past_the_pending_token() -> None:
    """A request whose pending token follows a never-seen bigram cannot draft next
    (ngram_min=3); one whose bigram occurred before may; a decode without a pending token may;
    with ngram_min=1 every decode may."""
    spec = SpecDecoding(SpecConfig("ngram", 4, 3, 4))
    r = make_req(1, [5, 6, 7, 8, 9], max_tokens=8)
    r.append_placeholder()
    r.pending = 1  # the plain step sampling its first output is in flight
    r.num_computed = r.num_tokens - 1
    r.state = q_state = ReqState.RUNNING
    assert not spec.may_draft_next([r])  # bigram (8, 9) never occurred earlier
    q = make_req(2, [5, 6, 7, 5, 6], max_tokens=8)
    q.append_placeholder()
    q.pending = 1
    q.num_computed = q.num_tokens - 1
    q.state = q_state
    assert spec.may_draft_next([q]) and spec.may_draft_next([r, q])  # (5, 6) occurred, followed by 7
    one = SpecDecoding(SpecConfig("ngram", 4, 1, 4))
    assert one.may_draft_next([r])
    s = make_req(3, [5, 6, 7, 8, 9], max_tokens=8)
    s.append_tokens(np.array([4], dtype=np.int32), 1)  # decodes now, nothing pending
    s.num_computed = s.num_tokens - 1
    s.state = q_state
    assert spec.may_draft_next([s])
    assert spec.num_after_checked == 4 and spec.num_after_no_match == 2  # r twice, q twice
    s.state = ReqState.FINISHED
    assert not spec.may_draft_next([s])  # an ended request no longer counts
    spec.paused = True
    assert not spec.may_draft_next([q])
