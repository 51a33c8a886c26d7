"""Device spans of a shared-GPU cluster run: how the replicas' steps meet on the device, and how
long each takes against what a calibration predicts for its batch.

    python -m twinserve.experiments.shared_steps ENGINE_RUN_DIR ... [--calibration FILE]
        [--scaled-out FILE]

For engines that take turns on one GPU (`backend=engine replicas=N` with a shared GPU) this
separates the two ways a simulator of the cluster can be fast: the turn-taking (the device
idle between steps, a step slower after another replica's than after its own) and the device
time of a step itself. Per run it prints the share of the run the device was busy, the gap
between consecutive device spans at a change of replica (the replicas' clocks are reset
microseconds apart, so the gaps a->b and b->a carry that offset with opposite signs; their
mean is the real gap) and within one replica, and the measured span over the calibration's
prediction (`calibration.fit.predict_span`, the quantity the calibration is fitted on) by
regime and by whether the previous step on the device was the same replica's.
``--scaled-out`` writes the calibration with its device fits multiplied by the runs' pooled
span/prediction ratio (host fits unchanged), for a simulator run that asks what the cluster
would show with the device time those runs measured (``cost_model=calibrated
cost_model.path=FILE``).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from twinserve.simulator.cost.calibration import Calibration

REGIMES = ("decode", "prefill", "mixed")


@dataclass(frozen=True, slots=True)
class SharedSteps:
    """One run's device timeline on a shared GPU. Times in µs, ratios measured / predicted
    (summed spans; NaN where no step qualifies). ``busy``: summed spans over the run's device
    extent. ``switch_gap_us``: median gap between consecutive spans of different replicas,
    the clock offsets cancelled (mean of the a->b and b->a medians, a < b); ``clock_offset_us``:
    half their difference, the later replicas' clock minus the earlier's; ``same_gap_us``: median gap between consecutive spans of one replica.
    ``after_same`` / ``after_other``: decode steps whose previous step on the device was their
    own replica's / another's. Invariant: ``steps`` = the rows with a device span."""

    steps: int
    busy: float
    switch_gap_us: float
    clock_offset_us: float
    same_gap_us: float
    ratio: float
    by_regime: dict[str, float]
    after_same: float
    after_other: float


def regimes(steps: pd.DataFrame) -> np.ndarray:
    """Each step's regime: decode (no prefill), prefill (no decode) or mixed."""
    p = steps["num_prefills"].to_numpy() > 0
    d = steps["num_decodes"].to_numpy() > 0
    return np.where(~p, "decode", np.where(~d, "prefill", "mixed"))


def _ratio(y: np.ndarray, pred: np.ndarray, sel: np.ndarray) -> float:
    return float(y[sel].sum() / pred[sel].sum()) if sel.any() else float("nan")


def _median_us(x: np.ndarray) -> float:
    return float(np.median(x) * 1e6) if x.size else float("nan")


def shared_steps(steps: pd.DataFrame, predicted: np.ndarray) -> SharedSteps:
    """`SharedSteps` of a run's ``steps`` (columns ``replica``, ``dev_start``, ``dev_end``,
    ``duration``, ``num_prefills``, ``num_decodes``) with ``predicted[i]`` the predicted span
    of row ``i``."""
    ok = np.isfinite(steps["dev_start"].to_numpy(np.float64)) & np.isfinite(steps["dev_end"].to_numpy(np.float64))
    s = steps.loc[ok].assign(_pred=np.asarray(predicted, np.float64)[ok]).sort_values("dev_start", kind="stable")
    start, end = s["dev_start"].to_numpy(np.float64), s["dev_end"].to_numpy(np.float64)
    rep, y, pred = s["replica"].to_numpy(), s["duration"].to_numpy(np.float64), s["_pred"].to_numpy()
    reg = regimes(s)
    gap = start[1:] - end[:-1]
    a, b = rep[:-1], rep[1:]
    switch = a != b
    up, down = switch & (a < b), switch & (a > b)
    g_up, g_down = _median_us(gap[up]), _median_us(gap[down])
    if up.any() and down.any():
        real, offset = (g_up + g_down) / 2.0, (g_up - g_down) / 2.0
    else:
        real, offset = _median_us(gap[switch]), float("nan")
    prev_same = np.concatenate([[False], ~switch])
    prev_other = np.concatenate([[False], switch])
    decode = reg == "decode"
    extent = end.max() - start.min() if len(s) else float("nan")
    return SharedSteps(
        steps=len(s), busy=float(y.sum() / extent) if len(s) else float("nan"),
        switch_gap_us=real, clock_offset_us=offset, same_gap_us=_median_us(gap[~switch]),
        ratio=_ratio(y, pred, np.ones(len(s), bool)),
        by_regime={r: _ratio(y, pred, reg == r) for r in REGIMES},
        after_same=_ratio(y, pred, decode & prev_same), after_other=_ratio(y, pred, decode & prev_other))


