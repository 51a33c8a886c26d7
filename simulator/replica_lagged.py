"""`LaggedReplica`: the plain loop with the arrival lag of an engine that schedules one step ahead."""

from __future__ import annotations

import math
from collections import deque

from twinserve.core.batch import Batch
from twinserve.core.request import Req
from twinserve.simulator.fast_forward import FastForward, StretchRun
from twinserve.simulator.replica import ReplicaSetup
from twinserve.simulator.replica_plain import PlainReplica


class LaggedReplica(PlainReplica):
    """`PlainReplica` for a cost model fitted on an overlapping engine: a request that arrives
    while a step runs is first scheduled at the boundary after next, as the engine's overlap
    loop fixes each batch one step ahead. That is, a boundary admits the requests that arrived
    before the start of the step that just ended, and all of them when the replica would
    otherwise have nothing to run.

    Invariant: ``_lagged`` holds, in arrival order, the requests already checked by the
    scheduler but not yet added to it. A fast-forward stretch also keeps its first step that
    starts after the next visible arrival (that arrival becomes schedulable one boundary later).
    """

    mode = "lagged"

    def __init__(self, setup: ReplicaSetup) -> None:
        self._lagged: deque[Req] = deque()
        self._last_start = -math.inf  # start of the step that ended last
        super().__init__(setup)

    def submit(self, req: Req) -> None:
        """While a step runs, check ``req`` and hold it back; else queue it and wake up."""
        if self._wake is None:
            self.sched.check(req)
            self._lagged.append(req)
            return
        super().submit(req)

    def _admit(self, before: float) -> None:
        """Move the lagged requests that arrived at or before ``before`` into the scheduler."""
        q = self._lagged
        while q and q[0].arrival <= before:
            self.sched.add(q.popleft())

    def _schedule(self) -> Batch | None:
        self._admit(self._last_start)
        batch = self.sched.schedule(self.env.now)
        if batch is None and self._lagged:  # nothing else to run: the engine sees them now
            self._admit(math.inf)
            batch = self.sched.schedule(self.env.now)
        return batch

    def _started(self, t: float) -> None:
        self._last_start = t

    def _stretch(self, ff: FastForward, now: float) -> StretchRun | None:
        self._admit(self._last_start)
        t = self._next_arrival()
        t_next = min(self._lagged[0].arrival, t) if self._lagged else t
        run = ff.run(now, t_next, one_past=True)
        if run is not None:
            self._last_start = run.last_start
        return run
