"""`priority`: lower priority value first, with aging so nothing starves."""

from __future__ import annotations

from typing import Sequence

from twinserve.core.request import Req
from twinserve.policies.cache.base import PrefixCache
from twinserve.policies.registries import SCHEDULING
from twinserve.policies.scheduling.base import SchedulingPolicy


@SCHEDULING.register("priority")
class PriorityWithAging(SchedulingPolicy):
    """Effective priority = ``priority - aging * seconds waited``; the smallest goes first.

    As in vLLM, a smaller ``priority`` value is more important. ``aging`` (priority levels per
    second) bounds starvation: a request that waited ``d / aging`` seconds overtakes one whose
    priority is ``d`` levels better that just arrived. The victim is the running request with the
    largest effective priority (latest arrival on ties).
    """

    name = "priority"

    def __init__(self, aging: float = 0.1) -> None:
        if aging < 0:
            raise ValueError("aging must be >= 0")
        self.aging = aging

    def effective(self, r: Req, now: float) -> float:
        return r.priority - self.aging * (now - r.arrival)

    def order(self, waiting: Sequence[Req], now: float, cache: PrefixCache) -> list[Req]:
        return sorted(waiting, key=lambda r: (self.effective(r, now), r.arrival, r.rid))

    def victim(self, candidates: Sequence[Req], now: float) -> Req:
        return max(candidates, key=lambda r: (self.effective(r, now), r.arrival, r.rid))
