"""The suite's engine side (GPU host): one engine per model profiles itself for the calibration,
measures its capacity on every workload and serves each at every load (`_Suite`,
`run_engine_suite`); what it writes is described in the package docstring."""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import pandas as pd

from twinserve.experiments.fidelity_suite.workloads import (SUITES, SuiteWorkload, build_suite_workload, compose,
                                                          load_overrides, rate_overrides, requests_per_rate,
                                                          run_plan)

HOST_PROBE_STEPS = 20  # steps per kind of the host probe noted after each stage (about a second)


class _Suite:
    """Holds the one engine and the deadline; every stage checks the time left."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.perf_counter()
        self.suite = SUITES[args.suite]
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

        cfg = plain(compose([*self.base, *self.suite.workloads[0].overrides]))
        ctx = RunContext(cfg, model_shape(cfg["model"]), hardware_spec(cfg["hardware"]), self.out, False)
        eng = Engine(engine_config(ctx))
        self.note("engine", warmup_s=round(eng.warmup(), 2), num_pages=eng.sched_config.num_pages,
                  overlap=bool(eng.overlap), device=str(eng.device),
                  fast_plan=getattr(eng.attn, "fast_plan", None),
                  piecewise_max_tokens=eng.plan.piecewise_max_tokens)
        return eng

    def host_probe(self, eng: Any, after: str) -> None:
        """The host's speed now: `bench.host_steps` medians of a fixed mixed and decode step
        (``after``: the stage it follows), so that a slow-host stretch shows in ``suite.json``."""
        from twinserve.bench.host_steps import host_bench

        stats, _ = host_bench(eng, steps=HOST_PROBE_STEPS)
        self.note("host_probe", after=after, **{f"{s.kind}_{c}_ms": round(getattr(s, c) * 1e3, 3)
                                                for s in stats for c in ("launch_s", "duration")})

    def profile(self, eng: Any) -> None:
        """Grid for half the profile seconds (or ``profile_cases`` cases, with no clock), then
        calibration replays of other windows at ``calib_rate`` over the other half in trace
        seconds; the rows are kept for `save_profile` (after any `load_replays`)."""
        from twinserve.engine.profiler import GRIDS, profile_engine

        a = self.args
        grid = GRIDS[self.suite.grid if eng.device.type == "cuda" else "tiny"]()
        wall = None if a.profile_cases is not None else a.profile_s * 0.5
        res = profile_engine(eng, grid, wall, None, warmup=False, progress=a.progress,
                             max_cases=a.profile_cases)
        self.profile_frames.append(res.steps)
        self.note("profile_grid", rows=len(res.steps), cases=res.cases_run, skipped=res.cases_skipped)
        self.host_probe(eng, "profile_grid")
        per = a.profile_s * 0.5 / len(self.suite.workloads)
        for w in self.suite.workloads:
            self.calib_replay(eng, w, a.calib_rate, per)
        self.save_profile()

    def calib_replay(self, eng: Any, w: SuiteWorkload, req_rate: float, duration_s: float,
                     load: float | None = None, requests: int | None = None) -> None:
        """Replay ``w``'s calibration window (never a measured one) at ``req_rate`` for
        ``duration_s`` trace seconds (or its first ``requests`` requests) and keep its steps
        (``phase="replay"``; ``calib_req_s``, and ``calib_load`` when the rate is a fraction of
        the measured capacity)."""
        from twinserve.engine.replay import replay_workload

        wl = build_suite_workload([*self.base, *w.calib, *rate_overrides(w, self.base, req_rate, duration_s, requests)])
        # from the first arrival: a window may open with a quiet stretch (azure_code's
        # calibration window waits 116 s for its first request), which would idle in real time
        wl = wl.first_seconds(math.inf)
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
            for w in self.suite.workloads:
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

        wl = build_suite_workload([*self.base, *w.overrides, "workload.rate=1", "workload.duration_s=100000"])
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


def run_engine_suite(args: argparse.Namespace) -> Path:
    suite = _Suite(args)
    plan = run_plan(args.only, suite.suite)
    eng = suite.build_engine()
    try:
        suite.host_probe(eng, "engine")
        if args.profile_s > 0:
            suite.profile(eng)
        if args.capacity_from:
            caps: dict[str, float] = json.loads(Path(args.capacity_from).read_text())
            suite.note("capacity_from", path=str(args.capacity_from), **{k: round(v, 3) for k, v in caps.items()})
        else:
            caps = {w.name: suite.capacity(eng, w) for w in suite.suite.workloads if any(w is x for x, _ in plan)}
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
