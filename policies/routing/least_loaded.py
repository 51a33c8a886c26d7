"""`least_loaded`: the replica with the least work left."""

from __future__ import annotations

from typing import Sequence

from twinserve.core.request import Req
from twinserve.policies.registries import ROUTING
from twinserve.policies.routing.base import ReplicaView, Router


@ROUTING.register("least_loaded")
class LeastLoaded(Router):
    """The replica with the fewest ``outstanding_tokens``; ties to the lowest index."""

    def choose(self, req: Req, replicas: Sequence[ReplicaView], now: float) -> int:
        loads = [v.outstanding_tokens for v in replicas]
        return loads.index(min(loads))
