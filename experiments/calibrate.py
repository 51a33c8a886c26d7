"""Calibration command: profile the engine (or read step records) and fit the cost model.

    python -m twinserve.experiments.calibrate --model qwen3-0.6b --device cuda \
        --out experiments/calibrations/h200_qwen3-0.6b_tp1.json          # profile + fit
    python -m twinserve.experiments.calibrate --from-steps steps.parquet --gpu h200 \
        --model qwen3-0.6b --out cal.json                                 # refit records

The file's ``provenance`` names (gpu, model, tp) the way `find_calibration` looks them up
(``hardware.name``, ``model.name``, ``tp``), so ``cost_model=auto`` picks it up once it lies in
``experiments/calibrations/``. Besides each regime's held-out MAPE (from `fit_calibration`), the
notes record the model's error on the profile's workload-replay steps alone, and with
``--workload-out`` each replayed workload's error under a fit that never saw it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from twinserve.core.errors import UserError
from twinserve.core.graph_plan import TOKEN_GRAPH_MODES
from twinserve.simulator.cost import Provenance
from twinserve.calibration import fit_calibration
from twinserve.simulator.cost.calibrated import CalibratedCostModel
from twinserve.simulator.cost.calibration import Calibration
from twinserve.calibration.fit import DENSE_MODELS, descheduled_steps, predict_span, regime_of
from twinserve.calibration.linear import assume_token_graph_mode, profile_workload, with_attn_tile
from twinserve.calibration.timeline import ran_overlapped


def engine_version() -> str:
    try:
        from importlib.metadata import version

        return version("twinserve")
    except Exception:  # noqa: BLE001  (not installed as a distribution)
        return "unknown"


def gpu_key(device_name: str) -> str:
    """A hardware preset name (``h200``, ``h100``, ``cpu``) from a device name, else the name
    lower-cased with spaces as dashes."""
    n = device_name.lower()
    for key in ("h200", "h100", "a100", "l40s"):
        if key in n:
            return key
    return "cpu" if n in ("cpu", "") else n.replace(" ", "-")


@dataclass(frozen=True, slots=True)
class RegimeError:
    """Error of a calibration on a set of step rows of one regime: MAPE, signed mean error of
    the summed time (bias), and the row count."""

    regime: str
    mape: float
    bias: float
    n: int


def step_errors(cal: Calibration, steps: pd.DataFrame) -> list[RegimeError]:
    """Per-regime MAPE and total-time bias of ``cal`` against measured ``steps.duration`` (the
    device span, predicted with the launch coupling when the rows carry the engine's timeline)."""
    if steps.empty:
        return []
    reg = regime_of(steps).to_numpy()
    y = steps["duration"].to_numpy(np.float64)
    pred_all = predict_span(cal, steps)
    out = []
    for name in ("decode", "prefill", "mixed"):
        sel = reg == name
        if not sel.any():
            continue
        pred = pred_all[sel]
        out.append(RegimeError(name, float(np.mean(np.abs(pred - y[sel]) / y[sel])),
                               float(pred.sum() / y[sel].sum() - 1.0), int(sel.sum())))
    return out


def workload_out_errors(steps: pd.DataFrame, fit: Any) -> dict[str, list[RegimeError]]:
    """Each replayed workload's step errors under a calibration fitted without its rows (all
    its replays, at every rate): ``fit(rows) -> Calibration``. Random k-fold errors score a fit on
    steps next to ones it was fitted on; this scores it on a workload it never saw, as the
    simulator meets one. Keys: the workloads, then ``"all"`` (their rows pooled: MAPE weighted by
    rows, bias by time). Empty without a ``workload`` column or with fewer than two workloads."""
    if "phase" not in steps:
        return {}
    label = profile_workload(steps).where(steps["phase"].astype(str).eq("replay"), "")
    names = sorted(set(label) - {""})
    if len(names) < 2:
        return {}
    out: dict[str, list[RegimeError]] = {}
    for w in names:
        held = label.eq(w)
        cal = fit(steps[~held].reset_index(drop=True))
        out[w] = step_errors(cal, steps[held].reset_index(drop=True))
    pooled = []
    for name in ("decode", "prefill", "mixed"):
        errs = [e for es in out.values() for e in es if e.regime == name]
        n = sum(e.n for e in errs)
        if n:
            pooled.append(RegimeError(name, sum(e.mape * e.n for e in errs) / n,
                                      sum(e.bias * e.n for e in errs) / n, n))
    out["all"] = pooled
    return out


def _error_notes(errs: Sequence[RegimeError]) -> dict[str, dict[str, Any]]:
    """Regime errors as the notes record them: {regime: {mape, bias, n}}, rounded."""
    return {e.regime: {"mape": round(e.mape, 4), "bias": round(e.bias, 4), "n": e.n} for e in errs}


def recorded_gqa_group(model: str, tp: int) -> int | None:
    """The GQA group on one rank of the model named ``model`` (a preset, or a directory with its
    config.json: `build.model_shape`), for step records that lack the ``attn_tile`` column; None
    when it is neither."""
    from twinserve.experiments.build import model_shape

    is_dir = (Path(model) / "config.json").is_file()
    try:
        shape = model_shape({"name": Path(model).name if is_dir else model, "path": model if is_dir else None})
    except KeyError:  # not a preset
        return None
    return shape.gqa_group(tp)


def select_rows(steps: pd.DataFrame, query: str) -> pd.DataFrame:
    """The rows of ``steps`` matching the pandas ``query``; an error names the columns when the
    query is bad or keeps no row."""
    try:
        kept = steps.query(query)
    except Exception as exc:  # noqa: BLE001  (pandas raises many kinds for a bad expression)
        raise SystemExit(f"--rows {query!r}: {exc}; columns: {', '.join(map(str, steps.columns))}") from exc
    if kept.empty:
        raise SystemExit(f"--rows {query!r} keeps none of the {len(steps)} step rows")
    return kept.reset_index(drop=True)


def require_steps(steps: pd.DataFrame) -> None:
    """UserError unless ``steps`` holds step records (a profile cut short before its first case
    has none)."""
    if not len(steps) or "duration" not in steps:
        raise UserError("no step records to fit: the profile ran no case (raise --budget-s) or "
                        "--from-steps names an empty table")


def calibrate_steps(steps: pd.DataFrame, gpu: str, model: str, tp: int, dtype: str, overlap: bool,
                    command: str, notes: dict[str, Any] | None = None, seed: int = 0,
                    dense: str = "hinge", decode_scales: bool = True, workload_out: bool = False) -> Calibration:
    """Fit a `Calibration` on step rows (``dense``: `calibration.fit.DENSE_MODELS`; ``decode_scales``:
    a factor per decode graph size besides its offset, `calibration.fit._fit_with_bucket_lines`); non-positive
    durations are dropped. The notes (JSON) carry ``notes`` plus the error on the replay rows
    (``phase == "replay"``) when present, and with ``workload_out`` each workload's error under a
    fit without it (`workload_out_errors`; one more fit per workload). On ``gpu`` "cpu" (the CPU
    engine's records) steps whose thread was descheduled are left out of the device fits
    (`calibration.fit.descheduled_steps`; their count is in the notes as ``descheduled``)."""
    require_steps(steps)
    steps = steps[steps["duration"] > 0].reset_index(drop=True)
    host_device = gpu == "cpu"
    prov = Provenance(gpu=gpu, model=model, tp=int(tp), engine_version=engine_version(), dtype=dtype,
                      date=dt.date.today().isoformat(), command=command)

    def fit(rows: pd.DataFrame) -> Calibration:
        return fit_calibration(rows, prov, overlap=overlap, seed=seed, dense=dense, bucket_scales=decode_scales,
                               host_device=host_device)

    cal = fit(steps)
    extra = dict(notes or {})
    extra["rows"] = int(len(steps))
    if host_device:
        extra["descheduled"] = int(descheduled_steps(steps).sum())
    if "phase" in steps:
        extra["rows_by_phase"] = {str(k): int(v) for k, v in steps["phase"].value_counts().items()}
        rep = steps[steps["phase"] == "replay"]
        extra["replay_error"] = _error_notes(step_errors(cal, rep))
    if workload_out:
        extra["workload_out_error"] = {w: _error_notes(errs) for w, errs in workload_out_errors(steps, fit).items()}
    cal.provenance.notes = json.dumps(extra, sort_keys=True, default=str)
    return cal


def summary_lines(cal: Calibration) -> list[str]:
    lines = [f"calibration {cal.provenance.gpu}/{cal.provenance.model}/tp{cal.provenance.tp}:"]
    for name, fit in cal.regimes.items():
        mape = "n/a" if fit.mape is None else f"{100 * fit.mape:.2f}%"
        lines.append(f"  {name:8s} 5-fold MAPE {mape} ({fit.n} rows fitted, error over {fit.n_test})")
    cpu_mape = "n/a" if cal.cpu.mape is None else f"{100 * cal.cpu.mape:.2f}%"
    lines.append(f"  cpu      5-fold MAPE {cpu_mape} (host time), overlap={cal.cpu.overlap}")
    if cal.host is not None:
        h = cal.host
        parts = [("sched", h.sched), ("complete", h.complete), ("loop", h.loop),
                 *((f"launch/{k}", v) for k, v in h.launch.items())]
        if h.sync_graph:
            parts.append(("pre/graph", h.pre))
        for name, fit in parts:
            m = "n/a" if fit.mape is None else f"{100 * fit.mape:.1f}%"
            lines.append(f"  host {name:14s} base {1e3 * fit.coef[0]:.3f} ms, 5-fold MAPE {m}")
        tail = " + ".join(f"{1e3 * c:.4f} ms" + ("" if t == "1" else f" * {t}") for t, c in zip(h.tail.terms, h.tail.coef))
        tail_err = "" if h.tail.mape is None else f" (span MAPE {100 * h.tail.mape:.1f}% of the steps it applies to)"
        lines.append(f"  host tail           {tail}{tail_err}")
        lines.append(f"  host slow episodes: {100 * h.slow_share:.1f}% of steps, {h.slow_factor:.2f}x slower "
                     f"(left out of the fits)")
        lines.append(f"  host wake:          {1e3 * h.wake.coef[0]:.3f} ms arrival to loop (n={h.wake.n}), "
                     f"+{1e3 * h.wake_launch.coef[0]:.3f} ms launch after > {1e3 * h.wake_idle_s:.0f} ms idle "
                     f"(n={h.wake_launch.n}), {1e3 * h.wake_post.coef[0]:.3f} ms of it after a graph's replay, "
                     f"+{1e3 * h.wake_sched.coef[0]:.3f} ms schedule")
        if h.spec is not None:
            s = h.spec
            verify = s.launch.get("verify")
            lines.append(f"  host speculating:   launch/decode base {1e3 * s.launch['decode'].coef[0]:.3f} ms, "
                         + (f"launch/verify base {1e3 * verify.coef[0]:.3f} ms, " if verify is not None else "")
                         + f"sched base {1e3 * s.sched.coef[0]:.3f} ms, loop base {1e3 * s.loop.coef[0]:.3f} ms, "
                         f"wake {1e3 * s.wake.coef[0]:.3f} ms, +{1e3 * s.wake_sched.coef[0]:.3f} ms schedule"
                         + (f", launch spread p10-p90 {np.interp(0.1, s.spread.levels, s.spread.ratio):.2f}-"
                            f"{np.interp(0.9, s.spread.levels, s.spread.ratio):.2f}" if s.spread is not None else "")
                         + " (the profile's spec phase)")
    notes = json.loads(cal.provenance.notes or "{}")
    if "descheduled" in notes:
        lines.append(f"  descheduled steps:  {notes['descheduled']} of {notes['rows']} "
                     f"(the engine thread off the CPU; left out of the device fits)")
    for name, e in (notes.get("replay_error") or {}).items():
        lines.append(f"  replay {name:8s} MAPE {100 * e['mape']:.2f}% bias {100 * e['bias']:+.2f}% (n={e['n']})")
    for w, errs in (notes.get("workload_out_error") or {}).items():
        parts = ", ".join(f"{name} {100 * e['mape']:.2f}% (bias {100 * e['bias']:+.2f}%, n={e['n']})"
                          for name, e in errs.items())
        lines.append(f"  fitted without {w}: {parts}" if w != "all" else f"  one workload out, pooled: {parts}")
    return lines


def build_parser() -> argparse.ArgumentParser:
    from twinserve.engine.profiler import build_parser as profiler_parser

    ap = profiler_parser()
    ap.description = "Profile the engine and fit a calibration file (or refit step records)."
    ap.add_argument("--from-steps", default=None, help="fit these step records instead of profiling")
    ap.add_argument("--steps-out", default=None, help="also keep the profiled steps here (parquet)")
    ap.add_argument("--gpu", default=None, help="hardware name in the provenance (default: from the device)")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--token-graph-mode", choices=TOKEN_GRAPH_MODES, default=None,
                    help="with --from-steps: the token-graph mode of the engine that recorded a profile "
                         "without the graph_replay column (which steps were one graph replay)")
    ap.add_argument("--dense", choices=DENSE_MODELS, default="hinge",
                    help="the dense layers' time against their rows in prefill and mixed fits: a line "
                         "with one hinge chosen by cross-validation, or a piecewise-linear curve")
    ap.add_argument("--no-decode-scales", action="store_true",
                    help="decode graph sizes get an offset each but no factor (a line per size without its factor)")
    ap.add_argument("--rows", default=None, metavar="QUERY",
                    help="with --from-steps: fit only the step rows matching this pandas query "
                         "(e.g. 'calib_load != calib_load' leaves out the loaded-server replays)")
    ap.add_argument("--workload-out", action="store_true",
                    help="also score each replayed workload under a fit without it (one more fit per "
                         "workload; recorded in the notes as workload_out_error)")
    ap.add_argument("--overlap", choices=("auto", "on", "off"), default="auto",
                    help="whether host time hides behind device time (auto: the engine's mode)")
    return ap


