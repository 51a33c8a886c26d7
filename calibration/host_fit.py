"""`fit_host`: the engine's overlap-loop host parts (`HostFit`) from its per-step timeline.

Targets per step (the engine's timeline columns, `timeline` module): ``sched_s``, the launch
work (`timeline.launch_work`), ``complete_s`` and the loop overhead (`loop_overhead`). Two
things the plain per-part fits would get wrong are handled here:

- **Slow-host episodes** (`host_episodes`): stretches where all host work runs slower are found
  after a first fit and left out of the second; ``slow_share`` / ``slow_factor`` record them.
- **Where a graph launch blocks.** A CUDA-graph launch does ``pre`` of host work (its inputs),
  then waits for the previous step to end on the device, then does the rest (``launch``). With
  the device still busy, only the part after the wait shows; with the device idle, both do.
  Fitted as ``launch_end - mark = max(pre, backlog) + launch`` where ``backlog = prev_end -
  mark``: ``launch`` on steps whose backlog exceeds a whole idle launch, ``pre`` on the steps
  that found the device idle.
- **Waking from an idle wait.** The first step after the loop sat idle longer than
  ``WAKE_IDLE_S`` launches slower (a cold host); those launches are left out of the launch fits and
  their median excess launch work is ``wake_launch``; the median of the engine's ``wake_s``
  (arrival to the loop's start) is ``wake``, where the records have it.
- **Where a graph starts.** The device may start a graph once its replay is enqueued
  (``replay_end``); the launch's remaining host work (``post``: sampling, the token copy) runs
  beside it, fitted as ``launch_end - replay_end`` on the graph steps that record it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from twinserve.simulator.cost.calibration import WAKE_IDLE_S, HostFit, LinearFit, Residuals
from twinserve.calibration.host_episodes import slow_episodes, speed_factor, step_ratio
from twinserve.calibration.linear import (
    REGIME_NAMES, fit_linear, fit_values, regime_of, with_derived_features,
)
from twinserve.calibration.timeline import has_timeline, launch_work, runs_of, timeline_frame

HOST_TERMS: Mapping[str, Sequence[str]] = {
    "sched": ("1", "num_seqs", "new_tokens", "verify_step"),
    "launch": ("1", "num_seqs", "new_tokens", "eager_step", "piece_step", "verify_step", "first_decodes"),
    "complete": ("1", "num_seqs", "verify_step"),
    "loop": ("1", "num_seqs", "prompt_rows"),
    "pre": ("1", "num_seqs"),
    "post": ("1", "num_seqs", "prompt_rows", "verify_step"),
}
# The engine's per-step timeline columns (`Engine` docstring) that `fit_host` needs.
TIMELINE_COLUMNS: tuple[str, ...] = ("iter_start", "sched_s", "launch_s", "launch_end", "tokens_at",
                                     "complete_s")
HOST_TRIM = 0.05          # share of the worst rows (relative residual) left out of a host fit
IDLE_BACKLOG_S = 1e-5     # a graph launch "found the device idle" below this backlog
MIN_IDLE_ROWS = 20        # fewer idle graph launches than this: no pre part is fitted
EPISODE_ROUNDS = 3        # detect episodes, refit without them, detect again ...
MIN_WAKE_ROWS = 10        # fewer woken steps (or wake_s values) than this: that wake part is 0
MIN_SPEC_ROWS = 50        # fewer speculative-phase rows than this: no `HostFit.spec`
SPEC_PHASE = "spec"       # the profile's ``phase`` of an engine that speculates (engine/profile_spec.py)
VERIFY_REGIME = "verify"  # the host launch regime of steps with verify rows (`host_regime`)
HOST_REGIMES: tuple[str, ...] = (*REGIME_NAMES, VERIFY_REGIME)
# terms nonzero on few rows (a speculating engine's prompt chunks, first decodes), fitted by `_rare_terms`
RARE_TERMS: tuple[str, ...] = ("prompt_rows", "first_decodes")
# `HostFit.spread`'s quantile levels: every 5 % and the top tail, whose stalls carry weight
SPREAD_LEVELS: tuple[float, ...] = (*(float(x) for x in np.linspace(0.0, 0.95, 20)), 0.98, 0.99, 0.995, 0.999)
MIN_RARE_ROWS = 5


def loop_overhead(steps: pd.DataFrame) -> pd.Series:
    """Per step, the host time of its loop iteration outside the engine's own work: from the
    iteration's last engine event (its launch, or a step's tokens + ``complete``) to the next
    iteration's start. Rows are in execution order; a run ends where ``iter_start`` goes back
    (a clock reset). Idle waits and iterations that launched nothing show up as long gaps
    (the caller filters them)."""
    out = pd.Series(np.nan, index=steps.index)
    for _, g in steps.groupby(runs_of(steps), sort=False):
        g = g.sort_values("iter_start", kind="stable")
        it = g["iter_start"].to_numpy(np.float64)
        te = (g["tokens_at"] + g["complete_s"]).to_numpy(np.float64)
        le = g["launch_end"].to_numpy(np.float64)
        nxt = np.append(it[1:], np.nan)
        end = le.copy()
        own = te <= nxt
        end = np.where(own, np.maximum(end, te), end)
        prev_te = np.insert(te[:-1], 0, -np.inf)
        end = np.where((prev_te <= nxt) & (prev_te > it), np.maximum(end, prev_te), end)
        o = nxt - end
        out.loc[g.index] = o
    return out


def idle_before(steps: pd.DataFrame) -> pd.Series:
    """Per step, how long the loop sat idle before the iteration that launched it: from the
    previous step's tokens + ``complete`` to this ``iter_start``, on steps that found no decode
    running (prefill-only); NaN elsewhere and on a run's first step. Rows are in execution
    order; a run ends where ``iter_start`` goes back."""
    out = pd.Series(np.nan, index=steps.index)
    for _, g in steps.groupby(runs_of(steps), sort=False):
        g = g.sort_values("iter_start", kind="stable")
        te = (g["tokens_at"] + g["complete_s"]).shift(1)
        gap = g["iter_start"] - te
        out.loc[g.index] = gap.where(g["num_decodes"].eq(0) & (gap >= 0))
    return out


def _wake_fits(st: pd.DataFrame, y: _Targets, fit: HostFit, tl: pd.DataFrame | None,
               woke: np.ndarray, rows: np.ndarray) -> tuple[LinearFit, LinearFit, LinearFit]:
    """``(wake, wake_launch, wake_post)`` of `HostFit` over ``rows``: the median ``wake_s``, the
    median launch work of the ``woke`` steps beyond what ``fit`` gives them (launch end less the
    mark, against the regime's launch plus a waiting graph's ``pre``) and the median of their
    graph launches' work after the replay beyond ``fit.post``; each 0 with fewer than
    ``MIN_WAKE_ROWS``."""
    zero = LinearFit(["1"], [0.0])
    woke = woke & rows
    posts = woke & np.isfinite(y.woke_post) & (y.woke_post >= 0)
    wake_post = _median_excess(y.woke_post[posts], fit_values(fit.post, st.loc[posts]))
    wake = _median_wake(st, rows) or zero
    return wake, _wake_launch_fit(st, y, fit, tl, woke), wake_post


def _wake_sched_fit(st: pd.DataFrame, y: _Targets, fit: HostFit, woke: np.ndarray) -> LinearFit:
    """``wake_sched`` of `HostFit`: the median schedule time of the ``woke`` steps beyond what
    ``fit.sched`` gives them (0 with fewer than ``MIN_WAKE_ROWS``)."""
    rows = woke & np.isfinite(y.sched)
    return _median_excess(y.sched[rows], fit_values(fit.sched, st.loc[rows]))


def _median_excess(measured: np.ndarray, fitted: np.ndarray) -> LinearFit:
    """A constant fit of the median of ``measured - fitted`` (at least 0), or 0 with fewer than
    ``MIN_WAKE_ROWS`` values."""
    if len(measured) < MIN_WAKE_ROWS:
        return LinearFit(["1"], [0.0])
    return LinearFit(["1"], [max(float(np.median(measured - fitted)), 0.0)], None, len(measured), 0)


def _wake_launch_fit(st: pd.DataFrame, y: _Targets, fit: HostFit, tl: pd.DataFrame | None,
                     woke: np.ndarray) -> LinearFit:
    """``wake_launch`` of `_wake_fits`."""
    zero = LinearFit(["1"], [0.0])
    rows = woke & np.isfinite(st["launch_end"].to_numpy(np.float64))
    if rows.sum() < MIN_WAKE_ROWS:
        return zero
    sub = st.loc[rows]
    if tl is not None:
        t = tl.reindex(sub.index)
        measured = (sub["launch_end"] - t["mark"]).to_numpy(np.float64)
        graph = t["graph"].to_numpy(bool)
    else:
        measured = sub["launch_s"].to_numpy(np.float64)
        graph = np.zeros(len(sub), dtype=bool)
    pred = _launch_pred(fit, sub, y.regime[rows])
    if fit.sync_graph:
        pred = pred + np.where(graph, fit_values(fit.pre, sub), 0.0)
    ok = np.isfinite(measured - pred)
    return _median_excess(measured[ok], pred[ok])


def _median_wake(st: pd.DataFrame, rows: np.ndarray) -> LinearFit | None:
    """The median ``wake_s`` over ``rows`` (`HostFit.wake`), or None with fewer than
    ``MIN_WAKE_ROWS`` values."""
    if "wake_s" not in st:
        return None
    w = st["wake_s"].to_numpy(np.float64)[rows]
    w = w[np.isfinite(w) & (w >= 0)]
    if len(w) < MIN_WAKE_ROWS:
        return None
    return LinearFit(["1"], [float(np.median(w))], None, len(w), 0)


def _log_ratio(y: np.ndarray, pred: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        r = np.log(y / pred)
    return np.where(np.isfinite(r), r, np.nan)


class _Targets:
    """The per-row host targets of the steps ``st`` (rows with the timeline), in their order.

    ``launch``: the launch work (NaN where unknown); on graph steps with a fitted ``pre``, only
    the steps whose backlog exceeded a whole idle launch keep it (there it is the part after
    the wait), and ``idle`` marks the graph steps that found the device idle, whose
    ``whole`` (``launch_end - mark``) is pre + launch."""

    def __init__(self, steps: pd.DataFrame, st: pd.DataFrame, tl: pd.DataFrame | None,
                 sync: tuple[bool, bool]) -> None:
        self.regime = host_regime(st)
        if tl is None:
            self.launch = st["launch_s"].to_numpy(np.float64)
        else:
            self.launch = launch_work(steps, tl, *sync).reindex(st.index).to_numpy(np.float64)
        self.sched = st["sched_s"].to_numpy(np.float64)
        self.complete = st["complete_s"].to_numpy(np.float64)
        o = loop_overhead(steps).reindex(st.index).to_numpy(np.float64)
        ok = np.isfinite(o) & (o >= 0)
        self.loop_short = ok & (o <= WAKE_IDLE_S)  # no idle wait in it (`_rare_terms` reads these)
        if ok.sum() >= 5:
            ok &= o <= 3.0 * np.median(o[ok]) + 1e-5
        self.loop, self.loop_ok = o, ok
        self.idle = np.zeros(len(st), dtype=bool)
        self.whole = np.full(len(st), np.nan)
        self.post = np.full(len(st), np.nan)
        self.woke_post = np.full(len(st), np.nan)
        if "replay_end" in st:
            self.post = (st["launch_end"] - st["replay_end"]).to_numpy(np.float64)
        if tl is None or not sync[0]:
            return
        t = tl.reindex(st.index)
        graph = t["graph"].to_numpy(bool)
        backlog = np.maximum(0.0, (t["prev_end"] - t["mark"]).to_numpy(np.float64))
        whole = (st["launch_end"] - t["mark"]).to_numpy(np.float64)
        idle = graph & np.isfinite(whole) & (backlog <= IDLE_BACKLOG_S) & t["prev_end"].notna().to_numpy()
        if idle.sum() < MIN_IDLE_ROWS:
            return
        thr = float(np.median(whole[idle]))
        self.launch = np.where(graph & ~(backlog > thr), np.nan, self.launch)
        self.idle, self.whole = idle, whole

    def leave_out_launches(self, rows: np.ndarray) -> None:
        """Keep ``rows``' launches out of the launch, ``pre`` and ``post`` fits (the woken steps);
        their ``post`` moves to ``woke_post``."""
        self.launch = np.where(rows, np.nan, self.launch)
        self.woke_post = np.where(rows, self.post, np.nan)
        self.post = np.where(rows, np.nan, self.post)
        self.idle = self.idle & ~rows


@dataclass(slots=True)
class HostFitResult:
    """`fit_host`'s answer: the fit (None without the timeline) and, per row of the steps it
    was given, whether the row lies in a slow-host episode (which the device fits leave out
    too: a slow host also distorts the device spans read off the timeline)."""

    fit: HostFit | None
    slow: pd.Series


def fit_host(steps: pd.DataFrame, rng: np.random.Generator,
             terms: Mapping[str, Sequence[str]] = HOST_TERMS, tl: pd.DataFrame | None = None,
             sync: tuple[bool, bool] = (False, False), episodes: bool = True) -> HostFitResult:
    """Fit the overlap loop's host parts (`HostFit`) from the engine's timeline columns, or
    None when ``steps`` lacks them (errors: k-fold, `linear.fit_linear`). ``tl``: the `timeline.timeline_frame` of ``steps`` (launch
    work with the waits taken out, and the graph launch's ``pre`` part when graph launches
    block, ``sync[0]``); without it the launch fits read ``launch_s``. Each part is NNLS on
    relative error with the worst ``HOST_TRIM`` of rows left out (single stalls should not set
    the typical time); ``launch`` per regime (`host_regime`). Loop overheads count only
    iterations followed at once by another (below 3x their median; `_rare_terms` reads every
    loop without an idle wait). ``episodes``: refit without the slow-host episodes
    that the previous fit reveals, until they stop changing (``EPISODE_ROUNDS`` at most; module
    docstring); ``slow_factor`` is measured against the final fit."""
    steps = with_derived_features(steps)
    none = pd.Series(False, index=steps.index)
    if not all(c in steps for c in TIMELINE_COLUMNS):
        return HostFitResult(None, none)
    st = steps.dropna(subset=list(TIMELINE_COLUMNS))
    if len(st) < 10:
        return HostFitResult(None, none)
    y = _Targets(steps, st, tl, sync)
    woke = (idle_before(st) > WAKE_IDLE_S).to_numpy()
    y.leave_out_launches(woke)
    spec = spec_phase_rows(st)
    base = ~spec if (~spec).sum() >= 10 else np.ones(len(st), dtype=bool)
    slow = np.zeros(len(st), dtype=bool)
    fit = _fit_parts(st, y, base, rng, terms)
    if fit is None:
        return HostFitResult(fit, none)
    for _ in range(EPISODE_ROUNDS if episodes else 0):  # detect against the fit of the rows outside, refit
        found, factor = slow_episodes(st, np.where(base, _host_ratio(st, y, fit), np.nan))
        found &= base
        if found.all() or np.array_equal(found, slow):
            break
        slow = found
        fit = _fit_parts(st, y, base & ~slow, rng, terms) or fit
    fit.wake, fit.wake_launch, fit.wake_post = _wake_fits(st, y, fit, tl, woke, base)  # wake_idle_s: WAKE_IDLE_S
    fit.wake_sched = _wake_sched_fit(st, y, fit, woke & base)
    if slow.any():
        fit.slow_share = float(slow[base].mean())
        fit.slow_factor = float(np.mean(factor[slow]))
        fit.slow_episode_s = episode_seconds(st, slow)
    if spec.sum() >= MIN_SPEC_ROWS and base.sum() < len(st):
        sp = _fit_parts(st, y, spec, rng, terms)
        if sp is not None:
            sp = _levelled(sp, st, y, spec)
            own = {k: v for k, v in sp.launch.items() if k in ("decode", VERIFY_REGIME)}
            fit.spec = replace(fit, sched=sp.sched, launch={**fit.launch, **own}, complete=sp.complete,
                               loop=sp.loop, post=sp.post, slow_share=0.0, slow_factor=1.0,
                               slow_episode_s=0.0, wake=_median_wake(st, spec) or fit.wake,
                               wake_sched=_wake_sched_fit(st, y, sp, woke & spec), spec=None)
            fit.spec.spread = _spread(fit.spec, st, y, spec)  # against the launches it will scale
    if not slow.any():
        return HostFitResult(fit, none)
    return HostFitResult(fit, pd.Series(slow, index=st.index).reindex(steps.index, fill_value=False))


def spec_phase_rows(st: pd.DataFrame) -> np.ndarray:
    """The rows of the profile's speculative phase (``phase == "spec"``; none without the column)."""
    if "phase" not in st:
        return np.zeros(len(st), dtype=bool)
    return (st["phase"] == SPEC_PHASE).to_numpy()


