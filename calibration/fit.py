"""`fit_calibration`: step records (a steps.parquet frame) -> a `Calibration`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from twinserve.core.errors import UserError
from twinserve.simulator.cost.calibration import (
    Calibration, CpuFit, DecodeLines, LinearFit, Provenance, Residuals, SizeTable, check_terms,
)
from twinserve.calibration.clock import drift_corrected
from twinserve.calibration.host_fit import fit_host, spec_phase_rows
from twinserve.calibration.linear import (
    FOLDS, REGIME_NAMES, fit_linear, fit_values, fold_ids, mape, nnls_rows, out_of_fold, regime_of,
    profile_workload, term_matrix, token_graph_split, with_derived_features,
)
from twinserve.calibration.timeline import coupled_span, detect_sync, has_timeline, timeline_frame

# A mixed step replayed as a whole-step graph with wide query tiles (`core.graph_plan.wide_tiles_of`)
# computes a tile of rows over each decode's context: its decode context gets a term of its own.
# An attention kernel over sequences of unequal context runs at least as long as its longest
# sequence's work takes (the last tiles over the longest KV): prefill and mixed steps get
# ``max_ctx`` beside the sums. A step that runs with no CUDA graph at all (``eager_step``: above
# the token graphs' largest size) runs other kernels (unfused, FlashInfer's plan without graph
# mode), one launch gap after another: its own constant, per-sequence and attention terms.
EAGER_TERMS: tuple[str, ...] = ("eager_step", "eager_step*num_seqs", "eager_step*prefill_attn")
EAGER_DECODE_TERM = "eager_step*decode_ctx"  # mixed steps: the eager attention over the decodes
# A prefill step that runs the pieces (``piece_step``: a graph per piece, the attention eager
# between them) waits at each of its layers' boundaries for the host's next call: a constant of
# its own (prefill only; in mixed steps it did not lower the held-out error); and its attention,
# planned outside a graph, lasts as its longest sequence's tiles do at a rate of its own
# (`PIECE_PREFILL_CTX_TERM`: long single prompts, which a whole-step graph never runs).
PIECE_PREFILL_TERM = "piece_step"
PIECE_PREFILL_CTX_TERM = "piece_step*max_ctx"
# A mixed step whose attention is planned outside a graph (it runs the pieces or no graph) gives
# every decode FlashInfer's query tile of 16, 64 or 128 rows (``attn_tile``, `core.graph_plan.attn_tile_of`),
# and a decode computes its whole tile over its context: its context costs more in 64- and more
# again in 128-row tiles (hinges at 16 and 64, so that the 128-row cost is at least the 64-row one).
TILE_TERMS: tuple[str, ...] = ("attn_tile>16*decode_ctx", "attn_tile>64*decode_ctx")
# A decode step whose longest context is short runs faster, up to 128 tokens: on an H100,
# SmolLM2-135M's batch-1 decode graph took 0.90 ms at 30 tokens, 0.96 ms at 120 and 1.01 ms
# from 128 on (a calibration profile's replay, 2026-12-07).
SHORT_CTX_TERM = "max_ctx<128"
DEFAULT_TERMS: Mapping[str, Sequence[str]] = {
    "decode": ("1", "num_seqs", "decode_ctx", "padded_decodes", SHORT_CTX_TERM),
    "prefill": ("1", "num_seqs", "padded_tokens", "prefill_attn", "prefill_ctx", "max_ctx",
                *EAGER_TERMS, PIECE_PREFILL_TERM, PIECE_PREFILL_CTX_TERM),
    "mixed": ("1", "num_seqs", "padded_tokens", "prefill_attn", "prefill_ctx", "decode_ctx",
              "wide_tiles*decode_ctx", "max_ctx", *EAGER_TERMS, EAGER_DECODE_TERM, *TILE_TERMS),
}
DEFAULT_CPU_TERMS: Sequence[str] = ("1", "num_seqs", "new_tokens")
# How the default terms model the dense layers' time against their rows (``padded_tokens``) in
# the prefill and mixed fits, by name (``fit_calibration(dense=...)``):
# - "hinge": a line plus at most one hinge, its knot chosen inside each fold from
#   `HINGE_KNOTS` (below the knot the GEMMs are bound by weight reads, above it by compute;
#   `_choose_hinge`);
# - "curve": a piecewise-linear curve, caps below and hinges above fixed knots (`DENSE_CURVE`),
#   their coefficients non-negative like the others', so the slope may fall with size (small
#   steps, bound by kernel latency) and rise again (large ones, bound by compute).
DENSE_MODELS = ("hinge", "curve")
HINGE_FEATURE = "padded_tokens"
HINGE_KNOTS: tuple[int, ...] = (256, 512, 1024, 2048)
DENSE_CAPS: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048)
DENSE_HINGES: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096)
DENSE_CURVE: tuple[str, ...] = (*(f"{HINGE_FEATURE}<{k}" for k in DENSE_CAPS),
                                *(f"{HINGE_FEATURE}>{k}" for k in DENSE_HINGES))
# Decode waves (`calibration.wave_padded`): the decode fit's attention terms may read whole
# waves of k sequences, k chosen by cross-validation (`_choose_wave`) on a coarse grid of sizes
# and then around the best one; none when no size lowers the held-out error by WAVE_MIN_GAIN.
WAVE_TERMS: tuple[str, ...] = ("decode_ctx", "decode_unique_ctx")
WAVE_COARSE: tuple[int, ...] = tuple(range(16, 257, 8))
WAVE_FINE_STEP = 2
WAVE_MIN_GAIN = 0.05
SCALE_RANGE = (0.5, 2.0)  # the decode fit's factor per graph batch size stays within these
SCALE_MIN_SPREAD = 0.05  # a size's rows must vary by this share of their mean fit to get one
WAVE_FOLD_SEED = 0  # the choice's own folds: the fit's random stream stays as without waves
# The wave size is chosen on folds that each hold out one workload of the profile (its replays
# at every rate; the step grid is one more), where the profile says which: consecutive decode
# steps of one replay are near copies of each other, so random folds score a size on steps its
# fit has all but seen (`wave_folds`). At least this many groups, else random folds.
WAVE_MIN_GROUPS = 3
# The term added for profiles whose decodes share KV pages (`shares_kv`), and how many of the
# steps with decodes must share some for it to be fitted.
SHARED_TERM = "decode_unique_ctx"
SHARED_MIN_SHARE = 0.02
# An eager step in a slow-host episode is still fitted when its span exceeds this many times
# its launch (the device, not the host, set its pace).
DEVICE_BOUND_RATIO = 2.0
# On a host device (the CPU engine: no accelerator, the forward runs on the engine's thread) a
# step whose wall span exceeds this many times the thread's CPU time over its launch
# (``launch_cpu_s``) had the thread descheduled for part of it (a busy neighbour, the OS): its
# span measures the machine, not the step, and it is left out of the fits and errors
# (`descheduled_steps`). Undisturbed CPU steps measure 0.93-1.0 (the launch's CPU time also covers
# the step's host work around the forward).
DESCHEDULED_RATIO = 1.2
# How long the device of a step that is not one graph replay (eager, or the pieces) runs past
# its launch at the least: ``tail`` = a + b * num_seqs (the work left after the host's last
# launch call grows with the step's sequences), (a, b) chosen on these grids for the lowest span
# error of those steps (`_fit_tail`).
TAIL_TERMS: tuple[str, ...] = ("1", "num_seqs")
TAIL_GRID_S: tuple[float, ...] = tuple(round(i * 5e-5, 9) for i in range(21))           # 0 .. 1 ms
TAIL_GRID_PER_SEQ_S: tuple[float, ...] = tuple(round(i * 5e-7, 10) for i in range(41))  # 0 .. 20 us
RESIDUAL_LEVELS: Sequence[float] = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8,
                                    0.9, 0.95, 0.98, 0.99, 1.0)


def shares_kv(steps: pd.DataFrame, min_share: float = SHARED_MIN_SHARE) -> bool:
    """Whether at least ``min_share`` of the steps with decodes read some KV page twice."""
    d = steps["num_decodes"].to_numpy() > 0
    if not d.any():
        return False
    shared = (steps["decode_unique_ctx"] < steps["decode_ctx"]).to_numpy()[d]
    return bool(shared.mean() >= min_share)


def fit_calibration(
    steps: pd.DataFrame,
    provenance: Provenance,
    terms: Mapping[str, Sequence[str]] | None = None,
    cpu_terms: Sequence[str] = DEFAULT_CPU_TERMS,
    overlap: bool = True,
    seed: int = 0,
    min_rows: int = 10,
    bucket_offsets: bool = True,
    bucket_scales: bool = True,
    episodes: bool = True,
    dense: str = "hinge",
    host_device: bool = False,
) -> Calibration:
    """Fit one linear model per regime to the device time of ``steps`` (one row per step with the
    ``BatchFeatures`` columns, as ``StepRecord.as_row`` writes them, and ``duration``).

    Coefficients are non-negative least squares on relative error (rows weighted by 1/duration)
    over all of a regime's usable rows; ``mape`` is the 5-fold cross-validated error (`linear`
    module), of the device span when the rows carry the engine's timeline (`span_error`). A
    regime with fewer than ``min_rows`` rows is skipped; "decode" and "prefill" must both be
    present. Residual quantiles are of measured / predicted. A non-zero ``cpu_s`` column fits
    the plain host-time model. ``bucket_offsets``: the decode fit also gets one additive offset
    per CUDA-graph batch size, and with ``bucket_scales`` one factor (`_fit_with_bucket_lines`,
    stored as ``decode_offsets`` and ``decode_scales``). The device times are first moved onto
    the host's clock (`clock.drift_corrected`). With the engine's timeline (and
    ``overlap``), device work is read off it and the host parts are fitted first
    (`host_fit.fit_host`); with ``episodes``, eager steps it finds in slow-host episodes are
    left out of the device fits and errors (their spans may be paced by the slow host), unless
    their span exceeds ``DEVICE_BOUND_RATIO`` times their launch. Without explicit ``terms``,
    the prefill and mixed fits model the dense layers by ``dense`` (`DENSE_MODELS`: "hinge", a
    hinge on ``padded_tokens`` chosen inside each fold, `_choose_hinge`; "curve", the
    piecewise-linear `DENSE_CURVE`) and give steps with no CUDA graph (``eager_step``) terms of
    their own (`EAGER_TERMS`, `EAGER_DECODE_TERM`), and the decode and mixed fits get
    ``decode_unique_ctx`` beside ``decode_ctx`` when the profile has steps whose decodes share
    KV pages (`shares_kv`): a shared page costs its first read at ``decode_ctx +
    decode_unique_ctx`` coefficients, every further read at ``decode_ctx``'s; and the decode fit
    reads those terms in decode waves of a size chosen inside each fold (`_choose_wave`;
    `calibration.wave_padded`) when one lowers the held-out error enough. The file records
    where the profile's prefill and mixed steps went from token graphs to eager
    (`linear.token_graph_split`), so that a simulation with another cap can be told. With
    ``host_device`` (steps of the CPU engine), steps whose thread was descheduled
    (`descheduled_steps`) are left out of the device fits and errors, unless a regime would keep
    fewer than ``min_rows``: then all of its steps are fitted.
    """
    if dense not in DENSE_MODELS:
        raise ValueError(f"dense model {dense!r}: one of {DENSE_MODELS}")
    defaults = terms is None
    hinges = defaults and dense == "hinge"
    steps = with_derived_features(drift_corrected(steps)[0])
    terms = dict(DEFAULT_TERMS if terms is None else terms)
    if defaults and dense == "curve":
        terms = {k: (*v, *DENSE_CURVE) if k != "decode" else v for k, v in terms.items()}
    if defaults and shares_kv(steps):
        terms = {k: (*v, SHARED_TERM) if "decode_ctx" in v else v for k, v in terms.items()}
    for t in [*terms.values(), cpu_terms]:
        check_terms(t)
    rng = np.random.default_rng(seed)
    regime = regime_of(steps).to_numpy()
    tl = timeline_frame(steps) if overlap and has_timeline(steps) else None
    host = None
    normal = np.ones(len(steps), dtype=bool)  # rows outside slow-host episodes (eager ones)
    if tl is not None:  # device work per step, read from the engine's timeline
        y_all = tl["device_s"].to_numpy(np.float64)
        sync = (detect_sync(steps, tl, graph=True), detect_sync(steps, tl, graph=False))
        hres = fit_host(steps, rng, tl=tl, sync=sync, episodes=episodes)
        # eager spans in a slow-host episode may be paced by the host: left out; a graph step's
        # device work (after its launch) loses only the host's last few launch calls: kept;
        # so is a span over DEVICE_BOUND_RATIO times its whole launch (long prefills): the host,
        # slow or not, cannot have set its pace
        launch = steps["launch_s"].to_numpy(np.float64)
        long = steps["duration"].to_numpy(np.float64) > DEVICE_BOUND_RATIO * launch
        host, normal = hres.fit, ~(hres.slow.to_numpy(bool) & ~tl["graph"].to_numpy(bool) & ~long)
        usable = tl["device_ok"].to_numpy(bool) & np.isfinite(y_all) & (y_all > 0) & normal & ~spec_phase_rows(steps)
        if host is not None:
            host.sync_graph, host.sync_eager = sync
    else:
        y_all = steps["duration"].to_numpy(dtype=np.float64)
        usable = ~descheduled_steps(steps) if host_device else np.ones(len(steps), dtype=bool)
    models: dict[str, tuple[np.ndarray, _RegimeModel, _Params, np.ndarray, np.ndarray, np.ndarray]] = {}
    for name, rterms in terms.items():
        sel = regime == name
        if sel.sum() < min_rows:
            continue
        rows = sel & usable
        y = y_all
        if rows.sum() < min_rows:  # e.g. every step host-bound: the span is the best bound
            rows, y = sel & normal, steps["duration"].to_numpy(np.float64)
        model = _RegimeModel(steps, y, rterms, rng, offsets=name == "decode" and bucket_offsets
                             and "padded_decodes" in steps, hinge=hinges and name != "decode",
                             wave=defaults and name == "decode", scales=bucket_scales)
        final = model.fit(rows)
        pred = model.predict(final)
        # out of fold for the fitted rows; the rest of the regime's rows were never fitted
        held = pred
        if rows.sum() >= FOLDS * (len(final.terms) + 1):
            oof = out_of_fold(lambda tr: model.predict(model.fit(tr)), fold_ids(len(steps), rng, rows=rows))
            held = np.where(rows, oof, pred)
        models[name] = (sel, model, final, pred, held, rows)
    tail = np.zeros(len(steps))
    if tl is not None:  # the device's work past the launch, on the fitted device work
        device = np.zeros(len(steps))
        for sel, _, _, pred, _, _ in models.values():
            device[sel] = pred[sel]
        tail_fit = _fit_tail(steps, tl, device)
        tail = fit_values(tail_fit, steps)
        if host is not None:
            host.tail = tail_fit
    fits: dict[str, LinearFit] = {}
    offsets: dict[int, float] = {}
    scales: dict[int, float] = {}
    ratios: list[np.ndarray] = []
    for name, (sel, model, final, pred, held, rows) in models.items():
        y = model.y
        if tl is not None:
            err, n_test = span_error(steps, tl, sel & normal, held, tail)
        else:
            err, n_test = mape(held[rows], y[rows]), int(rows.sum())
        fits[name] = LinearFit(list(final.terms), [float(c) for c in final.coef], err, int(rows.sum()), n_test)
        if final.offsets or final.scales:
            offsets, scales = final.offsets, final.scales
        ratios.append(y[rows] / np.maximum(pred[rows], 1e-12))
    missing = [r for r in ("decode", "prefill") if r not in fits]
    if missing:
        raise UserError(f"too few step records (< {min_rows}) for regime(s) {missing}: profile longer "
                        "(--budget-s) or with more cases (--max-cases)")
    if "cpu_s" in steps and float(steps["cpu_s"].abs().sum()) > 0:
        c = steps["cpu_s"].to_numpy(dtype=np.float64)
        ccoef, cmape, cn, cnt = fit_linear(steps, c, cpu_terms, rng, relative=False)
        cpu = CpuFit(list(cpu_terms), [float(v) for v in ccoef], cmape, cn, cnt, overlap=overlap)
    else:
        cpu = CpuFit(["1"], [0.0], None, 0, 0, overlap=overlap)
    r = np.concatenate(ratios)
    levels = list(RESIDUAL_LEVELS)
    residuals = Residuals(levels, [float(v) for v in np.quantile(r, levels)])
    return Calibration(provenance=provenance, regimes=fits, cpu=cpu, residuals=residuals, host=host,
                       decode_offsets={str(k): v for k, v in offsets.items()},
                       decode_scales={str(k): v for k, v in scales.items()},
                       token_graphs=token_graph_split(steps))


def descheduled_steps(steps: pd.DataFrame) -> np.ndarray:
    """Per row of a host device's steps: whether its span exceeds `DESCHEDULED_RATIO` times the
    engine thread's CPU time over its launch (``launch_cpu_s``), i.e. the thread was off the CPU
    for part of the step. All False without that column; a row without a value is kept."""
    if "launch_cpu_s" not in steps:
        return np.zeros(len(steps), dtype=bool)
    cpu = steps["launch_cpu_s"].to_numpy(np.float64)
    return (cpu > 0) & (steps["duration"].to_numpy(np.float64) > DESCHEDULED_RATIO * cpu)


@dataclass(slots=True)
class _Params:
    """One fitted regime model: its terms (maybe with a hinge or waves), coefficients, and the
    decode fit's graph-size offsets and factors."""

    terms: list[str]
    coef: np.ndarray
    offsets: dict[int, float]
    scales: dict[int, float] = field(default_factory=dict)


