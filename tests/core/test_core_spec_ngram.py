"""`NgramIndex` (incremental prompt lookup) against the scan of `NgramProposer.propose`."""

from __future__ import annotations

import numpy as np
import pytest

from helpers_core import make_req
from twinserve.core.spec import NgramProposer, SpecConfig
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
