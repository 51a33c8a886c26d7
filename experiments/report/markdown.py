"""report.md: the headline table, the figures, and the simulator-vs-engine table."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

import pandas as pd

from twinserve.experiments.report.fidelity import fidelity_summary, fidelity_table
from twinserve.experiments.report.latency import SLO
from twinserve.experiments.report.plotting import Plot

HEADLINE = ("series", "backend", "policy", "cache", "rate", "completed", "request_throughput",
            "output_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms",
            "slo_attainment", "slo_goodput", "prefix_cache.hit_rate", "prefix_cache.of_bound")
METRIC_SUFFIXES = ("_ms", "throughput", "slo_attainment", "goodput", "hit_rate", "of_bound")


def fmt(value: object) -> str:
    """A table cell: floats with 3 significant digits (4 above 1000), None/NaN as '–'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if value == 0 or abs(value) >= 1000:
            return f"{value:.0f}" if abs(value) >= 1000 else "0"
        return f"{value:.3g}"
    return str(value).replace("|", "\\|")


def markdown_table(df: pd.DataFrame) -> str:
    """A GitHub-flavoured markdown table of ``df`` (index dropped)."""
    if df.empty:
        return "_(no rows)_\n"
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(fmt(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def headline_table(df: pd.DataFrame, columns: Sequence[str] = HEADLINE) -> pd.DataFrame:
    """The headline columns present in ``df``, sorted by series then rate. Columns that hold one
    value for every run (say ``backend`` in a simulator-only sweep) are dropped, except the
    metrics."""
    cols = [c for c in columns if c in df]
    keep = [c for c in cols if not c.endswith(METRIC_SUFFIXES) and c != "completed"]
    drop = [c for c in keep if c != "series" and df[c].astype(str).nunique() <= 1]
    if "series" in cols and any(c in cols for c in ("policy", "cache")):
        drop += [c for c in ("policy", "cache") if c in cols]
    out = df[[c for c in cols if c not in drop]]
    sort = [c for c in ("series", "rate") if c in out]
    return out.sort_values(sort, kind="stable") if sort else out


def write_report(path: Path | str, df: pd.DataFrame, plots: Sequence[Plot], slo: SLO,
                 sources: Sequence[str] = ()) -> Path:
    """Write report.md at ``path``; images are linked relative to it."""
    path = Path(path)
    out = [f"# twinserve report\n",
           f"{len(df)} run(s)" + (f" from {', '.join(f'`{s}`' for s in sources)}" if sources else "")
           + f". SLO for attainment/goodput: {slo.label()}. Full table: `runs.csv` / "
             "`runs.parquet` (one row per run, every summary key and override).\n",
           "## Headline numbers\n", markdown_table(headline_table(df))]
    fid = fidelity_summary(fidelity_table(df))
    if not fid.empty:
        out += ["## Simulator vs engine\n", markdown_table(fid)]
    if plots:
        out.append("## Figures\n")
    for p in plots:
        rel = Path(os.path.relpath(p.path, path.parent)).as_posix()
        out += [f"### {p.title}\n", f"![{p.title}]({rel})\n", f"{p.caption}\n" if p.caption else ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(x for x in out if x))
    return path
