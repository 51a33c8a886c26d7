"""`ReplicaRouter`: the tokenizer worker's choice of engine replica for each request, with the
routers of `twinserve.policies.routing`, over views built from the replicas' published stats."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from twinserve.core.config import scheduler_default
from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.policies import ROUTING
from twinserve.server.routed_prefixes import RoutedPrefixes

DEFAULT_PAGE_SIZE = scheduler_default("page_size")  # the prefix index's granularity when none is given


class RemoteReplica:
    """A `ReplicaView` of an engine replica in another process.

    Gauges (``waiting``, ``running``, ``kv_usage``, ``outstanding_tokens``) are those of its
    latest ``EngineStats``, plus the requests routed to it since (counted as waiting, with their
    prompt and ``max_tokens`` as outstanding tokens). ``match_len`` reads a `RoutedPrefixes` index of
    the prompts routed to it, of the same page size and at most as many pages as the replica's
    pool, so it follows the replica's own cache without reading it.
    """

    def __init__(self, page_size: int, capacity_pages: int) -> None:
        self.prefixes = RoutedPrefixes(page_size, capacity_pages)
        self.stats: Mapping[str, Any] = {}
        self.sent_reqs = 0
        self.sent_tokens = 0

    @property
    def num_waiting(self) -> int:
        return int(self.stats.get("waiting", 0)) + self.sent_reqs

    @property
    def num_running(self) -> int:
        return int(self.stats.get("running", 0))

    @property
    def outstanding_tokens(self) -> int:
        return int(self.stats.get("outstanding_tokens", 0)) + self.sent_tokens

    @property
    def kv_usage(self) -> float:
        return float(self.stats.get("kv_usage", 0.0))

    def match_len(self, tokens: np.ndarray) -> int:
        return self.prefixes.match_len(tokens)

    def on_stats(self, stats: Mapping[str, Any]) -> None:
        self.stats = stats
        self.sent_reqs = self.sent_tokens = 0
        pages = stats.get("num_pages")
        if isinstance(pages, (int, float)) and pages > 0:
            self.prefixes.capacity = int(pages)

    def on_sent(self, prompt: np.ndarray, max_tokens: int) -> None:
        self.sent_reqs += 1
        self.sent_tokens += len(prompt) + max_tokens
        self.prefixes.add(prompt)


class ReplicaRouter:
    """Routes requests over ``replicas`` engine replicas with router ``name`` (``kwargs``).

    Invariants: a replica marked `down` is never chosen again; ``choose`` returns None once every
    replica is down. The router sees only the live replicas, in index order.
    """

    def __init__(self, replicas: int, name: str = "round_robin", kwargs: Mapping[str, Any] | None = None,
                 page_size: int = DEFAULT_PAGE_SIZE, capacity_pages: int = 1 << 20) -> None:
        self.router = ROUTING.create(name, **dict(kwargs or {}))
        self.views = [RemoteReplica(page_size, capacity_pages) for _ in range(replicas)]
        self.alive = [True] * replicas

    def choose(self, rid: int, prompt_ids: Sequence[int], max_tokens: int, now: float) -> int | None:
        """The replica for this request (recorded as sent there), or None if none is alive."""
        live = [i for i, a in enumerate(self.alive) if a]
        if not live:
            return None
        prompt = np.asarray(prompt_ids, dtype=np.int32)
        req = Req(rid, prompt, SamplingParams(max_tokens=max_tokens), arrival=now)
        k = live[self.router.choose(req, [self.views[i] for i in live], now)] if len(live) > 1 else live[0]
        self.views[k].on_sent(prompt, max_tokens)
        return k

    def on_stats(self, replica: int, stats: Mapping[str, Any]) -> None:
        if 0 <= replica < len(self.views):
            self.views[replica].on_stats(stats)

    def down(self, replica: int) -> None:
        if 0 <= replica < len(self.alive):
            self.alive[replica] = False