def scaled_calibration(cal: dict, factor: float) -> dict:
    """The calibration file's content ``cal`` with every device fit (the regimes' coefficients
    and the decode lines' offsets; their scales are relative) multiplied by ``factor``, so
    every predicted device time scales by it; host fits and the rest unchanged. ``cal`` is
    not modified."""
    out = json.loads(json.dumps(cal))
    for fit in out["regimes"].values():
        fit["coef"] = [c * factor for c in fit["coef"]]
    if out.get("decode_offsets"):
        out["decode_offsets"] = {k: v * factor for k, v in out["decode_offsets"].items()}
    return out


def _fmt(x: float, spec: str) -> str:
    return "n/a" if not np.isfinite(x) else format(x, spec)


def table(rows: Sequence[tuple[str, SharedSteps]]) -> str:
    """A Markdown table of `SharedSteps` per run."""
    lines = ["| run | steps | device busy | gap at a switch / within a replica (µs) | clock offset (µs) | "
             "span / predicted: all | decode | prefill | mixed | decode after own / other's step |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in rows:
        reg = " | ".join(_fmt(r.by_regime[k], ".3f") for k in REGIMES)
        lines.append(f"| {name} | {r.steps} | {_fmt(r.busy, '.3f')} | {_fmt(r.switch_gap_us, '.1f')} / "
                     f"{_fmt(r.same_gap_us, '.1f')} | {_fmt(r.clock_offset_us, '.1f')} | {_fmt(r.ratio, '.3f')} | "
                     f"{reg} | {_fmt(r.after_same, '.3f')} / {_fmt(r.after_other, '.3f')} |")
    return "\n".join(lines)


def run_steps(run: Path) -> pd.DataFrame:
    """The steps table of an engine run folder that recorded device spans and replicas."""
    from twinserve.core.errors import UserError

    path = run / "steps.parquet"
    if not path.exists():
        raise UserError(f"{run}: no steps.parquet (an engine run folder is expected)")
    steps = pd.read_parquet(path)
    if not {"dev_start", "dev_end", "replica"} <= set(steps.columns):
        raise UserError(f"{path}: no device spans (dev_start/dev_end) or replica column; "
                        "an engine run on CUDA records them")
    return steps


def pooled_ratio(cal: "Calibration", runs: Sequence[Path]) -> float:
    """Summed measured step spans of ``runs`` (engine run folders) over what ``cal`` predicts
    for the same steps: the factor `scaled_calibration` applies."""
    from twinserve.calibration.fit import predict_span

    y = p = 0.0
    for run in runs:
        steps = run_steps(run)
        y, p = y + float(steps["duration"].sum()), p + float(predict_span(cal, steps).sum())
    return y / p


def main(argv: Sequence[str] | None = None) -> None:
    from twinserve.calibration.fit import predict_span
    from twinserve.simulator.cost.calibration import Calibration

    ap = argparse.ArgumentParser(description="Device spans of shared-GPU engine runs against a calibration.")
    ap.add_argument("runs", nargs="+", type=Path, help="engine run folders with steps.parquet")
    ap.add_argument("--calibration", type=Path,
                    default=Path(__file__).parent / "calibrations" / "h200_qwen3-0.6b_tp1.json")
    ap.add_argument("--scaled-out", type=Path, default=None,
                    help="write the calibration with its device fits scaled by the runs' pooled ratio")
    args = ap.parse_args(argv)
    cal = Calibration.load(args.calibration)
    rows = []
    for run in args.runs:
        steps = run_steps(run)
        rows.append((run.parent.name if run.name == "engine" else run.name,
                     shared_steps(steps, predict_span(cal, steps))))
    ratio = pooled_ratio(cal, args.runs)
    print(table(rows))
    print(f"\npooled span / predicted: {ratio:.4f} ({args.calibration.name})")
    if args.scaled_out is not None:
        args.scaled_out.write_text(json.dumps(scaled_calibration(json.loads(args.calibration.read_text()), ratio), indent=1))
        print(f"wrote {args.scaled_out} (device fits x {ratio:.4f})")


if __name__ == "__main__":
    main()