def main(argv: Sequence[str] | None = None) -> Calibration:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = build_parser()
    args = ap.parse_args(argv)
    command = "python -m twinserve.experiments.calibrate " + " ".join(shlex.quote(a) for a in argv)
    if args.rows and not args.from_steps:
        ap.error("--rows needs --from-steps")
    if args.from_steps:
        steps = pd.read_parquet(args.from_steps)
        require_steps(steps)
        if args.rows:
            steps = select_rows(steps, args.rows)
        if args.token_graph_mode:
            steps = assume_token_graph_mode(steps, args.token_graph_mode)
        info: dict[str, Any] = {"from_steps": str(args.from_steps)}
        if "attn_tile" not in steps:  # recorded before the engine logged it: from the model
            group = recorded_gqa_group(args.model, args.tp)
            if group is not None:
                steps = with_attn_tile(steps, group)
                info["attn_tile_from_gqa_group"] = group
        model = Path(args.model).name if Path(args.model).is_dir() else args.model
        gpu = args.gpu or "cpu"
        dtype = args.dtype if args.dtype != "auto" else "unknown"
        seen = ran_overlapped(steps)  # auto: as the recording engine ran (else assume overlap)
        overlap = seen if seen is not None else True
    else:
        from twinserve.engine.profiler import profile_from_args

        res, model = profile_from_args(args)
        steps, info = res.steps, dict(res.info)
        require_steps(steps)
        gpu = args.gpu or gpu_key(str(info.get("gpu_name", "cpu")))
        dtype = str(info.get("dtype", "unknown"))
        overlap = bool(info.get("overlap")) if args.overlap == "auto" else args.overlap == "on"
        if args.steps_out:
            Path(args.steps_out).parent.mkdir(parents=True, exist_ok=True)
            steps.to_parquet(args.steps_out, index=False)
    if args.overlap != "auto":
        overlap = args.overlap == "on"
    cal = calibrate_steps(steps, gpu, model, args.tp, dtype, overlap, command, info, seed=args.seed,
                          dense=args.dense, decode_scales=not args.no_decode_scales,
                          workload_out=args.workload_out)
    out = Path(args.out or f"{args.work_dir}/{gpu}_{model}_tp{args.tp}.json")
    cal.save(out)
    CalibratedCostModel(out)  # the simulator can read what was written
    print("\n".join(summary_lines(cal)))
    print(f"wrote {out}")
    return cal


def cli() -> None:
    """``python -m twinserve.experiments.calibrate``: `main` with user errors as one line, exit 2."""
    from twinserve.core.cli_errors import report_user_errors, take_debug_flag

    argv = sys.argv[1:]
    debug = take_debug_flag(argv)
    report_user_errors("calibrate", debug, lambda: main(argv))


if __name__ == "__main__":
    cli()
