"""`SchedulerView`: the `ReplicaView` of a replica whose `Scheduler` lives in this process."""

from __future__ import annotations

from typing import Any

import numpy as np


class SchedulerView:
    """A read-only `ReplicaView` over a live scheduler (the simulator's replicas and in-process
    engines both have one).

    It reads ``waiting`` and ``running`` as they stand, without pruning: a request that ended since
    the last ``schedule()`` still counts until that call removes it. ``outstanding_tokens`` moves
    only when a step is launched (``num_computed`` advances at ``schedule()``), so it reads the same
    whether the replica's last step has completed or is still in flight. ``kv_usage`` counts the
    pages neither free nor evictable (cached pages no running request pins are free to take).
    """

    __slots__ = ("sched",)

    def __init__(self, sched: Any) -> None:
        self.sched = sched

    @property
    def num_waiting(self) -> int:
        return len(self.sched.waiting)

    @property
    def num_running(self) -> int:
        return len(self.sched.running)

    @property
    def outstanding_tokens(self) -> int:
        total = 0
        for queue in (self.sched.waiting, self.sched.running):
            for r in queue:
                total += r.prompt_len + r.params.max_tokens - r.num_computed
        return total

    @property
    def kv_usage(self) -> float:
        total = self.sched.config.num_pages
        held = total - self.sched.allocator.free_count - self.sched.cache.evictable_pages
        return held / total if total else 0.0

    def match_len(self, tokens: np.ndarray) -> int:
        return int(self.sched.cache.match_len(tokens))
