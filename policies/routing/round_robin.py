"""`round_robin`: replicas in turn."""

from __future__ import annotations

from typing import Sequence

from twinserve.core.request import Req
from twinserve.policies.registries import ROUTING
from twinserve.policies.routing.base import ReplicaView, Router


@ROUTING.register("round_robin")
class RoundRobin(Router):
    """Replica 0, 1, ..., N-1, 0, ... in arrival order, whatever their load."""

    def __init__(self) -> None:
        self._next = 0

    def choose(self, req: Req, replicas: Sequence[ReplicaView], now: float) -> int:
        i = self._next % len(replicas)
        self._next = i + 1
        return i
