"""Routers: which replica a new request goes to (registry `ROUTERS`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Sequence

from twinserve.core.registry import Registry
from twinserve.core.request import Req


def outstanding_tokens(sched: Any) -> int:
    """Tokens a replica still has to compute: for each waiting or running request, its prompt plus
    its remaining outputs minus what already has KV (``prompt_len + max_tokens - num_computed``).

    It moves only when a step is launched (``num_computed`` advances at ``schedule()``), so it reads
    the same whether the replica's last step has completed or is still in flight.
    """
    total = 0
    for queue in (sched.waiting, sched.running):
        for r in queue:
            total += r.prompt_len + r.params.max_tokens - r.num_computed
    return total


class Router(ABC):
    """Picks a replica index in ``range(len(scheds))`` for ``req`` at time ``now``.

    Contract: deterministic given the replicas' states and the sequence of calls (no randomness,
    no clock); reads the schedulers, never changes them. Ties go to the lowest index.
    """

    @abstractmethod
    def choose(self, req: Req, scheds: Sequence[Any], now: float) -> int: ...


ROUTERS: Registry[Router] = Registry("router")


@ROUTERS.register("round_robin")
class RoundRobin(Router):
    """Replica 0, 1, ..., N-1, 0, ... in arrival order, whatever their load."""

    def __init__(self) -> None:
        self._next = 0

    def choose(self, req: Req, scheds: Sequence[Any], now: float) -> int:
        i = self._next % len(scheds)
        self._next = i + 1
        return i


@ROUTERS.register("least_loaded")
class LeastLoaded(Router):
    """The replica with the fewest outstanding tokens (see `outstanding_tokens`)."""

    def choose(self, req: Req, scheds: Sequence[Any], now: float) -> int:
        loads = [outstanding_tokens(s) for s in scheds]
        return loads.index(min(loads))


@ROUTERS.register("prefix_affinity")
class PrefixAffinity(Router):
    """The replica whose prefix cache holds the longest prefix of the prompt; among equal matches
    (including no match anywhere), the least loaded; then the lowest index.

    ``min_match`` (tokens): shorter matches count as no match, so one common first page does not
    pull all traffic onto one replica.
    """

    def __init__(self, min_match: int = 1) -> None:
        self.min_match = min_match

    def choose(self, req: Req, scheds: Sequence[Any], now: float) -> int:
        prompt = req.prompt
        best: tuple[int, int] | None = None
        pick = 0
        for i, s in enumerate(scheds):
            m = s.cache.match_len(prompt) if s.cache is not None else 0
            if m < self.min_match:
                m = 0
            key = (-m, outstanding_tokens(s))
            if best is None or key < best:
                best, pick = key, i
        return pick
