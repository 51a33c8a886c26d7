"""`twinserve-report DIR... [--out OUTDIR]`: runs table, plots and report.md from run folders."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from twinserve.experiments.report.frame import runs_frame
from twinserve.experiments.report.latency import SLO
from twinserve.experiments.report.markdown import write_report
from twinserve.experiments.report.plotting import Plot
from twinserve.experiments.report.render import make_context, make_plots
from twinserve.experiments.report.runs import RunFolder, load_runs

DEFAULT_TTFT_MS = 2000.0
DEFAULT_TPOT_MS = 100.0


@dataclass(slots=True)
class Report:
    """What ``build_report`` wrote: the runs table and the paths of every output file."""

    df: pd.DataFrame
    plots: list[Plot]
    markdown: Path
    parquet: Path
    csv: Path


def slo_of_runs(runs: Sequence[RunFolder]) -> SLO | None:
    """The SLO the runs were configured with (``slo.ttft_ms``/``slo.tpot_ms`` of their Hydra
    config) when every run has the same one and it sets a bound; else None."""
    seen = {(r.config.get("slo") or {}).get("ttft_ms") for r in runs}, \
        {(r.config.get("slo") or {}).get("tpot_ms") for r in runs}
    if any(len(s) != 1 for s in seen):
        return None
    ttft, tpot = next(iter(seen[0])), next(iter(seen[1]))
    return SLO(ttft, tpot) if ttft is not None or tpot is not None else None


def build_report(paths: Sequence[Path | str], out_dir: Path | str, slo: SLO | None = None,
                 plots: Sequence[str] | None = None, dpi: int = 90) -> Report:
    """Find the runs under ``paths``, write runs.parquet, runs.csv, the PNG plots (in
    ``out_dir/figures``) and report.md into ``out_dir``. Raises ValueError if no run is found.
    The SLO is ``slo``, else the runs' configured one, else DEFAULT_TTFT_MS/DEFAULT_TPOT_MS."""
    runs = load_runs(paths)
    if not runs:
        raise ValueError(f"no summary.json under {', '.join(map(str, paths))}")
    slo = slo or slo_of_runs(runs) or SLO(DEFAULT_TTFT_MS, DEFAULT_TPOT_MS)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    df = runs_frame(runs, slo)
    parquet, csv = out_dir / "runs.parquet", out_dir / "runs.csv"
    df.to_parquet(parquet, index=False)
    df.to_csv(csv, index=False)
    ctx = make_context(df, runs, out_dir / "figures", slo)
    ctx.dpi = dpi
    written = make_plots(ctx, plots)
    md = write_report(out_dir / "report.md", ctx.df, written, slo, [str(p) for p in paths])
    return Report(df=ctx.df, plots=written, markdown=md, parquet=parquet, csv=csv)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="twinserve-report", description=__doc__)
    ap.add_argument("dirs", nargs="+", type=Path, help="run folders or Hydra multirun folders")
    ap.add_argument("--out", type=Path, default=None,
                    help="output folder (default: DIR/report for one DIR, else ./report)")
    ap.add_argument("--slo-ttft-ms", type=float, default=None,
                    help="TTFT bound of the SLO (ms; <=0 disables it). Default: the runs' "
                         f"slo.ttft_ms if set, else {DEFAULT_TTFT_MS:g}")
    ap.add_argument("--slo-tpot-ms", type=float, default=None,
                    help="TPOT bound of the SLO (ms; <=0 disables it). Default: the runs' "
                         f"slo.tpot_ms if set, else {DEFAULT_TPOT_MS:g}")
    ap.add_argument("--plots", nargs="*", default=None, help="plot names (default: all)")
    ap.add_argument("--dpi", type=int, default=90, help="PNG resolution (default 90)")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out or (args.dirs[0] / "report" if len(args.dirs) == 1 else Path("report"))
    slo = None
    if args.slo_ttft_ms is not None or args.slo_tpot_ms is not None:
        ttft = DEFAULT_TTFT_MS if args.slo_ttft_ms is None else args.slo_ttft_ms
        tpot = DEFAULT_TPOT_MS if args.slo_tpot_ms is None else args.slo_tpot_ms
        slo = SLO(ttft if ttft > 0 else None, tpot if tpot > 0 else None)
    try:
        rep = build_report(args.dirs, out, slo, args.plots, args.dpi)
    except (ValueError, FileNotFoundError) as exc:
        print(f"twinserve-report: {exc}", file=sys.stderr)
        return 2
    print(f"{len(rep.df)} runs -> {rep.parquet}, {rep.csv}")
    for p in rep.plots:
        print(f"  {p.path}")
    print(f"report: {rep.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
