"""Linear step-time fits on step records: regimes, term matrices, NNLS, k-fold errors.

Every fit here is fitted on all the rows it is given; its error is the k-fold cross-validated
one (each row predicted by a model fitted without the row's fold), so that the coefficients use
every profiled step and the error still measures steps the model did not see.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pandas as pd

from twinserve.core.batch import prompt_rows_of, verify_step_of
from twinserve.core.graph_plan import (HYBRID_FULL_MAX_SEQS, MAX_GRAPH_BS, MAX_RUNNING, TOKEN_GRAPH_MODES, attn_tile_of,
                                       piece_step_of)
from twinserve.simulator.cost.calibration import (WAVE_COUNT, LinearFit, TokenGraphSplit, factor_value,
                                                  term_factors)
from twinserve.calibration.nnls import nnls

REGIME_NAMES: tuple[str, ...] = ("decode", "prefill", "mixed")
FOLDS = 5


def regime_of(df: pd.DataFrame) -> pd.Series:
    """"decode" (no prefill chunk), "prefill" (no decode) or "mixed", per step row."""
    has_p = df["num_prefills"].to_numpy() > 0
    has_d = df["num_decodes"].to_numpy() > 0
    out = np.where(has_p & has_d, "mixed", np.where(has_p, "prefill", "decode"))
    return pd.Series(out, index=df.index)


def term_matrix(df: pd.DataFrame, terms: Sequence[str]) -> np.ndarray:
    """One column per term (`calibration.term_factors`: features, hinges, caps, waves, products)."""
    cols = []
    for t in terms:
        if t == "1":
            cols.append(np.ones(len(df)))
            continue
        v = np.ones(len(df))
        for name, knot, kind in term_factors(t):
            n = df[WAVE_COUNT].to_numpy(dtype=np.float64) if kind == "wave" else None
            v = v * factor_value(df[name].to_numpy(dtype=np.float64), knot, kind, np.maximum, n)
        cols.append(v)
    return np.column_stack(cols) if cols else np.zeros((len(df), 0))


def fit_values(fit: LinearFit, df: pd.DataFrame) -> np.ndarray:
    """A fitted model's value on every row of ``df``: its term matrix times its coefficients."""
    return term_matrix(df, fit.terms) @ np.asarray(fit.coef, dtype=np.float64)


def nnls_rows(X: np.ndarray, y: np.ndarray, train: np.ndarray, relative: bool, trim: float = 0.0) -> np.ndarray:
    """NNLS of ``y`` on ``X`` over the ``train`` rows (weights 1/y when ``relative``). ``trim`` >
    0 refits without the train rows of the largest ``trim`` share of relative residuals (host
    times have rare long stalls that should not set the typical time)."""
    w = 1.0 / np.maximum(np.abs(y), 1e-12) if relative else np.ones_like(y)
    coef = nnls(X[train] * w[train, None], y[train] * w[train])
    if trim > 0 and train.sum() >= 2 * X.shape[1] + 10:
        r = np.abs(X @ coef - y) / np.maximum(np.abs(y), 1e-12)
        train = train & (r <= np.quantile(r[train], 1.0 - trim))
        coef = nnls(X[train] * w[train, None], y[train] * w[train])
    return coef


def fold_ids(n: int, rng: np.random.Generator, folds: int = FOLDS, rows: np.ndarray | None = None) -> np.ndarray:
    """A fold number in ``0 .. folds-1`` per row, balanced and shuffled; with ``rows`` (a mask
    of length ``n``) only those rows get one, the others -1."""
    if rows is None:
        return rng.permutation(n) % folds
    out = np.full(n, -1, dtype=np.int64)
    out[rows] = rng.permutation(int(rows.sum())) % folds
    return out


def out_of_fold(fit_predict: Callable[[np.ndarray], np.ndarray], fold: np.ndarray) -> np.ndarray:
    """Each row's prediction by the model ``fit_predict(train_mask)`` (which returns a prediction
    for every row) fitted without the row's fold; rows of fold -1 are neither fitted on nor
    predicted (NaN). The train mask is every row of another fold."""
    oof = np.full(len(fold), np.nan)
    for k in np.unique(fold[fold >= 0]):
        held = fold == k
        oof[held] = fit_predict(~held & (fold >= 0))[held]
    return oof


