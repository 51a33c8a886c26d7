"""`cache_aging`: an example scheduling policy in one file (see the README walk-through).

Select it by module path (nothing to register; the module is imported on first use):
    twinserve-run scheduler.name=twinserve.experiments.examples.my_policy:CacheAwareAging
Its constructor arguments go under ``scheduler.kwargs`` (``+scheduler.kwargs.tokens_per_s=500``).
In Python code that has imported this module, its registered name ``cache_aging`` works too.
"""

from __future__ import annotations

from typing import Sequence

from twinserve.core.request import Req
from twinserve.policies.cache.base import PrefixCache
from twinserve.policies.registries import SCHEDULING
from twinserve.policies.scheduling.base import SchedulingPolicy


@SCHEDULING.register("cache_aging")
class CacheAwareAging(SchedulingPolicy):
    """Fewest uncached prompt tokens first, with aging so long prompts do not starve.

    Score = (prompt tokens not in the prefix cache) - ``tokens_per_s`` * (seconds waited); the
    smallest score is admitted first (ties: earlier arrival, then id). With ``tokens_per_s = 0``
    this is cache-aware shortest-job-first; as it grows the order tends to FCFS. Pure ordering:
    it reads the cache through ``match_len`` only and keeps no state, so the default victim rule
    (latest arrival) applies. Beyond ``max_queue`` waiting requests it skips the prefix lookups.
    """

    name = "cache_aging"

    def __init__(self, tokens_per_s: float = 2000.0, max_queue: int = 128) -> None:
        if tokens_per_s < 0:
            raise ValueError("tokens_per_s must be >= 0")
        self.tokens_per_s = tokens_per_s
        self.max_queue = max_queue

    def order(self, waiting: Sequence[Req], now: float, cache: PrefixCache) -> list[Req]:
        use_cache = len(waiting) <= self.max_queue

        def score(r: Req) -> tuple[float, float, int]:
            hit = cache.match_len(r.tokens[: r.num_tokens - 1]) if use_cache else 0
            return (r.num_tokens - hit - self.tokens_per_s * (now - r.arrival), r.arrival, r.rid)

        return sorted(waiting, key=score)
