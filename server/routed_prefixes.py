"""`RoutedPrefixes`: a bounded prefix index of the prompts a router sent to one replica."""

from __future__ import annotations

import numpy as np

from twinserve.policies.cache.radix import RadixCache


class RoutedPrefixes:
    """The whole pages of every prompt sent to one replica, in a radix tree of ``page_size``-token
    pages holding at most ``capacity`` pages (least recently sent evicted first).

    It stands in for a replica's prefix cache that the router cannot read: ``match_len`` is how
    many leading tokens of a prompt were sent there before and not yet pushed out (a prefix the
    replica itself evicted early may still count).
    """

    def __init__(self, page_size: int, capacity: int) -> None:
        self.index = RadixCache(page_size)
        self.capacity = max(1, capacity)
        self._page = 0

    def match_len(self, tokens: np.ndarray) -> int:
        return int(self.index.match_len(tokens))

    def add(self, prompt: np.ndarray) -> None:
        """Record ``prompt`` as sent (its whole pages), then evict down to ``capacity``."""
        ps = self.index.page_size
        n = len(prompt) // ps
        if n:
            self.index.insert(prompt[: n * ps], list(range(self._page, self._page + n)))
            self._page += n
        excess = self.index.num_pages - self.capacity
        if excess > 0:
            self.index.evict(excess)
