"""The device clock's drift against the host's, read off an engine run's own steps.

The engine places each step's device span (``dev_start``, ``dev_end``) on its host clock
through one origin event (`ModelRunner.mark_origin`); the two clocks run at slightly different
rates (tens of ppm on an H100: `twinserve-bench clock-drift`), so device times drift off the
host's by tens of microseconds a second, and a graph step's device work read against the host's
enqueue (`timeline.timeline_frame`) drifts with them. Each step whose completion blocked on the
device gives a sample of the offset: the host got its tokens (``tokens_at``) right after the
device ended (``dev_end``), so ``tokens_at - dev_end`` is the clocks' offset plus a wake-up
latency that is never negative. The drift is the slope of the samples' lower envelope against
time: per time bin a low quantile, then a least-squares line through the bins.

`drift_corrected` rescales the device times of each run (each replica's, each clock restart's)
by its fitted drift; the offset at the origin is left as recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from twinserve.calibration.timeline import runs_of

BLOCKED_WAIT_S = 3e-4  # a step whose completion waited this long on the device: its end is a sample
ENVELOPE_QUANTILE = 0.1
MIN_BINS = 4
MIN_PER_BIN = 20
BIN_S = 1.0


@dataclass(frozen=True)
class ClockFit:
    """One run's device clock against its host clock: device readings fall behind the host's
    by ``drift`` seconds per second (negative when the device clock runs slow), from
    ``offset_s`` (host minus device, wake-up latency included) at time 0; ``samples`` steps
    and ``bins`` time bins made the fit."""

    drift: float
    offset_s: float
    samples: int
    bins: int

    @property
    def ppm(self) -> float:
        """The device clock's rate against the host's, in parts per million."""
        return -self.drift * 1e6


def fit_clock(steps: pd.DataFrame) -> ClockFit | None:
    """`ClockFit` of one run's steps (one clock origin), or None with too few blocked steps to
    span ``MIN_BINS`` bins of ``MIN_PER_BIN`` samples."""
    if not {"wait_s", "tokens_at", "dev_end"} <= set(steps.columns):
        return None
    wait = steps["wait_s"].to_numpy(np.float64)
    t = steps["tokens_at"].to_numpy(np.float64)
    d = steps["dev_end"].to_numpy(np.float64)
    ok = np.isfinite(wait) & np.isfinite(t) & np.isfinite(d) & (wait > BLOCKED_WAIT_S)
    if ok.sum() < MIN_BINS * MIN_PER_BIN:
        return None
    t, gap = t[ok], (t - d)[ok]
    width = max(BIN_S, (t.max() - t.min()) / 64.0)
    idx = np.floor((t - t.min()) / width).astype(np.int64)
    centers, lows = [], []
    for b in np.unique(idx):
        sel = idx == b
        if sel.sum() >= MIN_PER_BIN:
            centers.append(float(np.median(t[sel])))
            lows.append(float(np.quantile(gap[sel], ENVELOPE_QUANTILE)))
    if len(centers) < MIN_BINS:
        return None
    slope, intercept = np.polyfit(np.array(centers), np.array(lows), 1)
    return ClockFit(drift=float(slope), offset_s=float(intercept), samples=int(ok.sum()), bins=len(centers))


def clock_groups(steps: pd.DataFrame) -> list[np.ndarray]:
    """Positions of the rows that share one clock origin: per replica (where the column
    exists), each run of `timeline.runs_of`."""
    replica = steps["replica"] if "replica" in steps else pd.Series(0, index=steps.index)
    run = pd.Series(0, index=steps.index)
    for _, g in steps.groupby(replica, sort=False):
        run.loc[g.index] = runs_of(g).to_numpy()
    return list(steps.groupby([replica, run], sort=False).indices.values())


def drift_corrected(steps: pd.DataFrame) -> tuple[pd.DataFrame, list[ClockFit]]:
    """``steps`` with ``dev_start`` and ``dev_end`` of each clock group moved onto the host's
    clock by its `fit_clock` (``x + drift * x``; groups without a fit unchanged), and the fits
    made. The input is not modified; rows keep their order and index."""
    if not {"dev_start", "dev_end"} <= set(steps.columns):
        return steps, []
    cols = {c: steps[c].to_numpy(np.float64).copy() for c in ("dev_start", "dev_end")}
    fits: list[ClockFit] = []
    for rows in clock_groups(steps):
        fit = fit_clock(steps.iloc[rows])
        if fit is None:
            continue
        fits.append(fit)
        for x in cols.values():
            x[rows] += fit.drift * x[rows]
    return steps.assign(**cols), fits
