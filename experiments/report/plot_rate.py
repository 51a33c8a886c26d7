"""Rate-sweep curves: latency against offered rate, and latency against achieved throughput."""

from __future__ import annotations

import pandas as pd

from twinserve.experiments.report.plotting import (
    PLOTS, RATE_LABEL, Plot, PlotContext, legend, new_figure, numeric_rate, save, series_styles)

LATENCY_PANELS = (("mean_ttft_ms", "mean TTFT (ms)"), ("p99_ttft_ms", "p99 TTFT (ms)"),
                  ("mean_tpot_ms", "mean TPOT (ms)"), ("p99_tpot_ms", "p99 TPOT (ms)"))
E2E_PANELS = (("mean_e2el_ms", "mean E2E latency (ms)"), ("p99_e2el_ms", "p99 E2E latency (ms)"))


def series_curves(df: pd.DataFrame, x: pd.Series, y: str) -> dict[str, pd.DataFrame]:
    """Per series: columns ``x`` and ``y`` averaged over runs with the same x, sorted by x."""
    data = pd.DataFrame({"series": df["series"], "x": x,
                         "y": pd.to_numeric(df[y], errors="coerce")}).dropna()
    return {s: g.groupby("x", as_index=False)["y"].mean().sort_values("x")
            for s, g in data.groupby("series", sort=True)}


def curve_figure(ctx: PlotContext, x: pd.Series, xlabel: str,
                 panels: tuple[tuple[str, str], ...]) -> tuple | None:
    present = [(c, lbl) for c, lbl in panels if c in ctx.df]
    if not present or x.notna().sum() == 0:
        return None
    fig, axes = new_figure(ncols=min(2, len(present)), nrows=-(-len(present) // 2))
    styles = series_styles(ctx.df)
    for ax, (col, label) in zip(axes, present):
        for series, curve in series_curves(ctx.df, x, col).items():
            ax.plot(curve["x"], curve["y"], marker="o", ms=3.5, lw=1.3, **styles[series],
                    label=series)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    for ax in axes[len(present):]:
        ax.set_visible(False)
    legend(fig, axes)
    return fig


@PLOTS.register("latency_vs_rate")
def latency_vs_rate(ctx: PlotContext) -> list[Plot]:
    rates = numeric_rate(ctx.df)
    if rates.nunique() < 2:
        return []
    fig = curve_figure(ctx, rates, RATE_LABEL, LATENCY_PANELS)
    if fig is None:
        return []
    return [save(fig, ctx, "latency_vs_rate", "Latency vs request rate",
                 "Mean and p99 TTFT/TPOT at each offered rate; one line per series.")]


@PLOTS.register("throughput_latency")
def throughput_latency(ctx: PlotContext) -> list[Plot]:
    if "output_throughput" not in ctx.df or numeric_rate(ctx.df).nunique() < 2:
        return []
    x = pd.to_numeric(ctx.df["output_throughput"], errors="coerce")
    fig = curve_figure(ctx, x, "achieved output throughput (tok/s)", E2E_PANELS + LATENCY_PANELS[:2])
    if fig is None:
        return []
    return [save(fig, ctx, "throughput_latency", "Throughput vs latency",
                 "Each point is one rate of the sweep: achieved output tokens/s against latency.")]
