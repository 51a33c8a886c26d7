"""Multiplicative step-time noise drawn from a residual distribution, on its own random stream."""

from __future__ import annotations

import numpy as np


class StepNoise:
    """Factors to multiply device step times by, drawn by inverse-CDF from residual quantiles.

    Contract: ``take(n)`` (or ``one()``) returns the next ``n`` factors of one fixed sequence determined by
    ``seed`` alone; draws are made in blocks, so taking 1+1+1 or 3 at once gives the same values
    (fast-forward and step-by-step see identical noise). ``levels`` ascend in [0, 1]; ``ratio`` are
    the matching quantiles of measured / predicted (piecewise-linear inverse CDF between them).
    """

    def __init__(self, levels: np.ndarray, ratio: np.ndarray, seed: int, block: int = 4096) -> None:
        self._levels = np.asarray(levels, dtype=np.float64)
        self._ratio = np.asarray(ratio, dtype=np.float64)
        if self._levels.size < 2 or self._levels.size != self._ratio.size:
            raise ValueError("noise needs >= 2 quantile levels and one ratio per level")
        self._rng = np.random.default_rng(seed)
        self._block = block
        self._buf = np.empty(0)
        self._pos = 0

    def _refill(self, need: int) -> None:
        parts = [self._buf[self._pos:]]
        have = parts[0].size
        while have < need:  # always whole blocks, so the stream never depends on request sizes
            parts.append(np.interp(self._rng.random(self._block), self._levels, self._ratio))
            have += self._block
        self._buf = np.concatenate(parts)
        self._pos = 0

    def take(self, n: int) -> np.ndarray:
        if self._pos + n > self._buf.size:
            self._refill(n)
        out = self._buf[self._pos : self._pos + n]
        self._pos += n
        return out

    def peek(self, n: int) -> np.ndarray:
        """The next ``n`` factors without consuming them (``skip`` consumes)."""
        if self._pos + n > self._buf.size:
            self._refill(n)
        return self._buf[self._pos : self._pos + n]

    def skip(self, n: int) -> None:
        self.peek(n)
        self._pos += n

    def one(self) -> float:
        if self._pos >= self._buf.size:
            self._refill(1)
        v = float(self._buf[self._pos])
        self._pos += 1
        return v
