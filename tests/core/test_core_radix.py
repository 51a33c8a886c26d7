"""The radix cache alone: matching, sharing, locking and LRU eviction."""

from __future__ import annotations

import numpy as np

from twinserve.core.graph_plan import DEFAULT_PLAN
from twinserve.policies.cache import RadixCache
from twinserve.policies.cache.base import PrefixCache

from helpers_core import make_req, make_sched


def toks(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int32)


def test_match_insert_and_partial_pages() -> None:
    c = RadixCache(2)
    res = c.insert(toks(1, 2, 3, 4), [10, 11])
    assert res.pages == [10, 11] and c.num_pages == 2 and c.evictable_pages == 2
    m = c.match(toks(1, 2, 3, 4, 5))
    assert m.pages == [10, 11] and m.num_tokens == 4
    assert c.match(toks(1, 2, 3, 9)).pages == [10]
    assert c.match_len(toks(1)) == 0
    # re-inserting the same prefix with other pages returns the tree's pages: caller keeps its own
    res = c.insert(toks(1, 2, 3, 4, 5, 6), [20, 21, 22])
    assert res.pages == [10, 11, 22] and c.num_pages == 3


def test_lock_protects_and_lru_order() -> None:
    c = RadixCache(1)
    a = c.insert(toks(1, 2), [0, 1])
    b = c.insert(toks(5, 6), [2, 3])
    c.lock(a.node)
    assert c.evictable_pages == 2
    assert sorted(c.evict(10)) == [2, 3]  # only the unlocked branch goes
    assert c.num_pages == 2
    c.unlock(a.node)
    c.insert(toks(7), [4])
    c.match(toks(1, 2))                   # touch branch a: 7 is now least recent
    assert c.evict(1) == [4]
    assert c.evict(1) == [1] and c.evict(1) == [0]  # leaf first, then its parent
    c.check()


def test_shared_prefix_survives_while_any_user_locks_it() -> None:
    c = RadixCache(1)
    x = c.insert(toks(1, 2, 3), [0, 1, 2])
    y = c.insert(toks(1, 2, 4), [0, 1, 3])
    c.lock(x.node)
    c.lock(y.node)
    c.unlock(x.node)
    assert c.evict(5) == [2]  # only x's own leaf is free to go
    c.check()


def test_decodes_reading_one_cached_prefix_count_its_pages_once() -> None:
    """Three requests share a 16-token (4-page) prefix and have 4 own tokens each; a fourth
    shares nothing. Once all decode, the step's decodes read the shared pages three times:
    ``decode_unique_ctx`` counts them once (2 extra readers x 16 tokens less)."""
    s = make_sched(num_pages=64, page_size=4)
    prefix = list(range(50, 66))
    for rid in range(3):
        s.add(make_req(rid, prefix + [200 + 10 * rid + k for k in range(4)], max_tokens=6))
    s.add(make_req(3, 20, max_tokens=6))
    b = None
    for t in range(10):
        b = s.schedule(float(t))
        if b is not None and b.decode_only and len(b) == 4:
            break
        s.complete(b, [7] * len(b), t + 0.5)
    assert b is not None and b.decode_only and len(b) == 4
    f = b.features(DEFAULT_PLAN)
    assert f.decode_unique_ctx == f.decode_ctx - 2 * 16
    # the generic walk of the contract's default counts the same pages
    nodes = [r.cache_node for r in b.reqs]
    assert PrefixCache.distinct_path_pages(s.cache, nodes) == s.cache.distinct_path_pages(nodes)
    # without a prefix cache nothing is shared
    s2 = make_sched(cache="none", num_pages=64, page_size=4)
    for rid in range(3):
        s2.add(make_req(rid, prefix + [200 + 10 * rid + k for k in range(4)], max_tokens=6))
    for t in range(10):
        b2 = s2.schedule(float(t))
        if b2.decode_only:
            break
        s2.complete(b2, [7] * len(b2), t + 0.5)
    assert b2.features(DEFAULT_PLAN).decode_unique_ctx == b2.features(DEFAULT_PLAN).decode_ctx
