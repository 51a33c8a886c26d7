"""The simulator against real engine clusters over a set of cells, in one table.

    python -m twinserve.experiments.cluster_cells CELLS_DIR [--calibration FILE] [--no-measured]

A cell is a folder made by ``python -m twinserve.experiments.compare --out CELL ...`` with the
overrides it ran written to ``CELL/overrides.txt`` (one per line), as
``experiments/scripts/gpu_cluster_cells.sh`` does: ``engine/`` and ``sim/`` run folders. Each
cell is read three ways:

- ``engine``: the engine cluster's run;
- ``calibration``: ``sim/``, the simulator on the calibration as committed;
- ``measured``: the simulator rerun here (``measured/``) on the calibration whose device fits are
  scaled by the pooled span / prediction of the *other* cells' engine runs
  (`shared_steps.pooled_ratio`, leave one out), so a cell's own device time never enters its
  prediction.

Writes ``cells.csv`` (one row per cell and run: mean TTFT and TPOT, prefix hit rate, requests per
replica) and ``cells.md`` (the simulator's errors against the engine, the issue's bounds, and
whether the routers rank the same by mean TTFT within each workload and rate) into CELLS_DIR.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from twinserve.core.errors import UserError

OVERRIDES_FILE = "overrides.txt"
SIMS = ("calibration", "measured")
BOUNDS = {"ttft": 10.0, "hit": 10.0, "per_replica": 5.0}  # percent, from the cluster issue


@dataclass(frozen=True, slots=True)
class Cell:
    """One cluster cell: its folder and the compare overrides it ran. ``workload``, ``rate`` and
    ``router`` are read from the overrides."""

    path: Path
    overrides: tuple[str, ...]

    def value(self, key: str) -> str:
        for o in self.overrides:
            k, _, v = o.partition("=")
            if k == key:
                return v
        return ""

    @property
    def group(self) -> str:
        return f"{self.value('workload')} {self.value('workload.rate')}"


def find_cells(root: Path) -> list[Cell]:
    """The cells under ``root`` (folders with an overrides file and an engine run), by name."""
    cells = [Cell(d, tuple(line.strip() for line in (d / OVERRIDES_FILE).read_text().splitlines() if line.strip()))
             for d in sorted(root.iterdir())
             if (d / OVERRIDES_FILE).is_file() and (d / "engine" / "summary.json").is_file()]
    if not cells:
        raise UserError(f"{root}: no cells (folders with {OVERRIDES_FILE} and engine/summary.json)")
    return cells


def run_row(run: Path) -> dict[str, float | str]:
    """Mean TTFT and TPOT (ms), prefix hit rate and requests per replica (``a/b/...``, every
    replica of the run, those that served none too) of one run folder."""
    from twinserve.experiments.compare import run_metrics
    from twinserve.experiments.run import load_run

    req, steps, summary = load_run(run)
    m = run_metrics(summary, steps)
    n = int((summary.get("run") or {}).get("replicas") or 1)
    counts = np.bincount(req["replica"].to_numpy(np.int64), minlength=n) if "replica" in req else np.zeros(n, int)
    return {"ttft_ms": m["mean_ttft_ms"], "tpot_ms": m["mean_tpot_ms"], "hit_rate": m["cache_hit_rate"],
            "per_replica": "/".join(str(int(c)) for c in counts)}


def rerun_measured(cell: Cell, others: Sequence[Cell], calibration: Path) -> float:
    """Rerun ``cell``'s simulator into ``cell/measured`` on ``calibration`` scaled by the other
    cells' pooled device ratio; returns that ratio."""
    from twinserve.experiments.compare import run_compare
    from twinserve.experiments.shared_steps import pooled_ratio, scaled_calibration
    from twinserve.simulator.cost.calibration import Calibration

    ratio = pooled_ratio(Calibration.load(calibration), [c.path / "engine" for c in others])
    out = cell.path / "measured"
    out.mkdir(parents=True, exist_ok=True)
    scaled = out / "calibration.json"
    scaled.write_text(json.dumps(scaled_calibration(json.loads(calibration.read_text()), ratio), indent=1))
    run_compare([*cell.overrides, "cost_model=calibrated", f"cost_model.path={scaled}"], out,
                engine_run=cell.path / "engine")
    return ratio


def cells_table(cells: Sequence[Cell], ratios: dict[str, float]) -> pd.DataFrame:
    """One row per cell and run (``engine`` and each simulator run found)."""
    rows = []
    for c in cells:
        runs = {"engine": c.path / "engine", "calibration": c.path / "sim", "measured": c.path / "measured" / "sim"}
        for name, run in runs.items():
            if (run / "summary.json").is_file():
                rows.append({"cell": c.path.name, "workload": c.value("workload"), "rate": c.value("workload.rate"),
                             "router": c.value("router"), "run": name,
                             "device_ratio": ratios.get(c.path.name, math.nan) if name == "measured" else math.nan,
                             **run_row(run)})
    return pd.DataFrame(rows)


def _err(sim: float, real: float) -> float:
    return 100.0 * (sim - real) / real if real else math.nan


