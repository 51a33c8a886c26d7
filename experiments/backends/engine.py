"""`engine` backend: the real engine replays the workload (imports torch only when run)."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

import pandas as pd

from twinserve.core.metrics import requests_frame
from twinserve.core.run_config import from_cfg
from twinserve.core.workload import Workload
from twinserve.experiments.backends.base import BACKENDS, Backend, BackendResult, RunContext


def steps_frame(records: list[Any]) -> pd.DataFrame:
    """StepRecords as rows (`StepRecord.as_row`), sorted by start."""
    rows = [r.as_row() for r in records]
    df = pd.DataFrame(rows)
    return df.sort_values(["start", "replica", "step"], kind="stable").reset_index(drop=True) if len(df) else df


@BACKENDS.register("engine")
class EngineBackend(Backend):
    """`twinserve.engine.replay.replay_workload` with an EngineConfig built from the run config.

    Without ``model.path`` the model shape's config.json is written into the run folder and the
    weights are random (``load_format=dummy``): timing is real, token values are not.
    ``backend.warmup`` (default true) runs `Engine.warmup` before the trace. Built with an
    ``engine``, every run replays on that engine (the caller owns it; its config must match the
    runs'), which saves building and warming one per run.

    ``replicas=N`` (N > 1) builds N engines in this process (`engine.cluster.place_replicas`:
    all on the CPU, one GPU each, or all on one GPU with an equal share of its KV memory each)
    and replays on them behind ``router`` (`replay_cluster`), the ``replica`` column of both
    tables filled.
    """

    multi_replica = True

    def __init__(self, engine: Any = None) -> None:
        self.engine = engine

    def run(self, ctx: RunContext, workload: Workload) -> BackendResult:
        if from_cfg(ctx.cfg).replicas > 1:
            return self._run_cluster(ctx, workload)
        from twinserve.engine.replay import replay_workload

        from twinserve.engine.engine import Engine

        b = ctx.cfg["backend"]
        eng = self.engine if self.engine is not None else Engine(engine_config(ctx))
        try:
            # speculation needs the model's own tokens: the trace's answers are not forced then
            reqs, records = replay_workload(eng.cfg, workload, progress=ctx.progress,
                                            warmup=bool(b["warmup"]), engine=eng,
                                            answers=eng.scheduler.spec is None)
            meta = {"hardware": device_hardware(eng), "engine_config": _used_config(eng)}
            if eng.scheduler.spec is not None:
                meta["spec"] = {**eng.scheduler.spec.stats(), **eng.spec_cutoff()}
        finally:
            if self.engine is None:
                eng.shutdown()
        return BackendResult(requests_frame(reqs, 0), steps_frame(records), _skipped(workload, reqs), meta)

    def _run_cluster(self, ctx: RunContext, workload: Workload) -> BackendResult:
        from twinserve.engine.cluster import place_replicas, replay_cluster, replica_configs
        from twinserve.engine.engine import Engine
        from twinserve.policies import ROUTING

        if self.engine is not None:
            raise ValueError("an EngineBackend built with one engine runs replicas=1 only")
        cfg, b = ctx.cfg, ctx.cfg["backend"]
        rc = from_cfg(cfg)
        router = ROUTING.create(rc.router, **dict(rc.router_kwargs))
        base = engine_config(ctx)
        placement = place_replicas(base.device, rc.replicas, base.tp_size, shared_ok=True)
        devices = placement.devices
        engines: list[Any] = []
        try:
            engines.append(Engine(replica_configs(base, placement)[0]))
            for c in replica_configs(base, placement, engines[0].sched_config.num_pages)[1:]:
                engines.append(Engine(c))
            out = replay_cluster(engines, router, workload, progress=ctx.progress,
                                 warmup=bool(b["warmup"]))
            meta = {"hardware": device_hardware(engines[0]), "engine_config": _used_config(engines[0]),
                    "replica_devices": devices, "replicas_share_gpu": placement.shared,
                    "replica_num_pages": [int(e.sched_config.num_pages) for e in engines]}
        finally:
            for e in engines:
                e.shutdown()
        by_replica: dict[int, list[Any]] = {}
        for r, k in zip(out.requests, out.replicas):
            by_replica.setdefault(k, []).append(r)
        frames = [requests_frame(rs, k) for k, rs in sorted(by_replica.items())]
        reqs = pd.concat(frames, ignore_index=True) if frames else requests_frame([], 0)
        reqs = reqs.sort_values("rid", kind="stable").reset_index(drop=True)
        return BackendResult(reqs, steps_frame(out.steps), _skipped(workload, out.requests), meta)


def _skipped(workload: Workload, reqs: list[Any]) -> list[tuple[int, str]]:
    """The workload's requests that no engine took, as (rid, reason)."""
    done = {r.rid for r in reqs}
    return [(s.rid, "skipped by the engine") for s in workload if s.rid not in done]


def device_hardware(eng: Any) -> str:
    """The hardware the engine ran on, as a preset name: ``cpu``, or the GPU's (``h200``)."""
    if eng.device.type != "cuda":
        return str(eng.device.type)
    import torch

    from twinserve.experiments.calibrate import gpu_key

    return gpu_key(torch.cuda.get_device_name(eng.device))


def _used_config(eng: Any) -> dict[str, Any]:
    """The engine's config fields of plain types, with what it resolved in their place: its
    loop (``overlap``) and its token-graph cap (``piecewise_max_tokens``, 0 where it captured
    no token graphs, e.g. on CPU), which the simulator matches (`compare.sim_matching_engine`).
    With speculation ``overlap`` is false (the simulator's loop then runs a step at a time) and
    ``spec_overlap`` says whether the engine overlapped its steps that could not speculate."""
    simple = (str, int, float, bool, type(None))
    out = {f.name: getattr(eng.cfg, f.name) for f in fields(eng.cfg) if isinstance(getattr(eng.cfg, f.name), simple)}
    spec = eng.scheduler.spec is not None
    out["overlap"] = bool(eng.overlap) and not spec
    if spec:
        out["spec_overlap"] = bool(eng.overlap)
    out["piecewise_max_tokens"] = int(eng.plan.piecewise_max_tokens)
    return out


def engine_config(ctx: RunContext) -> Any:
    """The `EngineConfig` of a run config (`engine.config.engine_config_from_run`; writes the
    shape's config.json into the run folder and loads dummy weights when there is no
    ``model.path``; a ``backend.load_format`` it overrides is still checked)."""
    from twinserve.engine.config import check_backend_values, engine_config_from_run

    cfg = ctx.cfg
    check_backend_values(cfg.get("backend") or {})
    model_path = cfg["model"].get("path")
    if model_path:  # backend.load_format, when given, is one of the run's backend keys
        return engine_config_from_run(cfg, str(model_path))
    mdir = ctx.out_dir / "model"
    mdir.mkdir(parents=True, exist_ok=True)
    (mdir / "config.json").write_text(json.dumps(ctx.shape.to_hf_config(), indent=2))
    return engine_config_from_run(cfg, str(mdir), load_format="dummy")
