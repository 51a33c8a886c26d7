"""`HostSpeed`: a host slowdown over simulated time, replayed from a recorded engine run or
drawn as slow-host episodes like those a calibration profile measured (`HostSpeed.episodes`);
`scaled_host`, host parts times one factor."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from twinserve.simulator.cost.base import HostParts


@dataclass(frozen=True, slots=True)
class HostSpeed:
    """A step function of time: from ``times[i]`` on, the host runs ``factors[i]`` times slower
    than the cost model says (``factors[0]`` before ``times[0]``). The simulator's pipelined
    loop multiplies each iteration's host parts (not the device work) by the factor at the
    iteration's start. Replayed from a recorded run (`calibration.host_fit.host_speed_trace`) it is a
    diagnostic, not a prediction: it comes from the very run it is compared with; drawn by
    `episodes` it is a prediction from the calibration profile alone.

    Invariant: ``times`` ascending, one factor per time, every factor > 0."""

    times: np.ndarray
    factors: np.ndarray

    def __post_init__(self) -> None:
        if len(self.times) != len(self.factors) or len(self.times) == 0:
            raise ValueError("HostSpeed needs one factor per time, and at least one")
        if np.any(np.diff(self.times) < 0) or np.any(self.factors <= 0):
            raise ValueError("HostSpeed times must ascend and factors be > 0")

    @classmethod
    def episodes(cls, share: float, factor: float, mean_s: float, horizon_s: float,
                 seed: int = 0) -> "HostSpeed":
        """Slow-host episodes at random: slow stretches (``factor`` times slower) of mean length
        ``mean_s`` alternate with normal ones of mean ``mean_s * (1 - share) / share``, both
        exponential, so that a ``share`` of the time is slow on average; the first stretch is
        slow with probability ``share``. Drawn up to ``horizon_s`` (normal speed after it).
        Seeded: the same arguments give the same episodes."""
        if not (0.0 < share < 1.0) or factor <= 0 or mean_s <= 0:
            return cls(np.zeros(1), np.ones(1))
        rng = np.random.default_rng(seed)
        gap = mean_s * (1.0 - share) / share
        slow = bool(rng.random() < share)
        t, times, factors = 0.0, [], []
        while t < horizon_s:
            times.append(t)
            factors.append(factor if slow else 1.0)
            t += float(rng.exponential(mean_s if slow else gap))
            slow = not slow
        times.append(t)
        factors.append(1.0)
        return cls(np.asarray(times), np.asarray(factors))

    def at(self, t: float) -> float:
        i = int(np.searchsorted(self.times, t, "right")) - 1
        return float(self.factors[max(i, 0)])

    def scale(self, hp: HostParts, t: float) -> HostParts:
        """``hp`` with its host work (sched, pre, launch, post, complete, loop) slowed as at ``t``."""
        return scaled_host(hp, self.at(t))


def scaled_host(hp: HostParts, f: float) -> HostParts:
    """``hp`` with its host work (sched, pre, launch, post, complete, loop) times ``f``; the
    device's work (``device``, ``tail``) unchanged."""
    return replace(hp, sched=hp.sched * f, pre=hp.pre * f, post=hp.post * f, launch=hp.launch * f,
                   complete=hp.complete * f, loop=hp.loop * f)
