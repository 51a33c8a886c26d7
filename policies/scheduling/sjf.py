"""`sjf`: shortest uncached prompt first."""

from __future__ import annotations

from typing import Sequence

from twinserve.core.request import Req
from twinserve.policies.cache.base import PrefixCache
from twinserve.policies.registries import SCHEDULING
from twinserve.policies.scheduling.base import SchedulingPolicy


@SCHEDULING.register("sjf")
class ShortestPromptFirst(SchedulingPolicy):
    """Admit the request with the fewest tokens left to prefill (cached prefix excluded).

    The prefix match is looked up only while the queue holds at most ``max_queue`` requests
    (matching is per request per step); beyond that the whole prompt length is used.
    Ties go to the earlier arrival. Long prompts can starve under sustained load: that is the
    policy's known trade-off (use ``priority`` with aging to bound waiting).
    """

    name = "sjf"

    def __init__(self, max_queue: int = 128) -> None:
        self.max_queue = max_queue

    def order(self, waiting: Sequence[Req], now: float, cache: PrefixCache) -> list[Req]:
        use_cache = len(waiting) <= self.max_queue

        def key(r: Req) -> tuple[int, float, int]:
            hit = cache.match_len(r.tokens[: r.num_tokens - 1]) if use_cache else 0
            return (r.num_tokens - hit, r.arrival, r.rid)

        return sorted(waiting, key=key)
