"""`none`: no prefix caching."""

from __future__ import annotations

from typing import Any

import numpy as np

from twinserve.core.config import scheduler_default
from twinserve.policies.cache.base import MatchResult, PrefixCache
from twinserve.policies.registries import CACHE


@CACHE.register("none")
class NoCache(PrefixCache):
    """Never matches, never keeps a page: every offered page stays with the caller."""

    def __init__(self, page_size: int = scheduler_default("page_size")) -> None:
        super().__init__(page_size)

    def match(self, tokens: np.ndarray) -> MatchResult:
        return MatchResult(None, [], 0)

    def match_len(self, tokens: np.ndarray) -> int:
        return 0

    def insert(self, tokens: np.ndarray, pages: list[int]) -> MatchResult:
        return MatchResult(None, [], 0)

    def lock(self, node: Any) -> None:
        return None

    def unlock(self, node: Any) -> None:
        return None

    def evict(self, n: int) -> list[int]:
        return []

    @property
    def num_pages(self) -> int:
        return 0

    @property
    def evictable_pages(self) -> int:
        return 0
