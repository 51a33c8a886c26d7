"""The fidelity suite: one engine per model measures its capacity and serves every workload at
25/50/75/90 % of it; the simulator then replays the same runs and the tables are written.

    # on the GPU host (one process per model; the engine is built and warmed up once):
    python -m twinserve.experiments.fidelity_suite engine --model llama3-8b --out RUNS [--budget-s 540]
        [--profile-s 120] [--duration-s 15] [--cap-requests 150] [overrides...]
    # here, after calibrating from RUNS/<model>/profile_steps.parquet:
    python -m twinserve.experiments.fidelity_suite report --out experiments/fidelity/h200 RUNS [sim overrides...]

``engine`` writes, under ``RUNS/<model>/``: ``profile_steps.parquet`` (the profiler's grid plus
replays of *other* trace windows than the measured runs at ``--calib-rate`` and, with
``--calib-loads``, at fractions of the measured capacity: the calibration's input),
``capacity.json`` (per workload: requests sent at once, completion time, req/s) and one run
folder per (workload, load) holding the engine's requests/steps/summary and ``overrides.json``;
``suite.json`` lists the stages, each followed by a ``host_probe`` (the host's speed on one
fixed mixed and one fixed decode step, `engine.host_bench`).
Runs are ordered 25/50/75 % of every workload first, 90 % last, and skipped (listed in
``suite.json``) when the budget runs out; ``--only`` and ``--capacity-from`` (an earlier
``capacity.json``, with ``--profile-s 0``) complete a suite that ran out of time. ``report`` reruns each folder's overrides with
``backend=sim`` (same KV pool size; the overlap loop when the engine overlapped), writes
``compare.md``/``compare.csv``/``step_diff.json`` per run and one ``fidelity.md`` table
(`twinserve.experiments.fidelity_report`). ``repeat RUNS AGAIN --out OUT`` compares the run
folders two engine sides share (the engine against itself: the floor under the simulator's error).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

LOADS: tuple[float, ...] = (0.25, 0.5, 0.75, 0.9)
HOST_PROBE_STEPS = 20  # steps per kind of the host probe noted after each stage (about a second)


@dataclass(frozen=True, slots=True)
class SuiteWorkload:
    """One workload of the suite: its overrides, how a load becomes its ``rate`` override
    (``per_rate`` requests/s per unit of ``workload.rate``), and the calibration replay's
    overrides (a different trace window or seed than the measured runs)."""

    name: str
    overrides: tuple[str, ...]
    per_rate: float = 1.0
    calib: tuple[str, ...] = ()


SUITE: tuple[SuiteWorkload, ...] = (
    SuiteWorkload("azure_conv", ("workload=azure_conv", "workload.start_s=900"),
                  calib=("workload=azure_conv", "workload.start_s=2400")),
    SuiteWorkload("azure_code", ("workload=azure_code", "workload.start_s=900"),
                  calib=("workload=azure_code", "workload.start_s=2400")),
    SuiteWorkload("shared_prefix", ("workload=shared_prefix", "workload.num_requests=null"),
                  calib=("workload=shared_prefix", "workload.num_requests=null", "seed=7")),
    SuiteWorkload("sessions", ("workload=sessions", "workload.think_time=2", "workload.num_sessions=2000"),
                  per_rate=0.0,  # measured from the generator (turns per session start)
                  calib=("workload=sessions", "workload.think_time=2", "workload.num_sessions=2000", "seed=7")),
)


def compose(overrides: Sequence[str]) -> Any:
    from twinserve.experiments.compare import compose_config

    return compose_config(list(overrides))


def _build(overrides: Sequence[str]) -> Any:
    from twinserve.experiments.build import build_workload, model_shape, plain

    cfg = plain(compose(overrides))
    return build_workload(cfg["workload"], model_shape(cfg["model"]).vocab_size)


def requests_per_rate(w: SuiteWorkload, base: Sequence[str], window_s: float) -> float:
    """Requests per second per unit of ``workload.rate`` over the first ``window_s`` seconds (1
    for request-rate workloads; for sessions it grows with the window as later turns arrive)."""
    if w.per_rate > 0:
        return w.per_rate
    probe = 20.0  # session starts per second in the probe: enough sessions to average over
    wl = _build([*base, *w.overrides, f"workload.rate={probe:g}", f"workload.duration_s={window_s:g}"])
    return len(wl) / window_s / probe


def load_overrides(w: SuiteWorkload, base: Sequence[str], req_rate: float, duration_s: float,
                   requests: int | None = None) -> list[str]:
    """The overrides of one measured run at ``req_rate`` requests/s for ``duration_s`` trace
    seconds, or, with ``requests``, of its first ``requests`` requests at that rate (a count
    that does not depend on the measured capacity)."""
    return [*base, *w.overrides, *_rate_overrides(w, base, req_rate, duration_s, requests)]


def _rate_overrides(w: SuiteWorkload, base: Sequence[str], req_rate: float, duration_s: float,
                    requests: int | None) -> list[str]:
    """``workload.rate`` for ``req_rate`` requests/s, and the trace seconds or request count."""
    window = duration_s if requests is None else requests / req_rate
    rate = f"workload.rate={req_rate / requests_per_rate(w, base, window):.6g}"
    if requests is None:
        return [rate, f"workload.duration_s={duration_s:g}"]
    return [rate, f"workload.num_requests={requests}"]


# ---- engine side (GPU host) ----------------------------------------------------------------
class _Suite:
    """Holds the one engine and the deadline; every stage checks the time left."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.perf_counter()
        self.base = [f"model={args.model}", "backend=engine", "print_summary=false", "progress=false",
                     *args.overrides]
        self.out = Path(args.out) / args.model
        self.out.mkdir(parents=True, exist_ok=True)
        self.log: dict[str, Any] = {"model": args.model, "base": self.base, "stages": [], "skipped": []}
        self.profile_frames: list[pd.DataFrame] = []

    def left(self) -> float:
        return self.args.budget_s - (time.perf_counter() - self.t0)

    def note(self, stage: str, **facts: Any) -> None:
        facts = {"stage": stage, "at_s": round(time.perf_counter() - self.t0, 1), **facts}
        self.log["stages"].append(facts)
        print(json.dumps(facts), flush=True)
        (self.out / "suite.json").write_text(json.dumps(self.log, indent=2))

    def build_engine(self) -> Any:
        from twinserve.engine.engine import Engine
        from twinserve.experiments.backends.base import RunContext
        from twinserve.experiments.backends.engine import engine_config
        from twinserve.experiments.build import hardware_spec, model_shape, plain

        cfg = plain(compose([*self.base, *SUITE[0].overrides]))
        ctx = RunContext(cfg, model_shape(cfg["model"]), hardware_spec(cfg["hardware"]), self.out, False)
        eng = Engine(engine_config(ctx))
        self.note("engine", warmup_s=round(eng.warmup(), 2), num_pages=eng.sched_config.num_pages,
                  overlap=bool(eng.overlap), device=str(eng.device), cpu_chase=eng.chaser is not None,
                  fast_plan=getattr(eng.attn, "fast_plan", None),
                  piecewise_max_tokens=eng.sched_config.piecewise_max_tokens)
        return eng

    def host_probe(self, eng: Any, after: str) -> None:
        """The host's speed now: `engine.host_bench` medians of a fixed mixed and decode step
        (``after``: the stage it follows), so that a slow-host stretch shows in ``suite.json``;
        with ``backend.cpu_chase`` also the host thread's vCPU and the chaser's moves so far."""
        from twinserve.engine.host_bench import host_bench

        stats, _ = host_bench(eng, steps=HOST_PROBE_STEPS)
        chase = {"host_cpu": eng.chaser.cpu, "cpu_moves": eng.chaser.moves} if eng.chaser is not None else {}
        self.note("host_probe", after=after, **{f"{s.kind}_{c}_ms": round(getattr(s, c) * 1e3, 3)
                                                for s in stats for c in ("launch_s", "duration")}, **chase)

    def profile(self, eng: Any) -> None:
        """Grid for half the profile seconds (or ``profile_cases`` cases, with no clock), then
        calibration replays of other windows at ``calib_rate`` over the other half in trace
        seconds; the rows are kept for `save_profile` (after any `load_replays`)."""
        from twinserve.engine.profiler import ProfileGrid, profile_engine

        a = self.args
        cuda = eng.device.type == "cuda"
        grid = ProfileGrid() if cuda else ProfileGrid.tiny()
        wall = None if a.profile_cases is not None else a.profile_s * 0.5
        res = profile_engine(eng, grid, wall, None, warmup=False, progress=a.progress,
                             max_cases=a.profile_cases)
        self.profile_frames.append(res.steps)
        self.note("profile_grid", rows=len(res.steps), cases=res.cases_run, skipped=res.cases_skipped)
        self.host_probe(eng, "profile_grid")
        per = a.profile_s * 0.5 / len(SUITE)
        for w in SUITE:
            self.calib_replay(eng, w, a.calib_rate, per)
        self.save_profile()

    def calib_replay(self, eng: Any, w: SuiteWorkload, req_rate: float, duration_s: float,
                     load: float | None = None, requests: int | None = None) -> None:
        """Replay ``w``'s calibration window (never a measured one) at ``req_rate`` for
        ``duration_s`` trace seconds (or its first ``requests`` requests) and keep its steps
        (``phase="replay"``; ``calib_req_s``, and ``calib_load`` when the rate is a fraction of
        the measured capacity)."""
        from twinserve.engine.replay import replay_workload

        wl = _build([*self.base, *w.calib, *_rate_overrides(w, self.base, req_rate, duration_s, requests)])
        _, recs = replay_workload(eng.cfg, wl, progress=False, engine=eng, warmup=False)
        rows = pd.DataFrame([{**r.as_row(), "phase": "replay", "case": -1, "workload": w.name,
                              "calib_req_s": float(req_rate),
                              "calib_load": float("nan") if load is None else float(load)} for r in recs])
        self.profile_frames.append(rows)
        tag = "" if load is None else f" at {load:.0%}"
        self.note("profile_replay", workload=w.name, requests=len(wl), rows=len(rows), req_s=round(req_rate, 3),
                  **({} if load is None else {"load": load}))
        self.host_probe(eng, f"profile_replay {w.name}{tag}")

    def load_replays(self, eng: Any, caps: dict[str, float]) -> None:
        """Calibration replays at each ``calib_loads`` fraction of every workload's capacity, so
        that the profile holds the step shapes of a loaded server (large decode batches beside
        prefill chunks) from windows that are not measured."""
        for load in self.args.calib_loads:
            for w in SUITE:
                if w.name in caps:
                    self.calib_replay(eng, w, load * caps[w.name], self.args.calib_load_s, load=load,
                                      requests=self.args.calib_load_requests)

    def save_profile(self) -> None:
        """Write every profile row so far to ``profile_steps.parquet`` (again after each part)."""
        if self.profile_frames:
            steps = pd.concat(self.profile_frames, ignore_index=True)
            steps.to_parquet(self.out / "profile_steps.parquet", index=False)

    def capacity(self, eng: Any, w: SuiteWorkload) -> float:
        """Requests/s when ``cap_requests`` of the workload arrive at once."""
        from twinserve.engine.replay import replay_workload

        wl = _build([*self.base, *w.overrides, "workload.rate=1", "workload.duration_s=100000"])
        wl = wl.head(self.args.cap_requests).scale_time(0.0)
        reqs, _ = replay_workload(eng.cfg, wl, progress=False, engine=eng, warmup=False)
        span = max(r.t_finish for r in reqs) if reqs else float("nan")
        cap = len(reqs) / span
        self.note("capacity", workload=w.name, requests=len(reqs), span_s=round(span, 3), req_per_s=round(cap, 3))
        return cap

    def run(self, eng: Any, w: SuiteWorkload, load: float, cap: float) -> None:
        from twinserve.experiments.backends.engine import EngineBackend
        from twinserve.experiments.run import run_experiment

        name = f"{w.name}_{round(load * 100)}"
        ov = load_overrides(w, self.base, load * cap, self.args.duration_s, self.args.run_requests)
        d = self.out / name
        s = run_experiment(compose(ov), d, backend=EngineBackend(eng))
        (d / "overrides.json").write_text(json.dumps({"overrides": ov, "load": load, "capacity_req_s": cap,
                                                      "target_req_s": load * cap}, indent=2))
        self.note("run", name=name, target_req_s=round(load * cap, 3),
                  served_req_s=round(s.get("request_throughput") or 0.0, 3), completed=s.get("completed"),
                  mean_ttft_ms=round(s.get("mean_ttft_ms") or 0.0, 2), mean_tpot_ms=round(s.get("mean_tpot_ms") or 0.0, 3))
        self.host_probe(eng, f"run {name}")


