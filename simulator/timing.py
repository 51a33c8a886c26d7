"""Event ordering: same-time events run in a fixed order, at exact float times.

Order at one simulated instant (SimPy processes events by (time, priority, insertion id)):

1. ``ARRIVAL`` (SimPy URGENT): the arrival process feeds and routes every request due now;
2. ``STEP_END`` (SimPy NORMAL): replicas whose step ends now call ``complete()`` and then, in the
   same resumption, ``schedule()`` their next step; replicas woken by an arrival schedule too.

So a step that starts at time t sees every request that arrived at or before t, and the router
sees each replica as it was before its steps ending at t completed. Replicas never read each
other's state, so the order among replicas at one instant changes nothing. On a `SharedDevice`
an arrival only reaches the host's door; the host routes it at its next round's top.
"""

from __future__ import annotations

from heapq import heappush

from simpy import Environment
from simpy.events import NORMAL, URGENT, Event

ARRIVAL = URGENT
STEP_END = NORMAL


class SimEnvironment(Environment):
    """A SimPy environment that can also schedule an event at an absolute time.

    SimPy computes an event's time as ``now + delay``; for some pairs of floats no delay lands
    exactly on a given time (round-half-even skips every other float). Fast-forward needs the
    exact time step-by-step stepping would reach, so ``schedule_at`` puts the event on the queue
    at ``when`` itself (same (time, priority, insertion id) ordering as ``schedule``).
    """

    def schedule_at(self, event: Event, priority: int, when: float) -> None:
        if when < self._now:
            raise ValueError(f"cannot schedule in the past: {when} < {self._now}")
        heappush(self._queue, (when, priority, next(self._eid), event))


class At(Event):
    """An event that fires at the absolute time ``when`` with SimPy ``priority``."""

    def __init__(self, env: SimEnvironment, when: float, priority: int = STEP_END) -> None:
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule_at(self, priority, when)
