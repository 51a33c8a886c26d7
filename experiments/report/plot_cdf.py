"""TTFT and TPOT CDFs: one line per series (policy+cache), one panel per request rate."""

from __future__ import annotations

import numpy as np
import pandas as pd

from twinserve.experiments.report.latency import request_latencies
from twinserve.experiments.report.plotting import (
    PLOTS, Plot, PlotContext, legend, new_figure, numeric_rate, pick_rates, save, series_styles)


def pooled_latencies(ctx: PlotContext, rows: pd.DataFrame, column: str) -> np.ndarray:
    """``column`` of request_latencies over every run in ``rows``, NaNs dropped, sorted."""
    parts = [request_latencies(ctx.run(p).requests())[column].to_numpy() for p in rows["path"]]
    values = np.concatenate(parts) if parts else np.empty(0)
    return np.sort(values[~np.isnan(values)])


def cdf_plot(ctx: PlotContext, column: str, name: str, label: str) -> list[Plot]:
    df = ctx.df
    rates = numeric_rate(df)
    panels: list[float | None] = pick_rates(rates.dropna().tolist(), ctx.max_panels) \
        if rates.notna().any() else [None]
    fig, axes = new_figure(ncols=len(panels))
    styles = series_styles(df)
    drew = False
    for ax, rate in zip(axes, panels):
        sel = df if rate is None else df[rates == rate]
        for series, rows in sel.groupby("series", sort=True):
            values = pooled_latencies(ctx, rows, column)
            if values.size == 0:
                continue
            drew = True
            ax.step(values, np.arange(1, values.size + 1) / values.size, where="post",
                    **styles[series], label=series, lw=1.3)
        if drew and ax.lines:
            lo = min(line.get_xdata().min() for line in ax.lines)
            hi = max(line.get_xdata().max() for line in ax.lines)
            if lo > 0 and hi / lo > 100:
                ax.set_xscale("log")
        ax.set_title("all runs" if rate is None else f"rate {rate:g}/s", fontsize="medium")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("fraction of requests")
    if not drew:
        return []
    legend(fig, axes)
    return [save(fig, ctx, name, f"{label} CDF",
                 f"Distribution of per-request {label.split(' ')[0]} (completed requests), pooled "
                 "over runs of the same series at each rate.")]


@PLOTS.register("ttft_cdf")
def ttft_cdf(ctx: PlotContext) -> list[Plot]:
    return cdf_plot(ctx, "ttft_ms", "ttft_cdf", "TTFT (ms)")


@PLOTS.register("tpot_cdf")
def tpot_cdf(ctx: PlotContext) -> list[Plot]:
    return cdf_plot(ctx, "tpot_ms", "tpot_cdf", "TPOT (ms)")
