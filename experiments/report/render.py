"""Run every registered plot on a runs table."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

# Importing the plot modules registers their functions in PLOTS (import-time registration only).
from twinserve.experiments.report import (  # noqa: F401
    plot_cdf, plot_fidelity, plot_rate, plot_slo, plot_timeline)
from twinserve.experiments.report.latency import SLO
from twinserve.experiments.report.plotting import PLOTS, Plot, PlotContext, add_series
from twinserve.experiments.report.runs import RunFolder

ORDER = ("ttft_cdf", "tpot_cdf", "latency_vs_rate", "throughput_latency", "slo_goodput",
         "sim_vs_engine", "kv_batch_timeline")


def make_context(df: pd.DataFrame, runs: Iterable[RunFolder], out_dir: Path | str,
                 slo: SLO | None = None) -> PlotContext:
    """A PlotContext over the runs table ``df`` (``frame.runs_frame``) and its RunFolders."""
    return PlotContext(df=add_series(df), runs={str(r.path): r for r in runs},
                       out_dir=Path(out_dir), slo=slo or SLO())


def make_plots(ctx: PlotContext, names: Sequence[str] | None = None) -> list[Plot]:
    """Run the named plots (default: all, in ORDER, then any other registered ones). A plot
    that does not apply to these runs (no rate sweep, no engine runs, ...) writes nothing."""
    if names is None:
        names = list(ORDER) + [n for n in PLOTS.names() if n not in ORDER]
    plots: list[Plot] = []
    for name in names:
        plots.extend(PLOTS.get(name)(ctx))
    return plots
