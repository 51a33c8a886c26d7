"""The fidelity suite's simulator side: rerun each engine run folder on the simulator, write
the per-run comparisons, one table (`fidelity.md`, `fidelity.csv`), the error plot, and the
simulator's capacity on each workload's burst against the engine's (`capacity.md`, `.csv`:
`capacity`).

    python -m twinserve.experiments.fidelity_suite report --out OUT RUNS [sim overrides...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from twinserve.experiments.fidelity_suite.capacity import capacity_rows, write_capacity
from twinserve.experiments.fidelity_suite.resim import resimulate


SHOWN = ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_e2el_ms",
         "p99_e2el_ms", "request_throughput", "output_throughput")
MEAN_TARGET = ("mean_ttft_ms", "mean_tpot_ms", "request_throughput")   # within 5 %
P99_TARGET = ("p99_ttft_ms", "p99_tpot_ms", "p99_e2el_ms")             # within 10 %


def meets_targets(err: dict[str, float]) -> bool:
    """The issue's targets: mean TTFT, mean TPOT and throughput within 5 %, p99s within 10 %."""
    return all(abs(err[k]) <= 5.0 for k in MEAN_TARGET) and all(abs(err[k]) <= 10.0 for k in P99_TARGET)


def fidelity_table(rows: list[dict[str, Any]]) -> str:
    """One markdown row per run: offered load, engine req/s, each shown metric's signed error
    and whether the run meets the targets."""
    from twinserve.experiments.compare import METRICS

    labels = dict(METRICS)
    head = ["run", "load", "engine req/s"] + [labels[k].replace(" (ms)", "").replace(" (req/s)", "")
                                              .replace(" (tok/s)", "") for k in SHOWN] + ["targets"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" + "---:|" * (len(head) - 2) + "---|"]
    for r in rows:
        errs = [f"{r['err'][k]:+.1f}%" if r["err"].get(k) == r["err"].get(k) else "n/a" for k in SHOWN]
        ok = "met" if meets_targets(r["err"]) else "missed"
        lines.append(f"| {r['run']} | {r['load']:.0%} | {r['req_s']:.2f} | " + " | ".join(errs) + f" | {ok} |")
    return "\n".join(lines) + "\n"


def plot_errors(frame: pd.DataFrame, path: Path) -> Path:
    """Signed error of mean TTFT and mean TPOT against offered load, one line per workload and
    one row of panels per model; the grey band is the 5 % target."""
    from matplotlib.figure import Figure

    models = list(dict.fromkeys(frame["model"]))
    fig = Figure(figsize=(9, 3.0 * len(models)))
    axes = fig.subplots(len(models), 2, squeeze=False)
    for mi, m in enumerate(models):
        part = frame[frame["model"] == m]
        for ci, (key, label) in enumerate((("mean_ttft_ms", "mean TTFT"), ("mean_tpot_ms", "mean TPOT"))):
            ax = axes[mi][ci]
            ax.axhspan(-5, 5, color="0.9")
            ax.axhline(0, color="black", lw=0.8)
            for wl, g in part.groupby("workload", sort=True):
                g = g.sort_values("load")
                ax.plot(100 * g["load"], g[key], marker="o", label=wl)
            ax.set_title(f"{m}: {label}", fontsize="medium")
            ax.set_xlabel("offered load (% of measured capacity)")
            ax.set_ylabel("sim error (%)")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def suite_runs(runs: Path) -> list[tuple[str, Path]]:
    """(model, run folder) of an engine side's output, in table order (workload, then load)."""
    out = []
    for model_dir in sorted(p for p in runs.iterdir() if p.is_dir()):
        found = sorted((d for d in model_dir.iterdir() if (d / "overrides.json").exists()),
                       key=lambda d: (d.name.rsplit("_", 1)[0], int(d.name.rsplit("_", 1)[1])))
        out += [(model_dir.name, d) for d in found]
    return out


def table_row(model: str, run_dir: Path, table: pd.DataFrame) -> dict[str, Any]:
    """One fidelity-table row: the run, its offered load against its capacity, the first run's
    req/s and each metric's signed error (``table``: `compare.compare_table`)."""
    meta = json.loads((run_dir / "overrides.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    offered = float((summary.get("run", {}).get("workload") or {}).get("rate") or 0.0)
    e_req = float(table.set_index("key").loc["request_throughput", "engine"])
    return {"run": f"{model} {run_dir.name}", "model": model, "workload": run_dir.name.rsplit("_", 1)[0],
            "load": offered / meta["capacity_req_s"] if offered else meta["load"],
            "req_s": e_req, "err": dict(zip(table["key"], table["err_pct"]))}


def write_table(rows: list[dict[str, Any]], out: Path, stem: str, plot: bool = True) -> str:
    """``stem``.md (`fidelity_table`), ``stem``.csv (one row per run) and ``stem``.png."""
    text = fidelity_table(rows)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(text)
    frame = pd.DataFrame([{"run": r["run"], "model": r["model"], "workload": r["workload"], "load": r["load"],
                           "engine_req_s": r["req_s"], "meets_targets": meets_targets(r["err"]), **r["err"]}
                          for r in rows])
    frame.to_csv(out / f"{stem}.csv", index=False)
    if plot and len(frame):
        plot_errors(frame, out / f"{stem}.png")
    return text


def run_report(args: argparse.Namespace) -> Path:
    import shutil

    out = Path(args.out)
    rows = []
    runs = suite_runs(Path(args.runs))
    for model, d in runs:
        dest = out / f"{model}_{d.name}"
        print(f"[fidelity] {model} {d.name}", file=sys.stderr, flush=True)
        table, _ = resimulate(d, dest, args.sim_overrides, host_speed=args.host_speed)
        if not args.keep_sim:
            shutil.rmtree(dest / "sim")
        rows.append(table_row(model, d, table))
    print(write_table(rows, out, "fidelity"))
    caps = [c for model in dict.fromkeys(m for m, _ in runs)
            for c in capacity_rows(Path(args.runs) / model, [d for m, d in runs if m == model], args.sim_overrides)]
    if caps:
        print(write_capacity(caps, out))
    return out


def run_repeat(args: argparse.Namespace) -> Path:
    """The engine against itself: each run folder of ``runs`` that ``again`` (a second engine
    side, e.g. ``--only ... --capacity-from``) also holds, compared as the simulator would be
    (``repeat.md`` / ``repeat.csv``: the second run's signed error against the first). It is the
    floor under the simulator's error on the same runs."""
    from twinserve.experiments.compare import write_report

    out = Path(args.out)
    again = Path(args.again)
    rows = []
    for model, d in suite_runs(Path(args.runs)):
        twin = again / model / d.name
        if not (twin / "overrides.json").exists():
            continue
        a_ov = json.loads((d / "overrides.json").read_text())["overrides"]
        b_ov = json.loads((twin / "overrides.json").read_text())["overrides"]
        if a_ov != b_ov:
            raise ValueError(f"{twin} did not run the overrides of {d}: {b_ov} != {a_ov}")
        table, _ = write_report(d, twin, out / f"{model}_{d.name}", title=f"{model} {d.name}: engine vs its repeat")
        rows.append(table_row(model, d, table))
    if not rows:
        raise ValueError(f"no run folder of {args.runs} is also in {args.again}")
    print(write_table(rows, out, "repeat", plot=False))
    return out
