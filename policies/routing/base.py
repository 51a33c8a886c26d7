"""The routing contract: which replica a new request goes to, from read-only replica views."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Protocol, Sequence

import numpy as np

from twinserve.core.request import Req


class ReplicaView(Protocol):
    """What a router may read about one replica (all read-only, all live at the call).

    - ``num_waiting`` / ``num_running``: requests queued / admitted.
    - ``outstanding_tokens``: tokens the replica still has to compute for its waiting and running
      requests (``prompt_len + max_tokens - num_computed`` each).
    - ``kv_usage``: the share of the KV pool held by requests, in [0, 1] (evictable cached pages
      count as free).
    - ``match_len(tokens)``: how many leading tokens of ``tokens`` the replica's prefix cache
      holds (0 without a cache).
    """

    @property
    def num_waiting(self) -> int: ...

    @property
    def num_running(self) -> int: ...

    @property
    def outstanding_tokens(self) -> int: ...

    @property
    def kv_usage(self) -> float: ...

    def match_len(self, tokens: np.ndarray) -> int: ...


class Router(ABC):
    """Picks the replica a request goes to: ``choose(req, replicas, now)`` returns an index in
    ``range(len(replicas))``.

    Contract: ``replicas`` are `ReplicaView`s (the simulator's and the engine cluster's are
    `SchedulerView`s over their schedulers); a router reads them and never changes them. It is
    deterministic given the views and the sequence of calls (no randomness, no clock reads; ``now``
    is the caller's clock). Ties go to the lowest index. A router may keep state across calls
    (round robin's cursor); one router object serves one cluster. Routers register with
    ``@ROUTING.register("name")``; constructor kwargs come from ``router_kwargs``.
    """

    @abstractmethod
    def choose(self, req: Req, replicas: Sequence[ReplicaView], now: float) -> int: ...
