"""SLO attainment and goodput against offered rate."""

from __future__ import annotations

from twinserve.experiments.report.plot_rate import series_curves
from twinserve.experiments.report.plotting import (
    PLOTS, RATE_LABEL, Plot, PlotContext, legend, new_figure, numeric_rate, save, series_styles)


@PLOTS.register("slo_goodput")
def slo_goodput(ctx: PlotContext) -> list[Plot]:
    """Left: fraction of requests meeting the SLO; right: goodput (req/s meeting it). Uses the
    report's own ``slo_attainment``/``slo_goodput`` columns (from requests.parquet), so both
    panels use the same SLO, printed in the title."""
    df = ctx.df
    rates = numeric_rate(df)
    if rates.nunique() < 2 or "slo_attainment" not in df or df["slo_attainment"].isna().all():
        return []
    fig, axes = new_figure(ncols=2)
    styles = series_styles(df)
    for ax, col, label in ((axes[0], "slo_attainment", "SLO attainment"),
                           (axes[1], "slo_goodput", "goodput (req/s within SLO)")):
        for series, curve in series_curves(df, rates, col).items():
            ax.plot(curve["x"], curve["y"], marker="o", ms=3.5, lw=1.3, **styles[series],
                    label=series)
        ax.set_xlabel(RATE_LABEL)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylim(-0.02, 1.02)
    fig.suptitle(f"SLO: {ctx.slo.label()}", fontsize="medium")
    legend(fig, axes)
    return [save(fig, ctx, "slo_goodput", "SLO attainment and goodput",
                 f"SLO {ctx.slo.label()}; aborted or unfinished requests count as misses; "
                 "goodput = requests within the SLO / run duration.")]
