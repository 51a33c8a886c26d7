"""`fcfs`: first come, first served."""

from __future__ import annotations

from typing import Sequence

from twinserve.core.request import Req
from twinserve.policies.cache.base import PrefixCache
from twinserve.policies.registries import SCHEDULING
from twinserve.policies.scheduling.base import SchedulingPolicy


@SCHEDULING.register("fcfs")
class FCFS(SchedulingPolicy):
    """Admit in arrival order (ties by request id); preempt the latest arrival."""

    name = "fcfs"

    def order(self, waiting: Sequence[Req], now: float, cache: PrefixCache) -> list[Req]:
        return sorted(waiting, key=lambda r: (r.arrival, r.rid))
