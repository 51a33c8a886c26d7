"""Length distributions: functions ``(n, rng, **params) -> int64 lengths``, plus clipping.

A length is given to generators as an ``int`` (fixed) or a mapping that Hydra can write, e.g.
``{"dist": "lognormal", "mean": 1000, "sigma": 1.0, "min": 16, "max": 8192}``. ``min`` (default
1) and ``max`` (default none) clip every distribution.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Union

import numpy as np

from twinserve.core.registry import Registry

LengthSpec = Union[int, Mapping[str, Any]]
LENGTHS: Registry[np.ndarray] = Registry("length distribution")


@LENGTHS.register("fixed")
def fixed(n: int, rng: np.random.Generator, value: int) -> np.ndarray:
    """Every length equals ``value``."""
    return np.full(n, int(value), dtype=np.int64)


@LENGTHS.register("uniform")
def uniform(n: int, rng: np.random.Generator, lo: int, hi: int) -> np.ndarray:
    """Integers uniform on ``[lo, hi]`` (both included)."""
    if hi < lo:
        raise ValueError(f"uniform lengths need lo <= hi, got [{lo}, {hi}]")
    return rng.integers(int(lo), int(hi) + 1, size=n, dtype=np.int64)


@LENGTHS.register("lognormal")
def lognormal(n: int, rng: np.random.Generator, mean: float, sigma: float) -> np.ndarray:
    """Log-normal with arithmetic mean ``mean`` (before rounding and clipping) and log-sd ``sigma``.

    The underlying normal has ``mu = ln(mean) - sigma**2 / 2``; values are rounded to integers.
    """
    if mean <= 0 or sigma < 0:
        raise ValueError(f"lognormal lengths need mean > 0 and sigma >= 0, got {mean}, {sigma}")
    mu = np.log(mean) - 0.5 * sigma * sigma
    return np.rint(rng.lognormal(mu, sigma, size=n)).astype(np.int64)


@LENGTHS.register("zipf")
def zipf(n: int, rng: np.random.Generator, a: float, lo: int, hi: int) -> np.ndarray:
    """Bounded Zipf over ``lo..hi``: ``P(lo + r - 1)`` proportional to ``r ** -a`` for rank ``r``.

    Short lengths are the most common and the tail is heavy; any ``a > 0`` is allowed (no
    ``a > 1`` restriction since the support is finite).
    """
    if hi < lo or a <= 0:
        raise ValueError(f"zipf lengths need lo <= hi and a > 0, got a={a}, [{lo}, {hi}]")
    ranks = np.arange(1, int(hi) - int(lo) + 2, dtype=np.float64)
    cdf = np.cumsum(ranks ** (-float(a)))
    cdf /= cdf[-1]
    idx = np.searchsorted(cdf, rng.random(n), side="right")
    return int(lo) + np.minimum(idx, ranks.size - 1).astype(np.int64)


def sample_lengths(spec: LengthSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` lengths from ``spec``: an int gives exactly that length; a mapping names ``dist`` and
    its parameters, and its draws are clipped to ``[min, max]`` (``min`` defaults to 1)."""
    if isinstance(spec, (int, np.integer)):
        return fixed(n, rng, int(spec))
    if isinstance(spec, Mapping):
        params = dict(spec)
        dist = params.pop("dist", None)
        if dist is None:
            known = ", ".join(LENGTHS.names())
            raise ValueError(f"length spec {params} needs a 'dist' key ({known})")
        lo = int(params.pop("min", 1))
        hi = params.pop("max", None)
        values = LENGTHS.get(str(dist))(n, rng, **params)
        return np.clip(values, lo, None if hi is None else int(hi))
    raise TypeError(f"a length spec is an int or a mapping, got {type(spec).__name__}")


def describe(spec: LengthSpec) -> str:
    """A short human-readable form of a length spec (for workload names)."""
    if isinstance(spec, Mapping):
        inner = ",".join(f"{k}={v}" for k, v in spec.items() if k != "dist")
        return f"{spec.get('dist')}({inner})"
    return str(spec)