class _RegimeModel:
    """Fits one regime's device model on a row mask of ``steps`` and predicts every row; the
    same procedure serves each cross-validation fold and the final fit (hinge or wave choice
    and graph-size offsets and factors included), so the error measures the whole procedure."""

    def __init__(self, steps: pd.DataFrame, y: np.ndarray, terms: Sequence[str],
                 rng: np.random.Generator, offsets: bool, hinge: bool, wave: bool = False,
                 scales: bool = False) -> None:
        self.steps, self.y, self.terms, self.rng = steps, y, list(terms), rng
        self.offsets, self.hinge, self.wave, self.scales = offsets, hinge, wave, scales
        self._X: dict[tuple[str, ...], np.ndarray] = {}

    def matrix(self, terms: Sequence[str]) -> np.ndarray:
        key = tuple(terms)
        if key not in self._X:
            self._X[key] = term_matrix(self.steps, terms)
        return self._X[key]

    def fit(self, rows: np.ndarray) -> _Params:
        terms = (_choose_wave(self, rows) if self.wave else
                 _choose_hinge(self, rows) if self.hinge else self.terms)
        if self.offsets:
            coef, offsets, scales = _fit_with_bucket_lines(self.steps, self.y, rows, self.matrix(terms), self.scales)
            return _Params(terms, coef, offsets, scales)
        return _Params(terms, nnls_rows(self.matrix(terms), self.y, rows, relative=True), {})

    def predict(self, p: _Params) -> np.ndarray:
        g = self.matrix(p.terms) @ p.coef
        lines = DecodeLines(p.scales, p.offsets)
        if lines:
            g = lines(g, self.steps["padded_decodes"].to_numpy(np.int64))
        return g


