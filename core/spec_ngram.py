"""`NgramIndex`: prompt lookup over a growing token sequence without rescanning it.

Prompt lookup (`core.spec.NgramProposer`) asks, for the sequence's last ``n`` tokens, where the
same ``n`` tokens last ended earlier. A scan answers it in time linear in the sequence, every
step; the index keeps, per ``n``, a map from each ``n``-gram to the latest position it ended at,
and a step only adds the positions its accepted tokens created.
"""

from __future__ import annotations

import numpy as np

BULK_ENDS = 16  # more new positions than this: indexed with array operations


class NgramIndex:
    """The n-grams (``lo <= n <= max_n``, below) of one sequence's first ``size`` tokens, each
    mapped to the latest end position ``e <= size - 1`` (the sequence's own suffix, which ends
    at ``size``, is never an entry: it is the query).

    Contract: ``lookup(tokens, k)`` equals a scan for the latest earlier occurrence of the
    longest suffix that has one (the tokens after it, at most ``k``), provided every call sees
    the tokens of the previous calls unchanged at the front of ``tokens`` (the accepted tokens of
    a request never change). A shorter sequence than the one indexed rebuilds the index.
    ``may_match_after(tokens)`` tells whether a lookup could find anything once one more token,
    still unknown, follows ``tokens``.
    Invariant: ``ends[n - lo]`` holds exactly the n-grams ending at ``n .. size - 1``, for
    ``lo = max(1, min_n - 1) <= n <= max_n`` (the ``min_n - 1``-grams answer
    ``may_match_after``)."""

    def __init__(self, min_n: int, max_n: int) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.min_n = min_n
        self.max_n = max_n
        self.lo = max(1, min_n - 1)
        self.ends: list[dict[bytes, int]] = []
        self.size = 0
        self._reset()

    def _reset(self) -> None:
        self.ends = [{} for _ in range(self.max_n - self.lo + 1)]
        self.size = 0

    def _extend(self, toks: np.ndarray) -> None:
        size = toks.size
        if size < self.size:
            self._reset()
        old = self.size
        if size <= old:
            return
        # new end positions: old .. size - 1 (the end ``old`` was the previous call's query);
        # keys are the n-grams' int32 bytes
        bulk = size - old > BULK_ENDS
        for i, n in enumerate(range(self.lo, self.max_n + 1)):
            first = max(old, n)
            if first >= size:
                continue
            ends = self.ends[i]
            if bulk:  # a prompt: every window at once, the latest end of a key written last
                win = np.lib.stride_tricks.sliding_window_view(toks[first - n:size - 1], n)
                keys = np.ascontiguousarray(win).view(np.dtype((np.void, 4 * n))).ravel().tolist()
                ends.update(zip(keys, range(first, size)))
            else:
                for e in range(first, size):
                    ends[toks[e - n:e].tobytes()] = e
        self.size = size

    def lookup(self, toks: np.ndarray, k: int) -> np.ndarray:
        """Up to ``k`` tokens that followed the latest earlier occurrence of the longest suffix
        (``max_n`` down to ``min_n`` tokens) of ``toks``; empty when none occurred."""
        toks = np.ascontiguousarray(toks, dtype=np.int32)
        self._extend(toks)
        size = toks.size
        for n in range(min(self.max_n, size - 1), self.min_n - 1, -1):
            e = self.ends[n - self.lo].get(toks[size - n:].tobytes())
            if e is not None:
                return toks[e:e + k].copy()
        return toks[:0].copy()

    def may_match_after(self, toks: np.ndarray) -> bool:
        """Whether ``lookup`` of ``toks`` followed by any one token could propose: a match of
        ``n >= min_n`` tokens ending at that token needs the ``n - 1`` tokens before it to have
        occurred earlier with a token after them, so the ``min_n - 1``-gram suffix of ``toks``
        must be indexed (always true for ``min_n = 1``)."""
        m = self.min_n - 1
        if m == 0:
            return True
        toks = np.ascontiguousarray(toks, dtype=np.int32)
        self._extend(toks)
        return toks.size >= m and toks[toks.size - m:].tobytes() in self.ends[m - self.lo]
