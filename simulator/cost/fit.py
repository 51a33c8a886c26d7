"""`fit_calibration`: step records (a steps.parquet frame) -> a `Calibration`."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from twinserve.simulator.cost.calibration import (
    Calibration, CpuFit, HostFit, LinearFit, Provenance, Residuals, check_terms,
)
from twinserve.simulator.cost.nnls import nnls
from twinserve.simulator.cost.timeline import (
    coupled_span, detect_sync, has_timeline, launch_work, runs_of, timeline_frame,
)

DEFAULT_TERMS: Mapping[str, Sequence[str]] = {
    "decode": ("1", "num_seqs", "decode_ctx", "padded_decodes"),
    "prefill": ("1", "num_seqs", "new_tokens", "prefill_attn", "prefill_ctx"),
    "mixed": ("1", "num_seqs", "new_tokens", "prefill_attn", "prefill_ctx", "decode_ctx"),
}
DEFAULT_CPU_TERMS: Sequence[str] = ("1", "num_seqs", "new_tokens")
HOST_TERMS: Mapping[str, Sequence[str]] = {
    "sched": ("1", "num_seqs", "new_tokens"),
    "launch": ("1", "num_seqs", "new_tokens"),
    "complete": ("1", "num_seqs"),
    "loop": ("1", "num_seqs"),
}
# The engine's per-step timeline columns (`Engine` docstring) that `fit_host` needs.
TIMELINE_COLUMNS: tuple[str, ...] = ("iter_start", "sched_s", "launch_s", "launch_end", "tokens_at",
                                     "complete_s")
RESIDUAL_LEVELS: Sequence[float] = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8,
                                    0.9, 0.95, 0.98, 0.99, 1.0)


REGIME_NAMES: tuple[str, ...] = ("decode", "prefill", "mixed")


def regime_of(df: pd.DataFrame) -> pd.Series:
    """"decode" (no prefill chunk), "prefill" (no decode) or "mixed", per step row."""
    has_p = df["num_prefills"].to_numpy() > 0
    has_d = df["num_decodes"].to_numpy() > 0
    out = np.where(has_p & has_d, "mixed", np.where(has_p, "prefill", "decode"))
    return pd.Series(out, index=df.index)


def term_matrix(df: pd.DataFrame, terms: Sequence[str]) -> np.ndarray:
    cols = []
    for t in terms:
        if t == "1":
            cols.append(np.ones(len(df)))
            continue
        v = np.ones(len(df))
        for name in t.split("*"):
            v = v * df[name].to_numpy(dtype=np.float64)
        cols.append(v)
    return np.column_stack(cols) if cols else np.zeros((len(df), 0))


def _fit_linear(df: pd.DataFrame, y: np.ndarray, terms: Sequence[str], test: np.ndarray,
                relative: bool, trim: float = 0.0) -> tuple[np.ndarray, float, int, int]:
    """NNLS on the training rows (weights 1/y when ``relative``); MAPE on the held-out rows.
    ``trim`` > 0 refits without the training rows of the largest ``trim`` share of relative
    residuals (host times have rare long stalls that should not set the typical time)."""
    X = term_matrix(df, terms)
    if test.any() and (~test).sum() >= len(terms):
        train, held = ~test, test
    else:  # too few rows to hold any out: the error is in-sample
        train = held = np.ones(len(df), dtype=bool)
        test = np.zeros(len(df), dtype=bool)
    w = 1.0 / np.maximum(np.abs(y), 1e-12) if relative else np.ones_like(y)
    coef = nnls(X[train] * w[train, None], y[train] * w[train])
    if trim > 0 and train.sum() >= 2 * len(terms) + 10:
        r = np.abs(X @ coef - y) / np.maximum(np.abs(y), 1e-12)
        train = train & (r <= np.quantile(r[train], 1.0 - trim))
        coef = nnls(X[train] * w[train, None], y[train] * w[train])
    pred = X[held] @ coef
    mape = float(np.mean(np.abs(pred - y[held]) / np.maximum(np.abs(y[held]), 1e-12)))
    return coef, mape, int(train.sum()), int(test.sum())


def fit_calibration(
    steps: pd.DataFrame,
    provenance: Provenance,
    terms: Mapping[str, Sequence[str]] | None = None,
    cpu_terms: Sequence[str] = DEFAULT_CPU_TERMS,
    overlap: bool = True,
    holdout: float = 0.2,
    seed: int = 0,
    min_rows: int = 10,
    bucket_offsets: bool = True,
) -> Calibration:
    """Fit one linear model per regime to ``steps["duration"]`` (device seconds).

    ``steps`` has one row per step with the ``BatchFeatures`` columns (as written by
    ``StepRecord.as_row``) and ``duration``; a ``cpu_s`` column, when present and non-zero, fits the
    host-time model. Coefficients are non-negative least squares on relative error (rows weighted
    by 1/duration), fitted on a random ``1 - holdout`` share of each regime's rows; ``mape`` is
    measured on the rest. A regime with fewer than ``min_rows`` rows is skipped; "decode" and
    "prefill" must both be present. Residual quantiles are of measured / predicted over all rows.
    ``bucket_offsets``: the decode fit also gets one additive offset per CUDA-graph batch size
    (`_fit_with_bucket_offsets`, stored as ``decode_offsets``).
    """
    terms = dict(DEFAULT_TERMS if terms is None else terms)
    for t in [*terms.values(), cpu_terms]:
        check_terms(t)
    rng = np.random.default_rng(seed)
    regime = regime_of(steps).to_numpy()
    tl = timeline_frame(steps) if overlap and has_timeline(steps) else None
    if tl is not None:  # device work per step, read from the engine's timeline
        y_all = tl["device_s"].to_numpy(np.float64)
        usable = tl["device_ok"].to_numpy(bool) & np.isfinite(y_all) & (y_all > 0)
        sync = (detect_sync(steps, tl, graph=True), detect_sync(steps, tl, graph=False))
        eager_idle = ~tl["graph"].to_numpy(bool) & ~tl["device_ok"].to_numpy(bool)
        tails = tl["tail_s"].to_numpy(np.float64)[eager_idle]
        tails = tails[np.isfinite(tails)]
        tail = float(max(np.median(tails), 0.0)) if tails.size else 0.0
    else:
        y_all = steps["duration"].to_numpy(dtype=np.float64)
        usable = np.ones(len(steps), dtype=bool)
        sync, tail = (False, False), 0.0
    fits: dict[str, LinearFit] = {}
    offsets: dict[int, float] = {}
    ratios: list[np.ndarray] = []
    for name, rterms in terms.items():
        sel = regime == name
        if sel.sum() < min_rows:
            continue
        test = rng.random(len(steps)) < holdout
        rows = sel & usable
        y = y_all
        if rows.sum() < min_rows:  # e.g. every step host-bound: the span is the best bound
            rows, y = sel, steps["duration"].to_numpy(np.float64)
        off = np.zeros(len(steps))
        if name == "decode" and bucket_offsets and "padded_decodes" in steps:
            coef, offsets, off = _fit_with_bucket_offsets(steps, y, rows, test, rterms)
            held = rows & test
            mape = float(np.mean(np.abs(term_matrix(steps.loc[held], rterms) @ coef + off[held] - y[held])
                                 / np.maximum(y[held], 1e-12))) if held.any() else None
            n_train, n_test = int((rows & ~test).sum()), int(held.sum())
        else:
            coef, mape, n_train, n_test = _fit_linear(steps.loc[rows], y[rows], rterms, test[rows], relative=True)
        if tl is not None:
            mape, n_test = span_error(steps, tl, sel & test, rterms, coef, tail, off)
        fits[name] = LinearFit(list(rterms), [float(c) for c in coef], mape, n_train, n_test)
        pred = term_matrix(steps.loc[rows], rterms) @ coef + off[rows]
        ratios.append(y[rows] / np.maximum(pred, 1e-12))
    missing = [r for r in ("decode", "prefill") if r not in fits]
    if missing:
        raise ValueError(f"too few step records (< {min_rows}) for regime(s) {missing}")
    if "cpu_s" in steps and float(steps["cpu_s"].abs().sum()) > 0:
        c = steps["cpu_s"].to_numpy(dtype=np.float64)
        test = rng.random(len(steps)) < holdout
        ccoef, cmape, cn, cnt = _fit_linear(steps, c, cpu_terms, test, relative=False)
        cpu = CpuFit(list(cpu_terms), [float(v) for v in ccoef], cmape, cn, cnt, overlap=overlap)
    else:
        cpu = CpuFit(["1"], [0.0], None, 0, 0, overlap=overlap)
    r = np.concatenate(ratios)
    levels = list(RESIDUAL_LEVELS)
    residuals = Residuals(levels, [float(v) for v in np.quantile(r, levels)])
    host = None
    if tl is not None:
        host = fit_host(steps, rng, holdout, launch=launch_work(steps, tl, *sync))
        if host is not None:
            (host.sync_graph, host.sync_eager), host.tail = sync, LinearFit(["1"], [tail])
    return Calibration(provenance=provenance, regimes=fits, cpu=cpu, residuals=residuals, host=host,
                       decode_offsets={str(k): v for k, v in offsets.items()})


def _fit_with_bucket_offsets(steps: pd.DataFrame, y: np.ndarray, rows: np.ndarray, test: np.ndarray,
                             terms: Sequence[str], min_rows: int = 20, rounds: int = 8
                             ) -> tuple[np.ndarray, dict[int, float], np.ndarray]:
    """The decode fit plus one additive offset per CUDA-graph batch size (``padded_decodes``)
    with ``min_rows`` training rows: the median residual of that size (the offsets anchored at
    their own median), refitted ``rounds`` times (each graph size runs its own kernels, so small
    sizes do not sit on one line).
    Returns (coef, {size: seconds}, the offset of every row)."""
    pad = steps["padded_decodes"].to_numpy(np.int64)
    X = term_matrix(steps, terms)
    train = rows & ~test
    off = np.zeros(len(steps))
    offsets: dict[int, float] = {}
    coef = np.zeros(len(terms))
    for _ in range(rounds):
        coef, _, _, _ = _fit_linear(steps.loc[rows], (y - off)[rows], terms, test[rows], relative=True)
        resid = y - X @ coef
        offsets = {int(b): float(np.median(resid[train & (pad == b)])) for b in np.unique(pad[train])
                   if (train & (pad == b)).sum() >= min_rows}
        if offsets:  # anchored at their median, so that the line keeps the common part
            mid = float(np.median(list(offsets.values())))
            offsets = {b: v - mid for b, v in offsets.items()}
        off = np.array([offsets.get(int(b), 0.0) for b in pad])
    return coef, offsets, off


def span_error(steps: pd.DataFrame, tl: pd.DataFrame, rows: np.ndarray, terms: Sequence[str],
               coef: np.ndarray, tail: float, offset: np.ndarray | None = None) -> tuple[float | None, int]:
    """Held-out error of the step's device span (``duration``, what the engine's events
    measure) predicted from the device fit and the step's measured start and launch end
    (`timeline.coupled_span`)."""
    rows = rows & np.isfinite(steps["dev_start"].to_numpy(np.float64)) & \
        np.isfinite(steps["launch_end"].to_numpy(np.float64))
    if not rows.any():
        return None, 0
    df = steps.loc[rows]
    g = term_matrix(df, terms) @ coef
    if offset is not None:
        g = g + offset[rows]
    pred = coupled_span(g, df, tl.loc[rows, "graph"].to_numpy(bool), tail)
    y = df["duration"].to_numpy(np.float64)
    return float(np.mean(np.abs(pred - y) / np.maximum(y, 1e-12))), int(rows.sum())


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


def fit_host(steps: pd.DataFrame, rng: np.random.Generator, holdout: float = 0.2,
             terms: Mapping[str, Sequence[str]] = HOST_TERMS,
             launch: pd.Series | None = None) -> HostFit | None:
    """Fit the overlap loop's host parts (`HostFit`) from the engine's timeline columns, or
    None when ``steps`` lacks them. Least squares on relative error with the 5 % worst rows
    dropped (rare host stalls would otherwise set the typical time); ``launch`` per regime, on
    ``launch`` when given (the host's own launch work, `timeline.launch_work`), else ``launch_s``.
    Loop overheads count only iterations followed at once by another (below 3x their median)."""
    if not all(c in steps for c in TIMELINE_COLUMNS):
        return None
    st = steps.dropna(subset=list(TIMELINE_COLUMNS))
    ly = (launch if launch is not None else steps["launch_s"]).reindex(st.index).to_numpy(np.float64)
    if len(st) < 10:
        return None
    regime = regime_of(st).to_numpy()

    def one(df: pd.DataFrame, y: np.ndarray, t: Sequence[str]) -> LinearFit:
        test = rng.random(len(df)) < holdout
        coef, mape, n, nt = _fit_linear(df, y, t, test, relative=True, trim=0.05)
        return LinearFit(list(t), [float(c) for c in coef], mape, n, nt)

    launch = {}
    for name in REGIME_NAMES:
        sel = regime == name
        if sel.sum() >= 5:
            ok = sel & np.isfinite(ly)
            launch[name] = one(st.loc[ok], ly[ok], terms["launch"])
    if "decode" not in launch or "prefill" not in launch:
        launch.setdefault("prefill", launch.get("mixed") or launch.get("decode"))
        launch.setdefault("decode", launch.get("mixed") or launch["prefill"])
        if launch["decode"] is None:
            return None
    o = loop_overhead(steps).reindex(st.index).to_numpy(np.float64)
    ok = np.isfinite(o) & (o >= 0)
    if ok.sum() >= 5:
        ok &= o <= 3.0 * np.median(o[ok]) + 1e-5
    loop = one(st.loc[ok], o[ok], terms["loop"]) if ok.sum() >= 5 else LinearFit(["1"], [0.0])
    return HostFit(sched=one(st, st["sched_s"].to_numpy(np.float64), terms["sched"]), launch=launch,
                   complete=one(st, st["complete_s"].to_numpy(np.float64), terms["complete"]), loop=loop)


def predict_span(cal: Calibration, steps: pd.DataFrame) -> np.ndarray:
    """Each step's predicted device span (the engine's ``duration``): the regime's device fit,
    and, when ``cal`` has host fits and ``steps`` the engine's timeline, the launch coupling
    of `span_error` (measured start and launch end)."""
    reg = regime_of(steps).to_numpy()
    g = np.zeros(len(steps))
    for name in REGIME_NAMES:
        sel = reg == name
        if sel.any():
            fit = cal.regimes.get(name, cal.regimes["prefill"])
            g[sel] = term_matrix(steps.loc[sel], fit.terms) @ np.asarray(fit.coef)
    if cal.decode_offsets:
        sel = reg == "decode"
        g[sel] += steps.loc[sel, "padded_decodes"].map(
            lambda b: cal.decode_offsets.get(str(int(b)), 0.0)).to_numpy(np.float64)
    if cal.host is None or not has_timeline(steps):
        return g
    graph = timeline_frame(steps)["graph"].to_numpy(bool)
    span = coupled_span(g, steps, graph, float(cal.host.tail.coef[0]))
    return np.where(np.isfinite(span), span, g)
