"""`prefix_affinity`: the replica caching the longest prefix of the prompt."""

from __future__ import annotations

from typing import Sequence

from twinserve.core.request import Req
from twinserve.policies.registries import ROUTING
from twinserve.policies.routing.base import ReplicaView, Router


@ROUTING.register("prefix_affinity")
class PrefixAffinity(Router):
    """The replica whose prefix cache holds the longest prefix of the prompt; among equal matches
    (including no match anywhere), the one with the fewest ``outstanding_tokens``; then the lowest
    index. Load never outweighs a longer match (see `cache_aware` for a router that weighs them).

    ``min_match`` (tokens): shorter matches count as no match, so one common first page does not
    pull all traffic onto one replica.
    """

    def __init__(self, min_match: int = 1) -> None:
        self.min_match = min_match

    def choose(self, req: Req, replicas: Sequence[ReplicaView], now: float) -> int:
        prompt = req.prompt
        best: tuple[int, int] | None = None
        pick = 0
        for i, v in enumerate(replicas):
            m = v.match_len(prompt)
            if m < self.min_match:
                m = 0
            key = (-m, v.outstanding_tokens)
            if best is None or key < best:
                best, pick = key, i
        return pick