def episode_seconds(st: pd.DataFrame, slow: np.ndarray) -> float:
    """Mean length in seconds of the maximal runs of consecutive ``slow`` rows (rows in
    execution order; a run of the engine ends where its clock restarts): from the first row's
    loop start to the last row's tokens (its launch end where the tokens are unknown)."""
    lengths: list[float] = []
    it = st["iter_start"].to_numpy(np.float64)
    end = st["tokens_at"].fillna(st["launch_end"]).to_numpy(np.float64)
    run = runs_of(st).to_numpy()
    i, n = 0, len(st)
    while i < n:
        if not slow[i]:
            i += 1
            continue
        j = i
        while j + 1 < n and slow[j + 1] and run[j + 1] == run[i]:
            j += 1
        lengths.append(max(float(end[j] - it[i]), 0.0))
        i = j + 1
    return float(np.mean(lengths)) if lengths else 0.0


def _host_ratio(st: pd.DataFrame, y: _Targets, fit: HostFit) -> np.ndarray:
    """Per step, the median over its host parts (sched, complete, launch) of log(measured /
    ``fit``), the input of the episode and host-speed windows."""
    return step_ratio([_log_ratio(y.sched, fit_values(fit.sched, st)),
                       _log_ratio(y.complete, fit_values(fit.complete, st)),
                       _log_ratio(y.launch, _launch_pred(fit, st, y.regime))])


