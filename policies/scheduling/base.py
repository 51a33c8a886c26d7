"""The scheduling-policy contract: admission order and preemption victims."""

from __future__ import annotations

from typing import Sequence

from twinserve.core.request import Req
from twinserve.policies.cache.base import PrefixCache


class SchedulingPolicy:
    """Orders the waiting queue and picks whom to preempt.

    Contract:
    - ``order(waiting, now, cache)`` returns the waiting requests in the order the scheduler should
      try to admit them (it stops at the first one that does not fit: head-of-line blocking keeps
      the order meaningful). It must not mutate the requests or the cache (use ``match_len``).
    - ``victim(candidates, now)`` returns the running request to preempt when pages run out; the
      default is the most recently arrived one (it has the least sunk work).
    - ``on_add`` / ``on_compute`` / ``on_exit`` are notifications for stateful policies (fair
      share): a request entered the queue; it computed ``prefill`` prompt tokens and produced
      ``outputs`` tokens in a step; it left for good. They never change scheduler state.
      The scheduler calls ``on_compute`` only when ``tracks_compute`` is true (default False).
    - ``step_budget(waiting, running, budget)`` returns the token budget of the step being formed,
      given the configured one; the scheduler calls it (with its exact queue and running list)
      only when ``sets_budget`` is true (default False: the configured budget) and prefill is
      chunked (a whole prompt needs the configured budget). It must not change the requests or
      the lists, and must return the configured budget when no prompt token waits (the
      simulator's decode stretches assume it).
    Subclasses register with ``@SCHEDULING.register("name")``; constructor kwargs come from Hydra.
    """

    name = "base"
    tracks_compute: bool = False  # True if on_compute matters (lets the scheduler skip the calls)
    sets_budget: bool = False  # True if step_budget may differ from the configured budget

    def order(self, waiting: Sequence[Req], now: float, cache: PrefixCache) -> list[Req]:
        return list(waiting)

    def victim(self, candidates: Sequence[Req], now: float) -> Req:
        return max(candidates, key=lambda r: (r.arrival, r.rid))

    def step_budget(self, waiting: Sequence[Req], running: Sequence[Req], budget: int) -> int:
        return budget

    def on_add(self, req: Req, now: float) -> None:
        return None

    def on_compute(self, req: Req, prefill: int, outputs: int) -> None:
        return None

    def on_exit(self, req: Req) -> None:
        return None
