"""The radix cache alone: matching, sharing, locking and LRU eviction."""

from __future__ import annotations

import numpy as np

from twinserve.policies.cache import RadixCache


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