def host_regime(st: pd.DataFrame) -> np.ndarray:
    """Per row, the launch regime of the host fits: ``verify`` for a step with verify rows (its
    launch scores every draft position), else the device regime (`linear.regime_of`)."""
    regime = regime_of(st).to_numpy().astype(object)
    if "verify_step" in st:
        regime[st["verify_step"].to_numpy(np.float64) > 0] = VERIFY_REGIME
    return regime


def _launch_pred(fit: HostFit, st: pd.DataFrame, regime: np.ndarray) -> np.ndarray:
    out = np.zeros(len(st))
    for name in HOST_REGIMES:
        sel = regime == name
        if sel.any():
            out[sel] = fit_values(fit.launch.get(name, fit.launch["prefill"]), st.loc[sel])
    return out


def _fit_parts(st: pd.DataFrame, y: _Targets, keep: np.ndarray, rng: np.random.Generator,
               terms: Mapping[str, Sequence[str]]) -> HostFit | None:
    """One fit of every host part on the rows ``keep``."""

    def one(rows: np.ndarray, target: np.ndarray, t: Sequence[str]) -> LinearFit:
        coef, mape, n, nt = fit_linear(st.loc[rows], target[rows], t, rng, relative=True, trim=HOST_TRIM)
        return LinearFit(list(t), [float(c) for c in coef], mape, n, nt)

    launch: dict[str, LinearFit | None] = {}
    for name in HOST_REGIMES:
        mine = (y.regime == name) & np.isfinite(y.launch)
        ok = keep & mine
        if ok.sum() < 5 and name != VERIFY_REGIME:  # the episodes took (nearly) all of a regime: its own rows beat another's
            ok = mine
        if ok.sum() >= 5:
            t = [x for x in terms["launch"] if x != "verify_step"] if name == VERIFY_REGIME else terms["launch"]
            launch[name] = _rare_terms(one(ok, y.launch, t), st, ok, y.launch)
    if "decode" not in launch or "prefill" not in launch:
        launch.setdefault("prefill", launch.get("mixed") or launch.get("decode"))
        launch.setdefault("decode", launch.get("mixed") or launch["prefill"])
        if launch["decode"] is None:
            return None
    pre = LinearFit(["1"], [0.0])
    idle = keep & y.idle
    if idle.sum() >= MIN_IDLE_ROWS:  # an idle graph launch is pre + the part after the wait
        rest = y.whole - fit_values(launch["decode"], st)
        pre = one(idle, rest, terms["pre"])
    post = LinearFit(["1"], [0.0])
    post_ok = keep & np.isfinite(y.post) & (y.post >= 0)
    if post_ok.sum() >= MIN_IDLE_ROWS:
        post = _rare_terms(one(post_ok, y.post, terms["post"]), st, post_ok, y.post)
    loop_ok = keep & y.loop_ok
    loop = _rare_terms(one(loop_ok, y.loop, terms["loop"]), st, keep & y.loop_short, y.loop) \
        if loop_ok.sum() >= 5 else LinearFit(["1"], [0.0])
    return HostFit(sched=one(keep, y.sched, terms["sched"]), launch=launch,  # type: ignore[arg-type]
                   complete=one(keep, y.complete, terms["complete"]), loop=loop, pre=pre, post=post)


