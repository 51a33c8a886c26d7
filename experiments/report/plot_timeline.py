"""KV-cache usage and batch size over time, from steps.parquet."""

from __future__ import annotations

import numpy as np
import pandas as pd

from twinserve.experiments.report.plotting import (
    PLOTS, Plot, PlotContext, legend, new_figure, numeric_rate, save, series_styles)

BINS = 200


def step_timeline(steps: pd.DataFrame, bins: int = BINS) -> pd.DataFrame:
    """Steps binned on their start time: per bin the mean KV usage (used / total pages, %),
    cached share (%), batch size (sequences per step) and waiting queue, averaged over the steps
    (of every replica) that start in the bin. Empty when there are no steps."""
    if steps.empty:
        return pd.DataFrame(columns=["t", "kv_used_pct", "kv_cached_pct", "batch", "waiting"])
    total = (steps["free_pages"] + steps["used_pages"] + steps["cached_pages"]).astype(float)
    total = total.where(total > 0)
    frame = pd.DataFrame({
        "start": steps["start"].astype(float),
        "kv_used_pct": 100.0 * steps["used_pages"] / total,
        "kv_cached_pct": 100.0 * steps["cached_pages"] / total,
        "batch": steps["num_seqs"].astype(float),
        "waiting": steps["num_waiting"].astype(float) if "num_waiting" in steps else np.nan,
    })
    lo, hi = frame["start"].min(), frame["start"].max()
    edges = np.linspace(lo, hi if hi > lo else lo + 1e-9, bins + 1)
    frame["bin"] = np.clip(np.searchsorted(edges, frame["start"], side="right") - 1, 0, bins - 1)
    out = frame.groupby("bin").mean(numeric_only=True).reset_index(drop=True)
    out["t"] = out.pop("start")
    return out


def timeline_runs(ctx: PlotContext) -> pd.DataFrame:
    """The runs shown: per series its highest-rate run, at most ``ctx.max_lines`` of them."""
    df = ctx.df.assign(_rate=numeric_rate(ctx.df).fillna(-1.0))
    best = df.sort_values("_rate").groupby("series", sort=True).tail(1)
    return best.sort_values("series").head(ctx.max_lines)


PANELS = (("kv_used_pct", "request KV pages (% of pool)"),
          ("kv_cached_pct", "prefix-cache pages (% of pool)"),
          ("batch", "batch size (sequences/step)"))


@PLOTS.register("kv_batch_timeline")
def kv_batch_timeline(ctx: PlotContext) -> list[Plot]:
    shown = timeline_runs(ctx)
    styles = series_styles(ctx.df)
    fig, axes = new_figure(ncols=len(PANELS), width=4.0)
    drew = False
    for _, row in shown.iterrows():
        tl = step_timeline(ctx.run(row["path"]).steps())
        if tl.empty:
            continue
        drew = True
        rate = row["_rate"]
        label = row["series"] if rate < 0 else f"{row['series']} @ {rate:g}/s"
        for ax, (col, _) in zip(axes, PANELS):
            ax.plot(tl["t"], tl[col], lw=1.1, **styles[row["series"]], label=label)
    if not drew:
        return []
    for ax, (_, ylabel) in zip(axes, PANELS):
        ax.set_ylabel(ylabel)
        ax.set_xlabel("time (s)")
        ax.grid(alpha=0.3)
    legend(fig, axes)
    return [save(fig, ctx, "kv_batch_timeline", "KV usage and batch size over time",
                 f"Per series its highest-rate run (at most {ctx.max_lines}); steps binned on "
                 f"start time ({BINS} bins) and averaged over replicas. Pages of the prefix cache "
                 "(shared prefixes, including those running requests use) are counted apart.")]
