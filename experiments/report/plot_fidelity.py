"""Simulator-vs-engine error bars (only when both backends ran the same configurations)."""

from __future__ import annotations

import numpy as np

from twinserve.experiments.report.fidelity import fidelity_summary, fidelity_table
from twinserve.experiments.report.plotting import PLOTS, Plot, PlotContext, colors, legend, new_figure, save


@PLOTS.register("sim_vs_engine")
def sim_vs_engine(ctx: PlotContext) -> list[Plot]:
    """Bars: mean signed relative error of the simulator per metric; whiskers: min..max over the
    paired runs; dots: each pair."""
    table = fidelity_table(ctx.df)
    summary = fidelity_summary(table)
    if summary.empty or summary["pairs"].sum() == 0:
        return []
    metrics = list(dict.fromkeys(summary["metric"]))
    groups = list(dict.fromkeys(zip(summary["sim"], summary["real"])))
    names = [f"{s} vs {r}" for s, r in groups]
    palette = colors(names)
    width = 0.8 / len(groups)
    fig, axes = new_figure(width=max(5.0, 1.1 * len(metrics)), height=3.4)
    ax = axes[0]
    x = np.arange(len(metrics))
    for gi, ((sim, real), name) in enumerate(zip(groups, names)):
        part = summary[(summary["sim"] == sim) & (summary["real"] == real)].set_index("metric")
        part = part.reindex(metrics)
        pos = x - 0.4 + width * (gi + 0.5)
        mean = part["mean_err_pct"].to_numpy(dtype=float)
        err = np.vstack([mean - part["min_err_pct"].to_numpy(dtype=float),
                         part["max_err_pct"].to_numpy(dtype=float) - mean])
        ax.bar(pos, mean, width * 0.9, yerr=err, capsize=3, color=palette[name], alpha=0.8,
               label=name)
        pts = table[(table["sim"] == sim) & (table["real"] == real)]
        for mi, m in enumerate(metrics):
            vals = pts.loc[pts["metric"] == m, "rel_err_pct"].to_numpy(dtype=float)
            ax.plot(np.full(vals.size, pos[mi]), vals, "k.", ms=3)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(x, [m.replace("_ms", "") for m in metrics], rotation=30, ha="right",
                  fontsize="small")
    ax.set_ylabel("simulator error (%)")
    ax.grid(axis="y", alpha=0.3)
    legend(fig, axes)
    n = int(table[["sim_path", "real_path"]].drop_duplicates().shape[0])
    return [save(fig, ctx, "sim_vs_engine", "Simulator vs engine",
                 f"Relative error 100*(sim-real)/real over {n} paired run(s) with equal model, "
                 "hardware, policies, workload and rate; whiskers span min..max.")]
