"""`sim` backend: the SimPy simulator with the configured cost model."""

from __future__ import annotations

from twinserve.core.workload import Workload
from twinserve.experiments.backends.base import BACKENDS, Backend, BackendResult, RunContext
from twinserve.experiments.build import cost_model, plain, scheduler_config, scheduler_factory
from twinserve.simulator import SimConfig, simulate


@BACKENDS.register("sim")
class SimBackend(Backend):
    """Simulate ``replicas`` replicas behind ``router``; step times from ``cost_model``."""

    def run(self, ctx: RunContext, workload: Workload) -> BackendResult:
        cfg, b = ctx.cfg, ctx.cfg["backend"]
        tp = int(cfg.get("tp", 1))
        sc = scheduler_config(cfg, ctx.shape, ctx.hardware)
        choice = cost_model(cfg["cost_model"], ctx.shape, ctx.hardware, tp)
        sim_cfg = SimConfig(
            replicas=int(cfg.get("replicas", 1)), router=str(cfg.get("router", "round_robin")),
            router_kwargs=dict(plain(cfg.get("router_kwargs")) or {}),
            fast_forward=bool(b.get("fast_forward", True)),
            check_invariants=bool(b.get("check_invariants", False)), noise=bool(b.get("noise", False)),
            seed=int(cfg.get("seed", 0)), keep_steps=bool(b.get("keep_steps", True)),
            max_stretch=int(b.get("max_stretch", 4096)), progress=ctx.progress,
            pipeline=bool(b.get("pipeline", False)),
            lag_arrivals=_lag(b.get("lag_arrivals", "auto"), choice.model.batch_ahead))
        res = simulate(workload, scheduler_factory(cfg, sc, checked=sim_cfg.check_invariants),
                       choice.model, sim_cfg)
        stats = res.stats()
        timing = {k: stats.pop(k) for k in ("wall_s", "requests_per_wall_s", "sim_speedup")}
        meta = {"cost_model": choice.model.describe(), "cost_model_source": choice.source,
                "num_pages": sc.num_pages, "page_size": sc.page_size,
                "max_model_len": sc.max_model_len, **stats}
        return BackendResult(res.requests, res.steps, res.rejected, meta, timing)


def _lag(value: object, auto: bool) -> bool:
    """``backend.lag_arrivals``: true, false, or "auto" (the cost model's ``batch_ahead``)."""
    if value is None or str(value).lower() == "auto":
        return auto
    if isinstance(value, bool):
        return value
    raise ValueError(f"backend.lag_arrivals must be true, false or auto, got {value!r}")
