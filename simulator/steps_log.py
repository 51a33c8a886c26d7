"""`StepLog`: step records kept as compact numpy columns (millions of steps in a few hundred MB)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from twinserve.core.records import StepRecord

# Column order and dtype of steps.parquet (StepRecord.as_row's columns, compact types: int32
# holds a step id, a batch's tokens or pages and a decode batch's summed context; the causal
# pair count of a prefill chunk may pass 2**31).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("step", "int32"), ("replica", "int32"), ("start", "float64"), ("duration", "float64"),
    ("num_seqs", "int32"), ("num_decodes", "int32"), ("num_prefills", "int32"),
    ("new_tokens", "int32"), ("prefill_tokens", "int32"), ("decode_ctx", "int32"),
    ("prefill_ctx", "int32"), ("prefill_attn", "int64"), ("padded_decodes", "int32"),
    ("max_ctx", "int32"), ("num_waiting", "int32"), ("num_running", "int32"),
    ("free_pages", "int32"), ("used_pages", "int32"), ("cached_pages", "int32"),
    ("num_preempted", "int32"), ("cpu_s", "float64"),
)
NAMES = tuple(n for n, _ in COLUMNS)


def _row(r: StepRecord) -> tuple:
    f = r.features
    return (r.step, r.replica, r.start, r.duration, f.num_seqs, f.num_decodes, f.num_prefills,
            f.new_tokens, f.prefill_tokens, f.decode_ctx, f.prefill_ctx, f.prefill_attn,
            f.padded_decodes, f.max_ctx, r.num_waiting, r.num_running, r.free_pages, r.used_pages,
            r.cached_pages, r.num_preempted, r.cpu_s)


class StepLog:
    """Appends step records into typed, growable numpy columns (`COLUMNS`); ``frame()`` returns
    them as one DataFrame sorted by (start, replica, step).

    Single records (``add``) and column-wise blocks (``add_block``, a fast-forward stretch) are
    written in place, so memory is ~100 bytes per step and ``frame()`` needs no second copy:
    with one replica the rows are already in time order and the frame views the columns
    (copied once, column by column, only to drop spare capacity or to sort several replicas'
    interleaved rows). With ``keep=False`` only ``count`` is kept. ``StepRecord.extra`` is not
    stored (the simulator sets none). Call ``frame()`` once, after the last row.
    """

    def __init__(self, keep: bool = True, capacity: int = 65536) -> None:
        self.keep = keep
        self.count = 0
        self._cap = capacity if keep else 0
        self._arrs: list[np.ndarray] = [np.empty(self._cap, dtype=dt) for _, dt in COLUMNS]
        self._by_name = dict(zip(NAMES, self._arrs))

    def _reserve(self, k: int) -> None:
        need = self.count + k
        if need <= self._cap:
            return
        cap = max(2 * self._cap, need)
        for i, a in enumerate(self._arrs):  # one column at a time: the peak is one extra column
            b = np.empty(cap, dtype=a.dtype)
            b[: self.count] = a[: self.count]
            self._arrs[i] = b
        self._by_name = dict(zip(NAMES, self._arrs))
        self._cap = cap

    def add(self, rec: StepRecord) -> None:
        if self.keep:
            self._reserve(1)
            i = self.count
            for a, v in zip(self._arrs, _row(rec)):
                a[i] = v
        self.count += 1

    def extend(self, recs: Iterable[StepRecord]) -> None:
        for r in recs:
            self.add(r)

    def add_block(self, columns: Mapping[str, Any], n: int) -> None:
        """Append ``n`` rows given column-wise: each name of `COLUMNS` maps to ``n`` values (array
        or list) or to one scalar shared by all ``n`` rows."""
        if self.keep and n:
            self._reserve(n)
            i = self.count
            for name, a in self._by_name.items():
                a[i : i + n] = columns[name]
        self.count += n

    def frame(self) -> pd.DataFrame:
        n = self.count if self.keep else 0
        cols = {name: a[:n] for name, a in zip(NAMES, self._arrs)}
        self._arrs, self._by_name, self._cap = [], {}, 0
        start = cols["start"]
        if n > 1 and not bool(np.all(start[1:] > start[:-1])):
            order = np.lexsort((cols["step"], cols["replica"], start))
            for name in NAMES:  # reorder column by column, freeing each unsorted one
                cols[name] = cols[name][order]
        elif n < 0.75 * len(start.base if start.base is not None else start):
            for name in NAMES:
                cols[name] = cols[name].copy()
        return pd.DataFrame(cols, copy=False)
