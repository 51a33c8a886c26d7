"""`HostSpeed`: a host slowdown over simulated time, replayed from a recorded engine run."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from twinserve.simulator.cost.base import HostParts


@dataclass(frozen=True, slots=True)
class HostSpeed:
    """A step function of time: from ``times[i]`` on, the host runs ``factors[i]`` times slower
    than the cost model says (``factors[0]`` before ``times[0]``). The simulator's pipelined
    loop multiplies each iteration's host parts (not the device work) by the factor at the
    iteration's start. A diagnostic, not a prediction: it comes from the very run it is
    compared with (`cost.host_fit.host_speed_trace`).

    Invariant: ``times`` ascending, one factor per time, every factor > 0."""

    times: np.ndarray
    factors: np.ndarray

    def __post_init__(self) -> None:
        if len(self.times) != len(self.factors) or len(self.times) == 0:
            raise ValueError("HostSpeed needs one factor per time, and at least one")
        if np.any(np.diff(self.times) < 0) or np.any(self.factors <= 0):
            raise ValueError("HostSpeed times must ascend and factors be > 0")

    def at(self, t: float) -> float:
        i = int(np.searchsorted(self.times, t, "right")) - 1
        return float(self.factors[max(i, 0)])

    def scale(self, hp: HostParts, t: float) -> HostParts:
        """``hp`` with its host work (sched, pre, launch, complete, loop) slowed as at ``t``."""
        f = self.at(t)
        return replace(hp, sched=hp.sched * f, pre=hp.pre * f, launch=hp.launch * f,
                       complete=hp.complete * f, loop=hp.loop * f)
