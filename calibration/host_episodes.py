"""Slow-host episodes: stretches of a profile in which every host part runs slower than usual.

On a GPU host whose vCPUs change speed the engine's host work (schedule, launch, complete) can
run slower for seconds at a time, whatever the step's shape. Fitted as if it were typical, such a stretch raises every host
fit; left in, it also inflates the device span of eager steps whose kernels the slow host
launched. This module finds them so that the fits can leave them out and record how often they
happened (`HostFit.slow_share`, `HostFit.slow_factor`).

The test is on the host's speed over a window of consecutive steps, not on single steps: a
step's factor is the median, over the ``window`` steps around it (same run, execution order),
of the per-step host ratio measured / fitted (itself the median over the step's host parts), and
a step is *slow* when that factor exceeds ``threshold``. Single slow steps (stalls) stay in.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from twinserve.calibration.timeline import runs_of

EPISODE_WINDOW = 301
EPISODE_THRESHOLD = 1.25


def step_ratio(log_ratios: list[np.ndarray]) -> np.ndarray:
    """Per step, the median of its host parts' log(measured / fitted), ignoring NaN parts
    (NaN where no part is finite)."""
    stack = np.column_stack(log_ratios)
    ok = np.isfinite(stack)
    out = np.full(stack.shape[0], np.nan)
    any_ok = ok.any(axis=1)
    if any_ok.any():
        with np.errstate(all="ignore"):
            out[any_ok] = np.nanmedian(np.where(ok, stack, np.nan)[any_ok], axis=1)
    return out


def speed_factor(steps: pd.DataFrame, log_ratio: np.ndarray, window: int = EPISODE_WINDOW) -> np.ndarray:
    """Per step (rows of ``steps``, in execution order within each run), exp of the rolling
    median of ``log_ratio`` over ``window`` steps centred on it, within its run (a run too
    short for a third of the window gets the run's median)."""
    out = np.full(len(steps), np.nan)
    lr = pd.Series(log_ratio, index=steps.index)
    for _, idx in steps.groupby(runs_of(steps), sort=False).groups.items():
        s = lr.loc[idx]
        roll = s.rolling(window, center=True, min_periods=max(1, window // 3)).median()
        roll = roll.fillna(s.median())
        out[steps.index.get_indexer(idx)] = np.exp(roll.to_numpy(np.float64))
    return out


def slow_episodes(steps: pd.DataFrame, log_ratio: np.ndarray, window: int = EPISODE_WINDOW,
                  threshold: float = EPISODE_THRESHOLD) -> tuple[np.ndarray, np.ndarray]:
    """(slow mask, speed factor) per row: slow where the windowed factor exceeds ``threshold``."""
    f = speed_factor(steps, log_ratio, window)
    return np.nan_to_num(f, nan=1.0) > threshold, f
