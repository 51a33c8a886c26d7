"""``python -m twinserve.experiments.fidelity_suite engine|report|repeat``: the suite's command line."""

from __future__ import annotations

import argparse
from typing import Sequence


def build_parser() -> argparse.ArgumentParser:
    from twinserve.experiments.fidelity_suite.workloads import SUITES

    ap = argparse.ArgumentParser(description="Simulator-vs-engine fidelity suite.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("engine", help="engine side: profile, capacity, runs at each load")
    e.add_argument("--model", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--suite", choices=tuple(SUITES), default="standard",
                   help="standard: azure_conv, azure_code, shared_prefix and sessions at 25/50/75/90 %% "
                        "load, the full profile grid; mooncake: the Mooncake conversation trace at "
                        "40/75 %% load, the long-context grid")
    e.add_argument("--budget-s", type=float, default=540.0,
                   help="wall-clock seconds; runs that no longer fit are skipped (inf: no limit, the "
                        "work is then bounded by --only, --profile-cases and the trace seconds)")
    e.add_argument("--profile-s", type=float, default=120.0,
                   help="0 = no calibration profile; else half of it is the grid's wall-clock time "
                        "and half the calibration replays' trace seconds")
    e.add_argument("--profile-cases", type=int, default=None,
                   help="run this many grid cases instead of half of --profile-s (a count bound)")
    e.add_argument("--calib-rate", type=float, default=20.0, help="req/s of the calibration replays")
    e.add_argument("--calib-loads", type=float, nargs="*", default=(), metavar="LOAD",
                   help="also replay each workload's calibration window at these fractions of its "
                        "measured capacity (after the capacity runs), for the steps of a loaded server")
    e.add_argument("--calib-load-s", type=float, default=10.0,
                   help="trace seconds of each --calib-loads replay")
    e.add_argument("--calib-load-requests", type=int, default=None,
                   help="replay this many requests per --calib-loads replay instead of --calib-load-s")
    e.add_argument("--duration-s", type=float, default=15.0, help="trace seconds per measured run")
    e.add_argument("--run-requests", type=int, default=None,
                   help="run this many requests per measured run instead of --duration-s (a count "
                        "that does not depend on the measured capacity)")
    e.add_argument("--cap-requests", type=int, default=200, help="requests sent at once to measure capacity")
    e.add_argument("--only", nargs="+", default=(), metavar="RUN",
                   help="run just these (e.g. sessions_90 shared_prefix_90)")
    e.add_argument("--capacity-from", default=None,
                   help="capacity.json of an earlier suite run (loads relative to it; no capacity runs)")
    e.add_argument("--progress", action="store_true")
    e.add_argument("overrides", nargs="*", help="twinserve-run overrides for every run (e.g. hardware=h200)")
    r = sub.add_parser("report", help="simulator side and tables")
    r.add_argument("runs", help="the engine side's --out")
    r.add_argument("--out", required=True)
    r.add_argument("--keep-sim", action="store_true", help="keep each simulator run folder")
    r.add_argument("--host-speed", action="store_true",
                   help="diagnostic: replay each engine run's measured host speed in the simulator")
    r.add_argument("sim_overrides", nargs="*", help="extra overrides for the simulator runs")
    rp = sub.add_parser("repeat", help="the engine against itself: two engine sides' common runs")
    rp.add_argument("runs", help="the first engine side's --out")
    rp.add_argument("again", help="the second engine side's --out (same overrides per run)")
    rp.add_argument("--out", required=True)
    return ap


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.cmd == "engine":
        from twinserve.experiments.fidelity_suite.engine_side import run_engine_suite

        run_engine_suite(args)
    elif args.cmd == "repeat":
        from twinserve.experiments.fidelity_suite.report import run_repeat

        run_repeat(args)
    else:
        from twinserve.experiments.fidelity_suite.report import run_report

        run_report(args)