def _choose_hinge(model: _RegimeModel, rows: np.ndarray, min_rows: int = 40) -> list[str]:
    """The model's terms plus the hinge ``padded_tokens>k`` whose knot (from ``HINGE_KNOTS``, or
    none) gives the lowest k-fold cross-validated MAPE on ``rows`` alone (so that an outer fold's
    held-out rows play no part in its choice). Fewer than ``min_rows`` rows: the terms as given."""
    if rows.sum() < min_rows:
        return list(model.terms)
    fold = fold_ids(len(rows), model.rng, rows=rows)
    y = model.y
    best, best_err = list(model.terms), np.inf
    for knot in (None, *HINGE_KNOTS):
        cand = list(model.terms) + ([] if knot is None else [f"{HINGE_FEATURE}>{knot}"])
        X = model.matrix(cand)
        oof = out_of_fold(lambda tr: X @ nnls_rows(X, y, tr, relative=True), fold)
        err = mape(oof[rows], y[rows])
        if err < best_err - 1e-12:
            best, best_err = cand, err
    return best


def with_wave(terms: Sequence[str], k: int | None) -> list[str]:
    """``terms`` with each of `WAVE_TERMS` read in waves of ``k`` decodes (none: as given)."""
    return [f"{t}@{k}" if k is not None and t in WAVE_TERMS else t for t in terms]


