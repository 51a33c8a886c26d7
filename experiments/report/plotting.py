"""Shared plumbing of the report's plots: context, result record, registry, figure helpers.

Figures are built with ``matplotlib.figure.Figure`` directly (no pyplot, hence no global figure
state and no GUI backend): ``savefig`` renders through Agg.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from twinserve.core.registry import Registry
from twinserve.experiments.report.latency import SLO
from twinserve.experiments.report.runs import RunFolder


@dataclass(slots=True)
class Plot:
    """One written figure: its file, a title and a one-line caption for report.md."""

    path: Path
    title: str
    caption: str = ""


@dataclass(slots=True)
class PlotContext:
    """What every plot function gets.

    ``df`` is the runs table (one row per run, as built by ``frame.runs_frame``) with an added
    ``series`` column naming the line each run belongs to; ``runs`` maps a row's ``path`` to its
    RunFolder (for requests/steps); figures go to ``out_dir``. ``max_panels`` bounds how many
    rates get their own CDF panel, ``max_lines`` how many runs a timeline shows.
    """

    df: pd.DataFrame
    runs: dict[str, RunFolder]
    out_dir: Path
    slo: SLO = field(default_factory=SLO)
    max_panels: int = 4
    max_lines: int = 10
    dpi: int = 90

    def run(self, path: str) -> RunFolder:
        return self.runs[path]

    def has_rates(self) -> bool:
        return "rate" in self.df and pd.to_numeric(self.df["rate"], errors="coerce").notna().any()


PlotFn = Callable[[PlotContext], list[Plot]]
PLOTS: Registry[PlotFn] = Registry("plot")


# Overrides that never name a series: the policy labels (in ``combo``), the x axis and the seed
# (runs that differ only in it are replicates, pooled in one series).
NOT_SWEPT = frozenset({"scheduler", "cache", "backend", "workload", "rate", "workload.rate", "seed"})


def swept_knobs(df: pd.DataFrame) -> list[str]:
    """Override keys (of the ``overrides`` column) outside `NOT_SWEPT` and ``hydra.*`` whose
    value differs between runs, e.g. ``kv.num_pages`` in a sweep over pool sizes; sorted."""
    if "overrides" not in df:
        return []
    rows = [dict(kv.split("=", 1) for kv in str(o).split() if "=" in kv) for o in df["overrides"]]
    keys = sorted({k for r in rows for k in r if k not in NOT_SWEPT and not k.startswith("hydra.")})
    return [k for k in keys if len({r.get(k) for r in rows}) > 1]


def as_text(s: pd.Series) -> pd.Series:
    """``s`` as strings, a missing value as '' (pandas 3's ``astype(str)`` keeps NaN, which
    would make every label it is joined to NaN)."""
    return s.astype(object).where(s.notna(), "").astype(str)


def swept_label(df: pd.DataFrame) -> pd.Series:
    """`` key=value`` for each of the `swept_knobs` of every run ('' when none)."""
    label = pd.Series("", index=df.index)
    for key in swept_knobs(df):
        values = as_text(df["overrides"]).map(
            lambda o, k=key: next((kv.split("=", 1)[1] for kv in o.split() if kv.startswith(k + "=")), "-"))
        label = label + f" {key}=" + values
    return label


def add_series(df: pd.DataFrame) -> pd.DataFrame:
    """Name each run's line: ``combo``, plus ``[backend]`` and ``@workload`` when those vary, plus
    `` key=value`` for the other swept overrides (`swept_knobs`)."""
    out = df.copy()
    series = as_text(out["combo"]) if "combo" in out else pd.Series("run", index=out.index)
    for col, fmt in (("backend", " [{}]"), ("workload", " @{}")):
        if col in out and as_text(out[col]).nunique() > 1:
            series = series + as_text(out[col]).map(lambda v, f=fmt: f.format(v) if v else "")
    out["series"] = series + swept_label(out)
    return out


RATE_LABEL = "offered rate (workload.rate, 1/s)"


def numeric_rate(df: pd.DataFrame) -> pd.Series:
    return pd.to_numeric(df["rate"], errors="coerce") if "rate" in df else pd.Series(np.nan, df.index)


def pick_rates(rates: list[float], k: int) -> list[float]:
    """At most ``k`` rates spread evenly over the sorted distinct ``rates`` (ends included)."""
    uniq = sorted(set(rates))
    if len(uniq) <= k:
        return uniq
    idx = np.unique(np.linspace(0, len(uniq) - 1, k).round().astype(int))
    return [uniq[i] for i in idx]


def colors(names: list[str]) -> dict[str, tuple]:
    """A stable color per name (tab10/tab20 cycle)."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {n: cmap(i % cmap.N) for i, n in enumerate(sorted(names))}


LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 3)))


def series_styles(df: pd.DataFrame) -> dict[str, dict]:
    """Line style per series: the color names the policy (and workload when it varies), the
    dash pattern the cache (and backend and the `swept_knobs` when they vary), so ``fcfs+radix``
    and ``fcfs+none`` share a color and differ in dashes. Needs the ``series`` column (``add_series``)."""
    def col(name: str) -> pd.Series:
        return as_text(df[name]) if name in df else pd.Series("", index=df.index)

    def varying(name: str) -> pd.Series:
        c = col(name)
        return c if c.nunique() > 1 else pd.Series("", index=df.index)

    hue = col("policy") + varying("workload")
    dash = col("cache") + varying("backend") + swept_label(df)
    palette = colors(hue.unique().tolist())
    dashes = {d: LINESTYLES[i % len(LINESTYLES)] for i, d in enumerate(sorted(dash.unique()))}
    return {s: {"color": palette[h], "ls": dashes[d]}
            for s, h, d in zip(df["series"], hue, dash)}


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 4.2, height: float = 3.2,
               ) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    return fig, axes


def save(fig: Figure, ctx: PlotContext, name: str, title: str, caption: str = "") -> Plot:
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    path = ctx.out_dir / f"{name}.png"
    fig.savefig(path, dpi=ctx.dpi)
    return Plot(path=path, title=title, caption=caption)


def legend(fig: Figure, axes: np.ndarray) -> None:
    """One legend for the figure, from the first axis that has labelled lines."""
    for ax in axes:
        handles, labels = ax.get_legend_handles_labels()
        if handles:
            fig.legend(handles, labels, loc="outside lower center", ncols=min(4, len(labels)),
                       fontsize="small", frameon=False)
            return
