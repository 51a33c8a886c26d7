"""`sim` backend: the SimPy simulator with the configured cost model."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from twinserve.core.run_config import from_cfg
from twinserve.core.spec_step import combined_stats
from twinserve.core.workload import Workload
from twinserve.experiments.backends.base import BACKENDS, Backend, BackendResult, RunContext
from twinserve.experiments.build import (CalibrationMismatchWarning, cost_model, graph_plan,
                                         scheduler_config, scheduler_factory, sim_speculation,
                                         token_graph_mismatch)
from twinserve.simulator import SimConfig, simulate


@BACKENDS.register("sim")
class SimBackend(Backend):
    """Simulate ``replicas`` replicas behind ``router``; step times from ``cost_model``."""

    multi_replica = True

    def run(self, ctx: RunContext, workload: Workload) -> BackendResult:
        cfg, b = ctx.cfg, ctx.cfg["backend"]
        rc = from_cfg(cfg)
        tp = rc.tp
        sc = scheduler_config(cfg, ctx.shape, ctx.hardware)
        plan = graph_plan(cfg, ctx.shape, sc)
        choice = cost_model(cfg["cost_model"], ctx.shape, ctx.hardware, tp)
        mismatch = token_graph_mismatch(choice.model, plan, choice.source)
        if mismatch:
            warnings.warn(mismatch, CalibrationMismatchWarning, stacklevel=2)
        # speculation: no decode stretches (each step drafts anew), no lagged arrivals
        spec_on = sim_speculation(cfg)[0].enabled
        sim_cfg = SimConfig(
            replicas=rc.replicas, router=rc.router, router_kwargs=dict(rc.router_kwargs),
            fast_forward=bool(b["fast_forward"]) and not spec_on,
            check_invariants=bool(b["check_invariants"]), noise=bool(b["noise"]),
            seed=rc.seed, keep_steps=bool(b["keep_steps"]), max_stretch=int(b["max_stretch"]),
            progress=ctx.progress, pipeline=bool(b["pipeline"]),
            lag_arrivals=_lag(b["lag_arrivals"], choice.model.batch_ahead) and not spec_on,
            host_speed=_host_speed(b["host_speed_from"], choice.model, bool(b["pipeline"]))
            or _host_episodes(b["host_episodes"], choice.model, bool(b["pipeline"]), workload, rc.seed),
            plan=plan, share_device=bool(b["share_gpu"]))
        make = scheduler_factory(cfg, sc, checked=sim_cfg.check_invariants, num_layers=ctx.shape.num_layers)
        res = simulate(workload, make, choice.model, sim_cfg)
        steps = res.steps
        spec_meta = {}
        if spec_on:
            specs = [s.spec for s in make.made]
            spec_meta = {"spec": combined_stats(specs)}
            steps = with_spec_columns(steps, [sp.step_counts for sp in specs])
        stats = res.stats()
        timing = {k: stats.pop(k) for k in ("wall_s", "requests_per_wall_s", "sim_speedup")}
        meta = {"cost_model": choice.model.describe(), "cost_model_source": choice.source,
                "calibration_mismatch": mismatch,
                "num_pages": sc.num_pages, "page_size": sc.page_size,
                "max_model_len": sc.max_model_len, "loop": "pipelined" if sim_cfg.pipeline else "plain",
                "lag_arrivals": sim_cfg.lag_arrivals and not sim_cfg.pipeline,
                "host_episodes": sim_cfg.host_speed is not None and not b["host_speed_from"],
                "replicas_share_gpu": sim_cfg.share_device, **stats,
                **spec_meta}
        return BackendResult(res.requests, steps, res.rejected, meta, timing)


def with_spec_columns(steps: Any, counts: list[dict[int, list[int]]]) -> Any:
    """``steps`` with ``spec_num_draft_tokens`` and ``spec_num_accepted_tokens`` per row, from
    each replica's `SpecDecoding.step_counts` (0 for steps without verify rows)."""
    if steps is None or not len(steps):
        return steps
    d = np.zeros(len(steps))
    a = np.zeros(len(steps))
    for i, (rep, step) in enumerate(zip(steps["replica"].to_numpy(), steps["step"].to_numpy())):
        c = counts[int(rep)].get(int(step))
        if c is not None:
            d[i], a[i] = c
    return steps.assign(spec_num_draft_tokens=d, spec_num_accepted_tokens=a)


def _lag(value: object, auto: bool) -> bool:
    """``backend.lag_arrivals``: true, false, or "auto" (the cost model's ``batch_ahead``)."""
    if value is None or str(value).lower() == "auto":
        return auto
    if isinstance(value, bool):
        return value
    raise ValueError(f"backend.lag_arrivals must be true, false or auto, got {value!r}")


def _calibration_host(model: object) -> Any:
    """The cost model's calibration host fits (`HostFit`), or None."""
    return getattr(getattr(model, "calibration", None), "host", None)


def _pipelined_host(model: object, pipeline: bool, option: str) -> Any:
    """The calibration's host fits, which ``backend.<option>`` needs in the pipelined loop;
    ValueError without them or without the pipelined loop."""
    host = _calibration_host(model)
    if host is None or not pipeline:
        raise ValueError(f"backend.{option} needs backend.pipeline=true and a calibration with host parts")
    return host


def _host_speed(run_dir: object, model: object, pipeline: bool) -> object:
    """``backend.host_speed_from=ENGINE_RUN_DIR``: replay that engine run's measured host speed
    (`HostSpeed`, against the calibration's host fits) in the pipelined loop; None if unset."""
    if not run_dir:
        return None
    from pathlib import Path

    import pandas as pd

    from twinserve.calibration.host_fit import host_speed_trace
    from twinserve.simulator.host_speed import HostSpeed

    host = _pipelined_host(model, pipeline, "host_speed_from")
    times, factors = host_speed_trace(pd.read_parquet(Path(str(run_dir)) / "steps.parquet"), host)
    return HostSpeed(times, factors)


def _host_episodes(on: object, model: object, pipeline: bool, workload: Workload, seed: int) -> object:
    """``backend.host_episodes``: draw slow-host episodes with the calibration profile's share,
    slowdown and mean length (`HostSpeed.episodes`) for the pipelined loop. ``true`` needs that
    loop and a calibration with host parts (ValueError otherwise); ``auto`` draws them where
    both are there; None if off, or if the calibration found no episodes."""
    if on is None or str(on).lower() == "auto":
        on = pipeline and _calibration_host(model) is not None
    elif not isinstance(on, bool):
        raise ValueError(f"backend.host_episodes must be true, false or auto, got {on!r}")
    if not on:
        return None
    from twinserve.simulator.host_speed import HostSpeed

    host = _pipelined_host(model, pipeline, "host_episodes")
    if host.slow_share <= 0 or host.slow_episode_s <= 0:
        return None
    last = max((r.arrival for r in workload), default=0.0)
    return HostSpeed.episodes(host.slow_share, host.slow_factor, host.slow_episode_s,
                              horizon_s=2.0 * last + 120.0, seed=seed)