def _level(fit: LinearFit, st: pd.DataFrame, rows: np.ndarray, target: np.ndarray) -> LinearFit:
    """``fit`` scaled so that over ``rows`` (finite targets, the top ``HOST_TRIM`` of measured /
    fitted left out as stalls) it sums to what was measured: the mean level of a host that
    switches between a fast and a slow state, where the relative fit follows the fast one."""
    pred = fit_values(fit, st)
    ok = rows & np.isfinite(target) & (pred > 0)
    if ok.sum() < MIN_RARE_ROWS:
        return fit
    ratio = target[ok] / pred[ok]
    keep = ratio <= np.quantile(ratio, 1.0 - HOST_TRIM)
    scale = float(target[ok][keep].sum() / pred[ok][keep].sum())
    return LinearFit(fit.terms, [c * scale for c in fit.coef], fit.mape, fit.n, fit.n_test)


def _levelled(fit: HostFit, st: pd.DataFrame, y: _Targets, rows: np.ndarray) -> HostFit:
    """The speculating engine's parts (`fit_host`) levelled to their phase's mean (`_level`):
    its profile phase is short, so no slow-host episodes are told apart in it and the fit
    carries none; its level includes them instead."""
    launch = {k: _level(v, st, rows & (y.regime == k), y.launch) for k, v in fit.launch.items()}
    return replace(fit, sched=_level(fit.sched, st, rows, y.sched), launch=launch,
                   complete=_level(fit.complete, st, rows, y.complete),
                   loop=_level(fit.loop, st, rows & y.loop_ok, y.loop),
                   post=_level(fit.post, st, rows & (y.post >= 0), y.post))


