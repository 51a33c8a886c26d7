"""Arrival processes: functions ``(n, rng, rate, **kw) -> sorted arrival times`` starting at 0."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from twinserve.core.registry import Registry

ArrivalFn = Callable[..., np.ndarray]
ARRIVALS: Registry[np.ndarray] = Registry("arrival process")


def _from_gaps(gaps: np.ndarray) -> np.ndarray:
    """Times of a renewal process whose first event is at 0."""
    out = np.zeros(gaps.size, dtype=np.float64)
    if gaps.size > 1:
        np.cumsum(gaps[:-1], out=out[1:])
    return out


def _check(n: int, rate: float) -> None:
    if n < 0:
        raise ValueError(f"number of arrivals must be >= 0, got {n}")
    if not rate > 0:
        raise ValueError(f"arrival rate must be > 0 (inf: all at once), got {rate}")


@ARRIVALS.register("poisson")
def poisson(n: int, rng: np.random.Generator, rate: float) -> np.ndarray:
    """Poisson process of ``rate`` req/s (exponential gaps); ``rate=inf`` puts all at t=0."""
    _check(n, rate)
    if np.isinf(rate):
        return np.zeros(n)
    return _from_gaps(rng.exponential(1.0 / rate, size=n))


@ARRIVALS.register("gamma")
def gamma(n: int, rng: np.random.Generator, rate: float, cv: float = 1.0) -> np.ndarray:
    """Gamma renewal process: mean gap ``1/rate``, gap coefficient of variation ``cv``.

    ``cv = 1`` is Poisson, ``cv > 1`` bursty, ``cv < 1`` smoother, ``cv = 0`` evenly spaced.
    """
    _check(n, rate)
    if cv < 0:
        raise ValueError(f"cv must be >= 0, got {cv}")
    if np.isinf(rate):
        return np.zeros(n)
    if cv == 0:
        return _from_gaps(np.full(n, 1.0 / rate))
    shape = 1.0 / (cv * cv)
    return _from_gaps(rng.gamma(shape, 1.0 / (rate * shape), size=n))


def arrival_times(process: str, n: int, rng: np.random.Generator, rate: float,
                  **kwargs: Any) -> np.ndarray:
    """Dispatch by name through ``ARRIVALS`` (``"poisson"``, ``"gamma"`` or ``"module:fn"``)."""
    return ARRIVALS.get(process)(n, rng, rate, **kwargs)
