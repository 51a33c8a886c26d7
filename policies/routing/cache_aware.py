"""`cache_aware`: the replica where the request would wait for the least work, its cached prefix
counted as work saved."""

from __future__ import annotations

from typing import Sequence

from twinserve.core.request import Req
from twinserve.policies.registries import ROUTING
from twinserve.policies.routing.base import ReplicaView, Router


@ROUTING.register("cache_aware")
class CacheAware(Router):
    """The replica with the lowest score

        ``score_i = (prompt_len - match_len_i) + load_weight * outstanding_tokens_i``

    i.e. the prompt tokens replica ``i`` would have to prefill (its cached prefix is skipped) plus
    its weighted backlog. A replica holding the prefix wins unless its backlog exceeds another's
    by more than the tokens the prefix saves (divided by ``load_weight``). Replicas whose
    ``kv_usage`` is above ``max_kv_usage`` are passed over while any other is at or below it.
    Ties go to the lowest index.

    ``load_weight`` (>= 0): how many prefill tokens one outstanding token counts as; 0 routes on
    the cache alone (fewest uncached tokens), large values approach `least_loaded`.
    """

    def __init__(self, load_weight: float = 1.0, max_kv_usage: float = 0.95) -> None:
        if load_weight < 0:
            raise ValueError(f"cache_aware: load_weight must be >= 0, got {load_weight}")
        if not 0.0 < max_kv_usage <= 1.0:
            raise ValueError(f"cache_aware: max_kv_usage must lie in (0, 1], got {max_kv_usage}")
        self.load_weight = float(load_weight)
        self.max_kv_usage = float(max_kv_usage)

    def score(self, req: Req, view: ReplicaView) -> float:
        """Uncached prompt tokens plus ``load_weight`` times the backlog (lower is better)."""
        return (req.prompt_len - view.match_len(req.prompt)) + self.load_weight * view.outstanding_tokens

    def choose(self, req: Req, replicas: Sequence[ReplicaView], now: float) -> int:
        roomy = [i for i, v in enumerate(replicas) if v.kv_usage <= self.max_kv_usage]
        candidates = roomy or list(range(len(replicas)))
        scores = [(self.score(req, replicas[i]), i) for i in candidates]
        return min(scores)[1]