def _replica_err(sim: str, real: str) -> float:
    """Largest per-replica error (%) of request counts written ``a/b/...``."""
    s, r = (np.array([int(x) for x in v.split("/")], float) for v in (sim, real))
    if s.shape != r.shape or not len(r):
        return math.nan
    return float(np.max(np.abs(s - r) / np.maximum(r, 1)) * 100.0)


def errors(table: pd.DataFrame) -> pd.DataFrame:
    """Per cell and simulator run: signed errors (%) of mean TTFT, TPOT and hit rate, the largest
    per-replica request-count error, and whether the issue's bounds hold."""
    eng = table[table.run == "engine"].set_index("cell")
    rows = []
    for r in table[table.run != "engine"].itertuples():
        e = eng.loc[r.cell]
        row = {"cell": r.cell, "group": f"{r.workload} {r.rate}", "router": r.router, "sim": r.run,
               "ttft": _err(r.ttft_ms, e.ttft_ms), "tpot": _err(r.tpot_ms, e.tpot_ms),
               "hit": _err(r.hit_rate, e.hit_rate), "per_replica": _replica_err(r.per_replica, e.per_replica)}
        row["within"] = all(abs(row[k]) <= b for k, b in BOUNDS.items() if math.isfinite(row[k]))
        rows.append(row)
    return pd.DataFrame(rows)


def rankings(table: pd.DataFrame) -> pd.DataFrame:
    """Per workload and rate: the routers ordered by mean TTFT on each run, and whether each
    simulator run's order equals the engine's."""
    rows = []
    for (w, rate), g in table.groupby(["workload", "rate"], sort=True):
        order = {run: " < ".join(gg.sort_values("ttft_ms").router) for run, gg in g.groupby("run")}
        row = {"group": f"{w} {rate}", "engine": order.get("engine", "")}
        for sim in SIMS:
            if sim in order:
                row[sim] = order[sim]
                row[f"{sim}_same"] = order[sim] == row["engine"]
        rows.append(row)
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame, errs: pd.DataFrame, ranks: pd.DataFrame) -> str:
    """The cells as Markdown: engine and simulator values, errors, the rankings."""
    lines = ["| cell | sim | TTFT mean (ms) engine / sim (error) | TPOT mean (ms) | requests per replica | "
             "prefix hit rate | within bounds |", "|---|---|---:|---:|---|---:|---|"]
    eng = table[table.run == "engine"].set_index("cell")
    for r in errs.itertuples():
        e, s = eng.loc[r.cell], table[(table.cell == r.cell) & (table.run == r.sim)].iloc[0]
        lines.append(f"| {r.group} {r.router} | {r.sim} | {e.ttft_ms:.2f} / {s.ttft_ms:.2f} ({r.ttft:+.1f} %) | "
                     f"{e.tpot_ms:.2f} / {s.tpot_ms:.2f} ({r.tpot:+.1f} %) | {e.per_replica}; {s.per_replica} "
                     f"({r.per_replica:.1f} %) | {e.hit_rate:.3f} / {s.hit_rate:.3f} ({r.hit:+.1f} %) | "
                     f"{'yes' if r.within else 'no'} |")
    lines += ["", f"Bounds: TTFT and prefix hit rate within {BOUNDS['ttft']:.0f} %, requests per replica "
              f"within {BOUNDS['per_replica']:.0f} %.", "", "Routers by mean TTFT, lowest first:", ""]
    sims = [s for s in SIMS if s in ranks]
    lines += ["| workload, rate | engine | " + " | ".join(sims) + " |", "|---|---|" + "---|" * len(sims)]
    for r in ranks.to_dict("records"):
        cols = [f"{r[s]} ({'same' if r[f'{s}_same'] else 'differs'})" for s in sims]
        lines.append(f"| {r['group']} | {r['engine']} | " + " | ".join(cols) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="The simulator against engine clusters over a set of cells.")
    ap.add_argument("cells", type=Path, help="folder of cells (compare output folders with overrides.txt)")
    ap.add_argument("--calibration", type=Path,
                    default=Path(__file__).parent / "calibrations" / "h200_qwen3-0.6b_tp1.json",
                    help="the calibration the measured-device runs scale")
    ap.add_argument("--no-measured", action="store_true", help="read the existing runs only, rerun nothing")
    args = ap.parse_args(argv)
    cells = find_cells(args.cells)
    ratios: dict[str, float] = {}
    if not args.no_measured:
        if len(cells) < 2:
            raise UserError("the measured-device runs need at least two cells (each is scaled by the others)")
        for c in cells:
            ratios[c.path.name] = rerun_measured(c, [o for o in cells if o is not c], args.calibration)
    table = cells_table(cells, ratios)
    errs, ranks = errors(table), rankings(table)
    table.to_csv(args.cells / "cells.csv", index=False)
    text = markdown(table, errs, ranks)
    (args.cells / "cells.md").write_text(text)
    print(text)


def cli() -> None:
    """``python -m twinserve.experiments.cluster_cells`` with user errors as one line."""
    import sys

    from twinserve.core.cli_errors import report_user_errors, take_debug_flag

    argv = sys.argv[1:]
    debug = take_debug_flag(argv)
    report_user_errors("cluster_cells", debug, lambda: main(argv))


if __name__ == "__main__":
    cli()