def _spread(fit: HostFit, st: pd.DataFrame, y: _Targets, rows: np.ndarray) -> Residuals | None:
    """Quantiles (`SPREAD_LEVELS`, finer in the top tail) of measured / fitted launch work over
    ``rows``: how far one step's host strays from ``fit`` (the speculating fit as the simulator
    uses it), stalls included (which `_level` leaves out, so the mean is a little over 1).
    Where the host is about as fast as the device, each engine step waits for the slower of
    the two, so a fit at the mean alone runs fast."""
    pred = _launch_pred(fit, st, y.regime)
    ok = rows & np.isfinite(y.launch) & (pred > 0)
    if ok.sum() < MIN_SPEC_ROWS:
        return None
    ratio = y.launch[ok] / pred[ok]
    return Residuals(list(SPREAD_LEVELS), [float(v) for v in np.quantile(ratio, SPREAD_LEVELS)])


def _rare_terms(fit: LinearFit, st: pd.DataFrame, rows: np.ndarray, target: np.ndarray) -> LinearFit:
    """``fit`` with each of its `RARE_TERMS` coefficients set from the rows where the term is
    nonzero: the median of their residual against the fit without the term, per unit of the
    term (at least 0). Such rows are too few for the trimmed fit, which drops them as outliers."""
    coef = list(fit.coef)
    for name in RARE_TERMS:
        if name not in fit.terms:
            continue
        i = fit.terms.index(name)
        sub = st.loc[rows]
        x = sub[name].to_numpy(np.float64)
        on = x > 0
        if on.sum() < MIN_RARE_ROWS:
            continue
        coef[i] = 0.0
        rest = fit_values(LinearFit(fit.terms, coef), sub)
        coef[i] = max(float(np.median((target[rows][on] - rest[on]) / x[on])), 0.0)
    return LinearFit(fit.terms, coef, fit.mape, fit.n, fit.n_test)


