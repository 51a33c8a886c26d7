"""`FastForward`: one replica's decode stretches priced, cut at the next arrival, applied, logged."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from twinserve.core.batch import BatchFeatures
from twinserve.core.graph_plan import GraphPlan
from twinserve.simulator.cost.base import CostModel, FeatureColumns
from twinserve.simulator.cost.noise import StepNoise
from twinserve.simulator.steps_log import StepLog
from twinserve.simulator.stretch import DecodeStretch, StretchColumns, StretchScheduler


@dataclass(frozen=True, slots=True)
class StretchRun:
    """Where an applied stretch ends: its last step's end (the replica sleeps until then) and
    start."""

    end: float
    last_start: float


@dataclass(frozen=True, slots=True)
class _Part:
    """Steps priced in one chunk: their feature columns (``cols.size`` rows, of which the first
    ``len(ends)`` were kept) and per kept step the device, host and wall times and start."""

    cols: FeatureColumns
    gpu: np.ndarray
    cpu: np.ndarray
    wall: np.ndarray
    starts: np.ndarray


class FastForward:
    """Replaces a run of step-by-step events by one, with results identical bit for bit.

    Right after a ``complete()``, ``run`` asks for a `DecodeStretch` of at most ``max_stretch``
    steps, prices its steps (``cost.step_times`` / ``cpu_times`` / ``wall_times`` on arithmetic
    feature columns, one ``noise`` factor per step in the same order as stepping would draw
    them), keeps the steps that start strictly before the next arrival (``one_past``: and the
    first one after it), and applies them to the scheduler and the step log when 2 or more are
    kept. Start times accumulate exactly as SimPy's clock would (``now + d``). ``check`` also
    compares the arithmetic columns with the scheduler's own features and runs
    ``check_invariants()`` after each stretch. The steps' features follow ``plan``.
    """

    def __init__(self, sched: StretchScheduler, cost: CostModel, steps: StepLog, index: int,
                 noise: StepNoise | None, max_stretch: int, check: bool, plan: GraphPlan) -> None:
        self.sched, self.cost, self.steps, self.index, self.plan = sched, cost, steps, index, plan
        self.noise, self.max_stretch, self.check = noise, max_stretch, check
        self.num_stretches = 0
        self.stretch_steps = 0

    def run(self, now: float, t_next: float, one_past: bool) -> StretchRun | None:
        """Apply a stretch of 2+ steps starting at ``now`` if one fits before ``t_next``.

        Step times are evaluated in growing chunks (32, 128, 512, ... steps) until a step would
        start at or after ``t_next``, so a stretch cut short by an arrival costs little.
        """
        cost, noise = self.cost, self.noise
        st = DecodeStretch.find(self.sched, self.max_stretch)
        if st is None or st.k < 2:
            return None
        k = st.k
        f1, f2 = st.features(2, self.plan)
        s = now
        n = 0  # steps kept so far
        parts: list[_Part] = []
        chunk = 32
        while n < k:
            m = min(chunk, k - n)
            cols = FeatureColumns.arithmetic(f1, f2, n, m)
            gpu = cost.step_times(cols)
            if noise is not None:
                gpu = gpu * noise.peek(n + m)[n:]
            cpu = cost.cpu_times(cols)
            wall = cost.wall_times(gpu, cpu)
            ends = np.add.accumulate(np.concatenate(([s], wall)))  # sequential, like SimPy's clock
            # a step joins only if it starts strictly before the next arrival (step 0 starts
            # now, and every arrival due now has been delivered, so step 0 always does)
            fit = m if math.isinf(t_next) else int(np.searchsorted(ends[:m], t_next, "left"))
            cut = fit < m
            if one_past and cut:
                fit += 1
            if fit:
                parts.append(_Part(cols, gpu[:fit], cpu[:fit], wall[:fit], ends[:fit]))
                n += fit
                s = float(ends[fit])
            if cut:
                break
            chunk *= 4
        if n < 2:
            return None
        if noise is not None:
            noise.skip(n)
        starts = np.concatenate([p.starts for p in parts])
        wall = np.concatenate([p.wall for p in parts])
        if self.check:
            self._check_columns(st, parts, n, self.plan)
        sc = st.apply(starts + wall)
        self._log(sc, parts, starts)
        if self.check:
            self.sched.check_invariants()
        self.num_stretches += 1
        self.stretch_steps += n
        return StretchRun(s, float(starts[-1]))

    def _log(self, sc: StretchColumns, parts: list[_Part], starts: np.ndarray) -> None:
        """Log a stretch's rows column-wise. Within a stretch nothing arrives, is admitted,
        finishes or is preempted, so queue lengths and preemptions are constant and step ids
        count up by one; page counts come per step from the stretch."""
        cols: dict[str, Any] = {
            "replica": self.index, "start": starts,
            "duration": np.concatenate([p.gpu for p in parts]),
            "cpu_s": np.concatenate([p.cpu for p in parts]),
            "step": np.arange(sc.first_step, sc.first_step + sc.k, dtype=np.int64),
            "num_waiting": sc.num_waiting, "num_running": sc.num_running,
            "cached_pages": sc.cached_pages, "num_preempted": 0,
            "free_pages": sc.free_pages, "used_pages": sc.used_pages,
        }
        for name in BatchFeatures.names():
            vals = [p.cols.column(name) for p in parts]
            # one float in the first part: the same float in every part; else arrays, except a
            # `FIRST_STEP_ONLY` field, constant after the first part
            cols[name] = vals[0] if isinstance(vals[0], float) else \
                np.concatenate([v[: len(p.wall)] if isinstance(v, np.ndarray) else np.full(len(p.wall), v)
                                for v, p in zip(vals, parts)])
        self.steps.add_block(cols, sc.k)

    @staticmethod
    def _check_columns(st: DecodeStretch, parts: list[_Part], n: int, plan: GraphPlan) -> None:
        """The arithmetic feature columns equal the scheduler's own features."""
        ref = FeatureColumns(st.features(n, plan))
        for name in BatchFeatures.names():
            mine = np.concatenate([np.broadcast_to(p.cols.column(name), (p.cols.size,))[: len(p.wall)]
                                   for p in parts])
            assert np.array_equal(mine, ref.column(name)), f"stretch feature {name} differs"
