"""`vtc`: fair share across tenants with a virtual token counter."""

from __future__ import annotations

from typing import Sequence

from twinserve.core.request import Req
from twinserve.policies.cache.base import PrefixCache
from twinserve.policies.registries import SCHEDULING
from twinserve.policies.scheduling.base import SchedulingPolicy


@SCHEDULING.register("vtc")
class VirtualTokenCounter(SchedulingPolicy):
    """Serve the tenant that has received the least service so far.

    Each tenant has a counter that grows by ``input_weight`` per prompt token computed and
    ``output_weight`` per output token. Waiting requests are ordered by their tenant's counter
    (then arrival), as the counters would stand after admitting the requests ahead of them. A
    tenant that comes back after being idle is lifted to the smallest counter among active tenants,
    so idle time earns no credit (the VTC rule). The victim is a request of the most-served tenant.
    """

    name = "vtc"
    tracks_compute = True

    def __init__(self, input_weight: float = 1.0, output_weight: float = 2.0) -> None:
        self.input_weight = input_weight
        self.output_weight = output_weight
        self.counters: dict[str, float] = {}
        self._active: dict[str, int] = {}

    def on_add(self, req: Req, now: float) -> None:
        t = req.tenant
        if self._active.get(t, 0) == 0:
            live = [self.counters[x] for x, n in self._active.items() if n > 0 and x in self.counters]
            floor = min(live) if live else 0.0
            self.counters[t] = max(self.counters.get(t, 0.0), floor)
        self._active[t] = self._active.get(t, 0) + 1

    def on_exit(self, req: Req) -> None:
        self._active[req.tenant] = self._active.get(req.tenant, 1) - 1

    def on_compute(self, req: Req, prefill: int, outputs: int) -> None:
        self.counters[req.tenant] = (self.counters.get(req.tenant, 0.0)
                                     + self.input_weight * prefill + self.output_weight * outputs)

    def order(self, waiting: Sequence[Req], now: float, cache: PrefixCache) -> list[Req]:
        # Greedy: repeatedly take the earliest request of the tenant with the smallest projected
        # counter, charging it the prompt it would prefill.
        queues: dict[str, list[Req]] = {}
        for r in sorted(waiting, key=lambda r: (r.arrival, r.rid)):
            queues.setdefault(r.tenant, []).append(r)
        projected = {t: self.counters.get(t, 0.0) for t in queues}
        heads = {t: 0 for t in queues}
        out: list[Req] = []
        while len(out) < len(waiting):
            t = min((t for t in queues if heads[t] < len(queues[t])), key=lambda t: (projected[t], t))
            r = queues[t][heads[t]]
            heads[t] += 1
            out.append(r)
            projected[t] += self.input_weight * r.num_tokens
        return out

    def victim(self, candidates: Sequence[Req], now: float) -> Req:
        return max(candidates, key=lambda r: (self.counters.get(r.tenant, 0.0), r.arrival, r.rid))