def mape(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - y) / np.maximum(np.abs(y), 1e-12)))


def fit_linear(df: pd.DataFrame, y: np.ndarray, terms: Sequence[str], rng: np.random.Generator,
               relative: bool, trim: float = 0.0, folds: int = FOLDS) -> tuple[np.ndarray, float, int, int]:
    """(coef fitted on every row, k-fold MAPE, rows fitted, rows the MAPE is over). With fewer
    than ``folds * (len(terms) + 1)`` rows the error is in-sample (and 0 rows are counted as held
    out)."""
    X = term_matrix(df, terms)
    every = np.ones(len(df), dtype=bool)
    coef = nnls_rows(X, y, every, relative, trim)
    if len(df) < folds * (len(terms) + 1):
        return coef, mape(X @ coef, y), len(df), 0
    oof = out_of_fold(lambda tr: X @ nnls_rows(X, y, tr, relative, trim), fold_ids(len(df), rng, folds))
    return coef, mape(oof, y), len(df), len(df)


def _decode_graph_rows(steps: pd.DataFrame) -> pd.Series:
    """Decode-only steps with a padded graph batch: the decode-graph rule of older profiles."""
    return (steps["num_prefills"] == 0) & (steps["padded_decodes"] > 0)


def _token_graph_rows(steps: pd.DataFrame) -> pd.Series:
    """Steps that replayed token graphs (``graph_tokens`` > 0; none in profiles without it)."""
    if "graph_tokens" not in steps:
        return pd.Series(False, index=steps.index)
    return steps["graph_tokens"].fillna(0) > 0


def profile_workload(steps: pd.DataFrame) -> pd.Series:
    """Per row, the workload a profile replayed there (its ``workload`` column), or "" for the
    step grid (``phase == "grid"``) and rows without one; all "" without a ``workload`` column."""
    if "workload" not in steps.columns:
        return pd.Series("", index=steps.index)
    grid = steps["phase"].astype(str).eq("grid") if "phase" in steps.columns else pd.Series(False, index=steps.index)
    return steps["workload"].astype(object).where(steps["workload"].notna() & ~grid, "").astype(str)


def token_graph_split(steps: pd.DataFrame) -> TokenGraphSplit | None:
    """Where ``steps``' prefill and mixed steps went from token graphs to eager (by
    ``eager_step``; `with_derived_features` gives profiles without it one), or None when the
    profile has no such steps or no ``eager_step``."""
    if "eager_step" not in steps:
        return None
    chunk = (steps["num_prefills"] > 0).to_numpy()
    eager = chunk & (steps["eager_step"].to_numpy() > 0)
    graph = chunk & ~eager
    if not chunk.any():
        return None
    tokens = steps["new_tokens"].to_numpy()
    return TokenGraphSplit(int(tokens[graph].max()) if graph.any() else 0,
                           int(tokens[eager].min()) if eager.any() else None)


def graph_replays(steps: pd.DataFrame) -> pd.Series:
    """Which steps were one CUDA-graph replay: the ``graph_replay`` column, or for profiles
    without it a decode graph or a token-graph step whose replay the engine timed
    (``replay_end``)."""
    if "graph_replay" in steps:
        return steps["graph_replay"] > 0
    one = _decode_graph_rows(steps)
    if "replay_end" in steps:
        one = one | (_token_graph_rows(steps) & steps["replay_end"].notna())
    return one


def assume_token_graph_mode(steps: pd.DataFrame, mode: str) -> pd.DataFrame:
    """``steps`` with a ``graph_replay`` column by the rule of token-graph ``mode``
    (`core.graph_plan.replays_one_graph`), for a profile recorded without that column by an engine
    known to have run ``mode`` (built before ``hybrid_decode_heavy``); a recorded
    column is left as it is."""
    if "graph_replay" in steps:
        return steps
    if mode not in TOKEN_GRAPH_MODES:
        raise ValueError(f"unknown token graph mode {mode!r}; known: {TOKEN_GRAPH_MODES}")
    token = _token_graph_rows(steps)
    whole = {"full": token, "piecewise": token & False,
             "hybrid": token & (steps["num_seqs"] <= HYBRID_FULL_MAX_SEQS)}[mode]
    return steps.assign(graph_replay=((_decode_graph_rows(steps) & ~token) | whole).astype(np.int64))