def wave_folds(steps: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """The folds the wave choice is scored on, one number per row (-1 outside ``rows``): one
    per workload of the profile (``workload`` of its ``replay`` rows; the ``grid`` phase, and
    rows with no workload, one more) when ``rows`` hold at least `WAVE_MIN_GROUPS` of them;
    else `fold_ids` of their own seed (`WAVE_FOLD_SEED`), so that the choice leaves the fit's
    random stream, and with it every other fold of the calibration, as it was without waves."""
    codes = pd.factorize(profile_workload(steps))[0]
    if len(np.unique(codes[rows])) >= WAVE_MIN_GROUPS:
        _, dense = np.unique(codes[rows], return_inverse=True)
        out = np.full(len(rows), -1, dtype=np.int64)
        out[rows] = dense
        return out
    return fold_ids(len(rows), np.random.default_rng(WAVE_FOLD_SEED), rows=rows)


def _choose_wave(model: _RegimeModel, rows: np.ndarray, min_rows: int = 40) -> list[str]:
    """The model's terms with its attention terms in waves of the size ``k`` that gives the
    lowest cross-validated MAPE on ``rows`` alone (folds of `wave_folds`: one workload held out
    at a time where the profile names them; plain NNLS; `WAVE_COARSE`, then every
    `WAVE_FINE_STEP` around the best), or as given unless ``k`` lowers it by `WAVE_MIN_GAIN`
    (relative): a profile whose decode batches never end a wave part-full cannot tell sizes apart.
    Fewer than ``min_rows`` rows, or no decode batch above the smallest size: as given."""
    n = model.steps["num_decodes"].to_numpy(np.float64)
    if rows.sum() < min_rows or not (n[rows] > min(WAVE_COARSE)).any():
        return list(model.terms)
    fold = wave_folds(model.steps, rows)
    y = model.y

    def err(k: int | None) -> float:
        X = model.matrix(with_wave(model.terms, k))
        oof = out_of_fold(lambda tr: X @ nnls_rows(X, y, tr, relative=True), fold)
        return mape(oof[rows], y[rows])

    errs = {k: err(k) for k in WAVE_COARSE}
    best = min(errs, key=errs.__getitem__)
    for k in range(best - 3 * WAVE_FINE_STEP, best + 3 * WAVE_FINE_STEP + 1, WAVE_FINE_STEP):
        if k >= 1 and k not in errs:
            errs[k] = err(k)
    best = min(errs, key=errs.__getitem__)
    return with_wave(model.terms, best) if errs[best] < (1.0 - WAVE_MIN_GAIN) * err(None) else list(model.terms)


def _fit_with_bucket_lines(steps: pd.DataFrame, y: np.ndarray, rows: np.ndarray, X: np.ndarray,
                           scales: bool = True, min_rows: int = 20, rounds: int = 8
                           ) -> tuple[np.ndarray, dict[int, float], dict[int, float]]:
    """The decode fit on ``rows`` with a line of its own per CUDA-graph batch size
    (``padded_decodes``) that has ``min_rows`` of those rows: the fit scaled by that size's
    factor plus its offset (each graph size runs its own kernels, so sizes do not sit on one
    line, nor grow alike with the context). A size's factor is the relative least-squares slope
    of its rows against the fit (within `SCALE_RANGE`; 1 where the fit varies by under
    `SCALE_MIN_SPREAD` across them, or without ``scales``), its offset the median residual
    after it; factors are anchored at their median and offsets at theirs, and the fit is redone
    on the rows so adjusted, ``rounds`` times. Returns (coef, {size: seconds}, {size: factor})."""
    pad = steps["padded_decodes"].to_numpy(np.int64)
    off, sc = np.zeros(len(steps)), np.ones(len(steps))
    offsets: dict[int, float] = {}
    factors: dict[int, float] = {}
    coef = np.zeros(X.shape[1])
    for _ in range(rounds):
        coef = nnls_rows(X, (y - off) / sc, rows, relative=True)
        g = X @ coef
        offsets, factors = {}, {}
        for b in np.unique(pad[rows]):
            sel = rows & (pad == b)
            if sel.sum() < min_rows:
                continue
            m = 1.0
            if scales and np.ptp(g[sel]) > SCALE_MIN_SPREAD * float(np.mean(g[sel])):
                w = 1.0 / np.maximum(y[sel], 1e-12)
                A = np.column_stack([np.ones(int(sel.sum())), g[sel]]) * w[:, None]
                m = float(np.clip(np.linalg.lstsq(A, y[sel] * w, rcond=None)[0][1], *SCALE_RANGE))
            factors[int(b)] = m
            offsets[int(b)] = float(np.median(y[sel] - m * g[sel]))
        if offsets:  # anchored at their medians, so that the line keeps the common part
            mid_m = float(np.median(list(factors.values())))
            factors = {b: v / mid_m for b, v in factors.items()}
            mid = float(np.median(list(offsets.values())))
            offsets = {b: v - mid for b, v in offsets.items()}
        off, sc = SizeTable(offsets, 0.0)(pad), SizeTable(factors, 1.0)(pad)
    return coef, offsets, {b: v for b, v in factors.items() if v != 1.0}


def span_error(steps: pd.DataFrame, tl: pd.DataFrame, rows: np.ndarray, device: np.ndarray,
               tail: np.ndarray) -> tuple[float | None, int]:
    """Error of the step's device span (``duration``, what the engine's events measure)
    predicted from per-row device work ``device`` (out of fold, for a held-out error), the
    per-row eager ``tail`` and the step's measured start and launch end
    (`timeline.coupled_span`), over ``rows``."""
    rows = rows & np.isfinite(steps["dev_start"].to_numpy(np.float64)) & \
        np.isfinite(steps["launch_end"].to_numpy(np.float64))
    if not rows.any():
        return None, 0
    df = steps.loc[rows]
    pred = coupled_span(device[rows], df, tl.loc[rows, "graph"].to_numpy(bool), tail[rows])
    return mape(pred, df["duration"].to_numpy(np.float64)), int(rows.sum())


def _fit_tail(steps: pd.DataFrame, tl: pd.DataFrame, device: np.ndarray) -> LinearFit:
    """The eager tail (`TAIL_TERMS`): on the steps that are not one graph replay, with a
    measured start and launch end, the (a, b) of `TAIL_GRID_S` x `TAIL_GRID_PER_SEQ_S` whose
    spans `coupled_span` (with the fitted ``device`` work) predict with the lowest error, slow
    host or not (the tail is how the launch paces the device: the host's state shows it most);
    ``mape`` is that error. No such step: a tail of 0."""
    rows = ~tl["graph"].to_numpy(bool) & np.isfinite(steps["dev_start"].to_numpy(np.float64)) & \
        np.isfinite(steps["launch_end"].to_numpy(np.float64)) & (device > 0)
    if not rows.any():
        return LinearFit(list(TAIL_TERMS), [0.0, 0.0])
    df = steps.loc[rows]
    d0 = df["dev_start"].to_numpy(np.float64)
    busy = d0 + device[rows]  # the device's own end
    after = df["launch_end"].to_numpy(np.float64)
    seqs = df["num_seqs"].to_numpy(np.float64)
    y = df["duration"].to_numpy(np.float64)
    b = np.asarray(TAIL_GRID_PER_SEQ_S)[:, None]
    best: tuple[float, float, float] | None = None
    for a in TAIL_GRID_S:
        span = np.maximum(busy, after + a + b * seqs) - d0  # every b at once
        err = np.mean(np.abs(span / y - 1.0), axis=1)
        i = int(np.argmin(err))
        if best is None or err[i] < best[2]:
            best = (a, float(b[i, 0]), float(err[i]))
    assert best is not None
    return LinearFit(list(TAIL_TERMS), [best[0], best[1]], best[2], int(rows.sum()), int(rows.sum()))


def predict_span(cal: Calibration, steps: pd.DataFrame) -> np.ndarray:
    """Each step's predicted device span (the engine's ``duration``): the regime's device fit,
    and, when ``cal`` has host fits and ``steps`` the engine's timeline, the launch coupling
    of `span_error` (measured start and launch end, device times drift-corrected)."""
    steps = with_derived_features(drift_corrected(steps)[0])
    reg = regime_of(steps).to_numpy()
    g = np.zeros(len(steps))
    for name in REGIME_NAMES:
        sel = reg == name
        if sel.any():
            fit = cal.regimes.get(name, cal.regimes["prefill"])
            g[sel] = fit_values(fit, steps.loc[sel])
    lines = cal.decode_lines()
    if lines:
        sel = reg == "decode"
        g[sel] = lines(g[sel], steps.loc[sel, "padded_decodes"].to_numpy())
    if cal.host is None or not has_timeline(steps):
        return g
    graph = timeline_frame(steps)["graph"].to_numpy(bool)
    tail = fit_values(cal.host.tail, steps)
    span = coupled_span(g, steps, graph, tail)
    return np.where(np.isfinite(span), span, g)
