"""`NgramIndex`: prompt lookup over a growing token sequence without rescanning it.

Prompt lookup (`core.spec.NgramProposer`) asks, for the sequence's last ``n`` tokens, where the
same ``n`` tokens last ended earlier. A scan answers it in time linear in the sequence, every
step; the index keeps, per ``n``, a map from each ``n``-gram to the latest position it ended at,
and a step only adds the positions its accepted tokens created.
"""

from __future__ import annotations

import numpy as np


class NgramIndex:
    """The n-grams (``min_n <= n <= max_n``) of one sequence's first ``size`` tokens, each
    mapped to the latest end position ``e <= size - 1`` (the sequence's own suffix, which ends
    at ``size``, is never an entry: it is the query).

    Contract: ``lookup(tokens, k)`` equals a scan for the latest earlier occurrence of the
    longest suffix that has one (the tokens after it, at most ``k``), provided every call sees
    the tokens of the previous calls unchanged at the front of ``tokens`` (the accepted tokens of
    a request never change). A shorter sequence than the one indexed rebuilds the index.
    Invariant: ``ends[n - min_n]`` holds exactly the n-grams ending at ``n .. size - 1``."""

    def __init__(self, min_n: int, max_n: int) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.min_n = min_n
        self.max_n = max_n
        self.ends: list[dict[tuple[int, ...], int]] = []
        self.size = 0
        self._reset()

    def _reset(self) -> None:
        self.ends = [{} for _ in range(self.max_n - self.min_n + 1)]
        self.size = 0

    def _extend(self, toks: np.ndarray) -> None:
        size = toks.size
        if size < self.size:
            self._reset()
        old = self.size
        if size <= old:
            return
        # new end positions: old .. size - 1 (the end ``old`` was the previous call's query)
        lo = max(0, old - self.max_n)
        vals = toks[lo:size - 1].tolist()
        for e in range(max(old, 1), size):
            for i, n in enumerate(range(self.min_n, min(self.max_n, e) + 1)):
                self.ends[i][tuple(vals[e - n - lo:e - lo])] = e
        self.size = size

    def lookup(self, toks: np.ndarray, k: int) -> np.ndarray:
        """Up to ``k`` tokens that followed the latest earlier occurrence of the longest suffix
        (``max_n`` down to ``min_n`` tokens) of ``toks``; empty when none occurred."""
        self._extend(toks)
        size = toks.size
        if size < 2:
            return toks[:0].copy()
        tail = toks[max(0, size - self.max_n):].tolist()
        for n in range(min(self.max_n, size - 1), self.min_n - 1, -1):
            e = self.ends[n - self.min_n].get(tuple(tail[len(tail) - n:]))
            if e is not None:
                return toks[e:e + k].copy()
        return toks[:0].copy()
