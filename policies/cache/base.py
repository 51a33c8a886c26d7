"""The prefix-cache contract."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np


@dataclass(slots=True)
class MatchResult:
    """A cached prefix: ``pages`` hold its KV, ``num_tokens == len(pages) * page_size``.

    ``node`` is the handle to lock while a request uses the prefix (None for an empty match).
    """

    node: Any
    pages: list[int]
    num_tokens: int


@dataclass(slots=True)
class CacheStats:
    """Prefix-cache hit statistics in tokens, counted at admission."""

    queried_tokens: int = 0
    hit_tokens: int = 0
    inserted_pages: int = 0
    evicted_pages: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0


class PrefixCache(ABC):
    """Maps token prefixes to KV pages at page granularity.

    Contract:
    - ``match(tokens)`` returns the longest cached page-aligned prefix of ``tokens`` and marks it
      recently used; ``match_len(tokens)`` returns only its length, with no side effect.
    - ``insert(tokens, pages)`` (``len(tokens) == len(pages) * page_size``) offers a prefix; it
      returns the handle of the deepest node and the tree's page for every offered page. The cache
      takes ownership of each offered page that it kept (``returned[i] == pages[i]``); where it
      already held that prefix (``returned[i] != pages[i]``), or returned fewer pages, the caller
      still owns its page and must free or keep it.
    - ``lock(node)``/``unlock(node)`` pin a prefix (and all its ancestors) while a request uses it;
      locked pages are never evicted. Locks nest.
    - ``evict(n)`` frees up to ``n`` unlocked pages, least recently used leaves first, and returns
      them. ``num_pages`` counts every page the cache owns; ``evictable_pages`` the unlocked ones.
    """

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.stats = CacheStats()

    @abstractmethod
    def match(self, tokens: np.ndarray) -> MatchResult: ...

    @abstractmethod
    def match_len(self, tokens: np.ndarray) -> int: ...

    @abstractmethod
    def insert(self, tokens: np.ndarray, pages: list[int]) -> MatchResult: ...

    @abstractmethod
    def lock(self, node: Any) -> None: ...

    @abstractmethod
    def unlock(self, node: Any) -> None: ...

    @abstractmethod
    def evict(self, n: int) -> list[int]: ...

    @property
    @abstractmethod
    def num_pages(self) -> int: ...

    @property
    @abstractmethod
    def evictable_pages(self) -> int: ...

    def all_pages(self) -> list[int]:
        """Every page the cache owns (for invariant checks; may be slow)."""
        return []

    def path_pages(self, node: Any) -> list[int]:
        """Pages from the root to ``node`` (for invariant checks)."""
        return []

    def distinct_path_pages(self, nodes: Sequence[Any]) -> int:
        """How many distinct pages the paths from the root to ``nodes`` hold together (None
        entries hold none): what a batch whose requests locked ``nodes`` reads once."""
        return len(set().union(*(self.path_pages(n) for n in nodes if n is not None)))

    def is_locked(self, node: Any) -> bool:
        return node is None

    def check(self) -> None:
        """Raise AssertionError if the cache's own bookkeeping is inconsistent (for invariant
        checks; the default checks nothing)."""
        return None
