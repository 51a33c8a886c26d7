"""The infinite-cache prefix bound on hand-written traces whose bound is known."""

from __future__ import annotations

import numpy as np
import pytest

from twinserve.core.workload.prefix_bound import prefix_bound
from twinserve.core.workload.spec import RequestSpec
from twinserve.core.workload.workload import Workload


def _hashed() -> Workload:
    rows = [(10, (7, 8, 9)),    # nothing seen yet: 0
            (9, (7, 8, 11)),    # 7, 8 seen: 8
            (6, (5, 7)),        # 5 new; 7 after another prefix does not count: 0
            (12, (7, 8, 9)),    # 4 + 4 + the 2 tokens of block 9 request 0 had: 10
            (8, (7, 8))]        # 8, capped at prompt_len - 1: 7
    return Workload([RequestSpec(i, float(i), n, 1, hash_ids=h) for i, (n, h) in enumerate(rows)],
                    block_size=4)


def test_hash_id_bound_counts_leading_seen_blocks_in_arrival_order() -> None:
    b = prefix_bound(_hashed())
    assert (b.hit_tokens, b.prompt_tokens, b.requests) == (25, 45, 5)
    assert b.hit_rate == pytest.approx(25 / 45)


def test_bound_over_a_subset_of_requests() -> None:
    b = prefix_bound(_hashed(), rids={0, 2, 3})   # request 3 now only follows 0: 4 + 4 + 2
    assert (b.hit_tokens, b.prompt_tokens, b.requests) == (10, 28, 3)


def test_explicit_tokens_match_in_full_blocks_and_unique_prompts_never_hit() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 1000, 40)
    b = np.concatenate([a[:35], rng.integers(1000, 2000, 5)])   # shares 35 tokens: 2 blocks of 16
    specs = [RequestSpec(0, 0.0, 40, 1, tokens=a), RequestSpec(1, 1.0, 40, 1, tokens=b),
             RequestSpec(2, 2.0, 40, 1, tokens=a), RequestSpec(3, 3.0, 40, 1)]
    bound = prefix_bound(Workload(specs))
    assert (bound.hit_tokens, bound.prompt_tokens) == (32 + 32, 160)
    assert prefix_bound(Workload([RequestSpec(i, 0.0, 50, 1) for i in range(3)])).hit_tokens == 0


def test_a_later_turn_hits_on_the_earlier_answer() -> None:
    rng = np.random.default_rng(1)
    p, a = rng.integers(0, 1000, 20), rng.integers(0, 1000, 30)
    turn2 = np.concatenate([p, a, rng.integers(0, 1000, 14)])      # 64 tokens: 4 blocks, 3 seen
    specs = [RequestSpec(0, 0.0, 20, 30, tokens=p, output_tokens=a),
             RequestSpec(1, 5.0, 64, 1, tokens=turn2)]
    assert prefix_bound(Workload(specs)).hit_tokens == 48
