"""`lpm`: longest prefix match first (cache-aware)."""

from __future__ import annotations

from typing import Sequence

from twinserve.core.request import Req
from twinserve.policies.cache.base import PrefixCache
from twinserve.policies.registries import SCHEDULING
from twinserve.policies.scheduling.base import SchedulingPolicy


@SCHEDULING.register("lpm")
class LongestPrefixMatch(SchedulingPolicy):
    """Admit the request with the longest cached prefix first, so shared prefixes are reused
    while they are still cached. Ties go to the earlier arrival. With more than ``max_queue``
    waiting requests, matching every one each step costs too much and the order falls back to
    FCFS (as SGLang does).
    """

    name = "lpm"

    def __init__(self, max_queue: int = 128) -> None:
        self.max_queue = max_queue

    def order(self, waiting: Sequence[Req], now: float, cache: PrefixCache) -> list[Req]:
        if len(waiting) > self.max_queue:
            return sorted(waiting, key=lambda r: (r.arrival, r.rid))
        return sorted(
            waiting,
            key=lambda r: (-cache.match_len(r.tokens[: r.num_tokens - 1]), r.arrival, r.rid),
        )