def run_plan(only: Sequence[str] = ()) -> list[tuple[SuiteWorkload, float]]:
    """(workload, load) pairs in run order: 25/50/75 % of every workload, then 90 %; ``only``
    keeps the named ones (``azure_conv_90`` ...)."""
    plan = [(w, ld) for ld in LOADS if ld < 0.9 for w in SUITE] + [(w, 0.9) for w in SUITE]
    if only:
        names = {f"{w.name}_{round(ld * 100)}" for w, ld in plan}
        unknown = sorted(set(only) - names)
        if unknown:
            raise ValueError(f"unknown suite runs {unknown}; known: {sorted(names)}")
        plan = [(w, ld) for w, ld in plan if f"{w.name}_{round(ld * 100)}" in set(only)]
    return plan


def run_engine_suite(args: argparse.Namespace) -> Path:
    plan = run_plan(args.only)
    suite = _Suite(args)
    eng = suite.build_engine()
    try:
        suite.host_probe(eng, "engine")
        if args.profile_s > 0:
            suite.profile(eng)
        if args.capacity_from:
            caps: dict[str, float] = json.loads(Path(args.capacity_from).read_text())
            suite.note("capacity_from", path=str(args.capacity_from), **{k: round(v, 3) for k, v in caps.items()})
        else:
            caps = {w.name: suite.capacity(eng, w) for w in SUITE if any(w is x for x, _ in plan)}
        (suite.out / "capacity.json").write_text(json.dumps(caps, indent=2))
        suite.host_probe(eng, "capacity")
        if args.profile_s > 0:
            suite.load_replays(eng, caps)
            suite.save_profile()
        for w, ld in plan:
            need = args.duration_s * (1.0 + ld) + 5.0
            if suite.left() < need:
                suite.log["skipped"].append(f"{w.name}_{round(ld * 100)}")
                suite.note("skip", name=f"{w.name}_{round(ld * 100)}", left_s=round(suite.left(), 1))
                continue
            suite.run(eng, w, ld, caps[w.name])
    finally:
        eng.shutdown()
    suite.note("done")
    return suite.out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="Simulator-vs-engine fidelity suite.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("engine", help="engine side: profile, capacity, runs at each load")
    e.add_argument("--model", required=True)
    e.add_argument("--out", required=True)
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
        run_engine_suite(args)
    elif args.cmd == "repeat":
        from twinserve.experiments.fidelity_report import run_repeat

        run_repeat(args)
    else:
        from twinserve.experiments.fidelity_report import run_report

        run_report(args)


if __name__ == "__main__":
    main()