def with_derived_features(steps: pd.DataFrame) -> pd.DataFrame:
    """``steps`` with the ``decode_unique_ctx``, ``padded_tokens``, ``eager_step``,
    ``graph_replay``, ``wide_tiles``, ``attn_tile``, ``verify_rows``, ``first_decodes`` and
    derived ``piece_step`` (`core.graph_plan.piece_step_of`), ``verify_step``
    (`core.batch.verify_step_of`) and ``prompt_rows`` (`core.batch.prompt_rows_of`) columns;
    profiles recorded before them get what held
    then (no KV sharing; dense rows = ``new_tokens``; every step eager but a decode graph, or a
    token-graph step where the engine's ``graph_tokens`` column records one; one replay:
    `graph_replays`; wide tiles: `core.graph_plan.wide_tiles_of` with the default ``max_graph_bs``
    and ``max_running``; no tile, 0: a profile does not record the model's GQA group,
    `with_attn_tile` adds the column from it; 1 verify row where a step had draft tokens; no first
    decodes)."""
    add = {}
    if "decode_unique_ctx" not in steps:
        add["decode_unique_ctx"] = steps["decode_ctx"]
    if "padded_tokens" not in steps:
        add["padded_tokens"] = steps["new_tokens"]
    if "eager_step" not in steps:  # the engine's graph_tokens says which steps took the pieces
        add["eager_step"] = (~(_decode_graph_rows(steps) | _token_graph_rows(steps))).astype(np.int64)
    replay = graph_replays(steps)
    if "graph_replay" not in steps:
        add["graph_replay"] = replay.astype(np.int64)
    if "wide_tiles" not in steps:  # profiles do not record max_running or max_graph_bs: the defaults
        decode_graph = _decode_graph_rows(steps) & (steps["num_decodes"] <= MAX_GRAPH_BS)
        padded = add["padded_tokens"] if "padded_tokens" in add else steps["padded_tokens"]
        add["wide_tiles"] = (replay & ~decode_graph & (padded > MAX_RUNNING)).astype(np.int64)
    if "attn_tile" not in steps:
        add["attn_tile"] = np.zeros(len(steps), dtype=np.int64)
    if "verify_rows" not in steps:  # recorded before the field: a step with draft tokens verified some
        drafted = steps["spec_num_draft_tokens"] if "spec_num_draft_tokens" in steps else 0
        add["verify_rows"] = (pd.Series(drafted, index=steps.index).fillna(0) > 0).astype(np.int64)
    if "first_decodes" not in steps:  # recorded before the field: unknown, none counted
        add["first_decodes"] = np.zeros(len(steps), dtype=np.int64)
    out = steps.assign(**add) if add else steps
    if "piece_step" not in out:  # derived, never recorded
        out = out.assign(piece_step=piece_step_of(out["graph_replay"], out["eager_step"]).astype(np.int64))
    if "verify_step" not in out:
        out = out.assign(verify_step=verify_step_of(out["verify_rows"]).astype(np.int64))
    if "prompt_rows" not in out:
        out = out.assign(prompt_rows=prompt_rows_of(out["num_prefills"], out["verify_rows"]).astype(np.int64))
    return out


def with_attn_tile(steps: pd.DataFrame, gqa_group: int) -> pd.DataFrame:
    """``steps`` with the ``attn_tile`` column the engine records (`core.graph_plan.attn_tile_of`),
    computed from its other columns for a model of ``gqa_group`` query heads per KV head on a
    rank, when it lacks one (steps recorded before the field); else ``steps`` unchanged."""
    if "attn_tile" in steps:
        return steps
    replay = with_derived_features(steps)["graph_replay"].to_numpy(np.int64)
    tile = attn_tile_of(replay, steps["num_decodes"].to_numpy(np.int64),
                        np.maximum(steps["num_seqs"].to_numpy(np.int64), 1),
                        steps["new_tokens"].to_numpy(np.int64), int(gqa_group))
    return steps.assign(attn_tile=np.asarray(tile, dtype=np.int64))
