"""Simulator-vs-engine error: pair runs that differ only in backend and compare their metrics."""

from __future__ import annotations

from typing import Sequence

import pandas as pd

SIM_BACKENDS = ("sim",)
PAIR_ON = ("model", "hardware", "scheduler", "memory", "cache", "workload", "rate")
METRICS = ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_e2el_ms",
           "output_throughput", "request_throughput")


def fidelity_table(df: pd.DataFrame, pair_on: Sequence[str] = PAIR_ON,
                   metrics: Sequence[str] = METRICS) -> pd.DataFrame:
    """One row per (simulator run, real run, metric) with equal ``pair_on`` values.

    Columns: the ``pair_on`` keys present, ``sim`` (sim run, with its cost model when known),
    ``real`` (the other backend's name), ``sim_path``, ``real_path``, ``metric``, ``sim_value``,
    ``real_value``, ``rel_err_pct`` = 100 * (sim - real) / real. Empty when no pair exists.
    """
    cols = ["sim", "real", "sim_path", "real_path", "metric", "sim_value", "real_value",
            "rel_err_pct"]
    if "backend" not in df or df.empty:
        return pd.DataFrame(columns=cols)
    keys = [k for k in pair_on if k in df]
    metrics = [m for m in metrics if m in df]
    work = df.copy()
    work[keys] = work[keys].astype(str)
    is_sim = work["backend"].astype(str).isin(SIM_BACKENDS)
    rows = []
    sim_rows, real_rows = work[is_sim], work[~is_sim & work["backend"].notna()]
    if sim_rows.empty or real_rows.empty:
        return pd.DataFrame(columns=keys + cols)
    pairs = sim_rows.merge(real_rows, on=keys, suffixes=("_sim", "_real")) if keys else \
        sim_rows.merge(real_rows, how="cross", suffixes=("_sim", "_real"))
    for _, p in pairs.iterrows():
        cost = p.get("cost_model_sim")
        sim_name = f"sim ({cost})" if isinstance(cost, str) and cost else "sim"
        for m in metrics:
            sim_v = pd.to_numeric(p[f"{m}_sim"], errors="coerce")
            real_v = pd.to_numeric(p[f"{m}_real"], errors="coerce")
            err = 100.0 * (sim_v - real_v) / real_v if real_v and pd.notna(real_v) else float("nan")
            rows.append({**{k: p[k] for k in keys}, "sim": sim_name, "real": str(p["backend_real"]),
                         "sim_path": p["path_sim"], "real_path": p["path_real"], "metric": m,
                         "sim_value": sim_v, "real_value": real_v, "rel_err_pct": err})
    return pd.DataFrame(rows, columns=keys + cols)


def fidelity_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per (sim, real, metric): number of pairs, mean |error| %, mean/min/max signed error %."""
    if table.empty:
        return pd.DataFrame(columns=["sim", "real", "metric", "pairs", "mean_abs_err_pct",
                                     "mean_err_pct", "min_err_pct", "max_err_pct"])
    t = table.assign(abs_err=table["rel_err_pct"].abs())
    g = t.groupby(["sim", "real", "metric"], sort=False)
    return pd.DataFrame({
        "pairs": g["rel_err_pct"].count(),
        "mean_abs_err_pct": g["abs_err"].mean(),
        "mean_err_pct": g["rel_err_pct"].mean(),
        "min_err_pct": g["rel_err_pct"].min(),
        "max_err_pct": g["rel_err_pct"].max(),
    }).reset_index()