def host_speed_trace(steps: pd.DataFrame, fit: HostFit, window: int = 101) -> tuple[np.ndarray, np.ndarray]:
    """How fast the host of a recorded engine run was over time, against ``fit``: per step (in
    ``iter_start`` order), its loop iteration's start and the windowed factor measured / fitted
    of its host parts (`host_episodes.speed_factor` over ``window`` steps). A diagnostic: the
    simulator can replay it (`simulator.host_speed.HostSpeed`) to tell how much of its error a
    run's slow-host episodes explain. A run that speculated (draft tokens on some step) is
    measured against ``fit.spec`` where the fit has one."""
    if fit.spec is not None and steps.get("spec_num_draft_tokens", pd.Series(dtype=float)).fillna(0).gt(0).any():
        fit = fit.spec
    st = with_derived_features(steps).dropna(subset=list(TIMELINE_COLUMNS))
    st = st.sort_values("iter_start", kind="stable")
    if len(st) == 0:
        return np.zeros(0), np.zeros(0)
    tl = timeline_frame(st) if has_timeline(st) else None
    y = _Targets(st, st, tl, (fit.sync_graph, fit.sync_eager))
    factor = speed_factor(st, _host_ratio(st, y, fit), window)
    return st["iter_start"].to_numpy(np.float64), np.nan_to_num(factor, nan=1.0)
