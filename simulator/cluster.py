"""`simulate`: a workload through N simulated replicas behind a router."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generator

import numpy as np
import pandas as pd

from twinserve.core.graph_plan import DEFAULT_PLAN, GraphPlan
from twinserve.core.request import Req
from twinserve.core.workload import Workload
from twinserve.policies import ROUTING
from twinserve.policies.routing import SchedulerView
from twinserve.simulator.arrivals import ArrivalProcess
from twinserve.simulator.cost.base import CostModel
from twinserve.simulator.cost.noise import StepNoise
from twinserve.simulator.replica import Replica, ReplicaSetup
from twinserve.simulator.replicas import make_replica
from twinserve.simulator.shared_device import SharedDevice
from twinserve.simulator.requests_log import RequestLog
from twinserve.simulator.steps_log import StepLog
from twinserve.simulator.timing import SimEnvironment

# Random-stream ids: each source of randomness draws from SeedSequence([seed, SOURCE, ...]).
NOISE_STREAM = 1
HOST_STREAM = 2  # a pipelined replica's host spread (`PipelinedReplica`)


@dataclass(slots=True)
class SimConfig:
    """How to simulate (the policies and the cost model are passed separately).

    ``router`` names a `twinserve.policies.routing` router (built with ``router_kwargs``); it sees
    each replica through a `SchedulerView`.

    ``noise`` multiplies device step times by factors drawn from the cost model's residual
    quantiles, replica ``i`` on its own stream ``SeedSequence([seed, NOISE_STREAM, i])``; a
    pipelined replica draws its host spread from ``SeedSequence([seed, HOST_STREAM, i])``.
    ``check_invariants`` runs the scheduler's invariant checks after every step (slow).
    ``keep_steps=False`` keeps only the step count (less memory). ``progress`` shows a tqdm bar
    over simulated time. ``pipeline`` replays the engine's overlap loop as a host and a device
    timeline (`PipelinedReplica`, with the cost model's ``host_parts``), slower since
    nothing fast-forwards. ``lag_arrivals`` (plain loop only): a request arriving while a step
    runs is first scheduled one step boundary later, as an overlapping engine does
    (`LaggedReplica`). ``loop`` names the replica loop these select (`REPLICA_LOOPS`).
    ``host_speed`` (pipelined loop only): a `HostSpeed` slowing every replica's host parts over
    time (a diagnostic replay of a recorded run's host). ``plan``: how the simulated engine runs
    its steps (`GraphPlan`), for the step features the cost model prices. ``share_device``: all
    replicas run on one GPU and one host thread (`SharedDevice`), their steps taking turns in
    rounds and arrivals routed at each round's top, as ``backend=engine`` runs replicas that
    share a GPU; fast-forward is then off.
    """

    replicas: int = 1
    router: str = "round_robin"
    router_kwargs: dict[str, Any] = field(default_factory=dict)
    fast_forward: bool = True
    check_invariants: bool = False
    noise: bool = False
    seed: int = 0
    keep_steps: bool = True
    max_stretch: int = 4096
    progress: bool = False
    pipeline: bool = False
    lag_arrivals: bool = False
    host_speed: Any = None
    plan: GraphPlan = DEFAULT_PLAN
    share_device: bool = False

    @property
    def loop(self) -> str:
        """The replica loop mode: pipelined, lagged or plain."""
        if self.pipeline:
            return "pipelined"
        return "lagged" if self.lag_arrivals else "plain"


@dataclass(slots=True)
class SimResult:
    """What a simulation produced: per-request rows (sorted by rid; requests still queued at the
    end are included with NaN finish times), step rows (sorted by start, replica, step), the
    requests the schedulers refused (rid, reason), and counters."""

    requests: pd.DataFrame
    steps: pd.DataFrame
    rejected: list[tuple[int, str]]
    unfinished: int
    sim_time_s: float
    wall_s: float
    num_steps: int
    stretch_steps: int
    num_stretches: int
    busy_s: list[float]

    def stats(self) -> dict[str, Any]:
        n = len(self.requests) + len(self.rejected)
        return {
            "sim_time_s": self.sim_time_s,
            "wall_s": self.wall_s,
            "requests_per_wall_s": n / self.wall_s if self.wall_s > 0 else math.inf,
            "sim_speedup": self.sim_time_s / self.wall_s if self.wall_s > 0 else math.inf,
            "num_steps": self.num_steps,
            "fast_forward_steps": self.stretch_steps,
            "fast_forward_stretches": self.num_stretches,
            "num_rejected": len(self.rejected),
            "rejected_ids_head": [rid for rid, _ in self.rejected[:10]],
            "num_unfinished": self.unfinished,
            "replica_busy_fraction": [b / self.sim_time_s if self.sim_time_s > 0 else 0.0
                                      for b in self.busy_s],
        }


def simulate(workload: Workload, make_scheduler: Callable[[], Any], cost: CostModel,
             config: SimConfig | None = None) -> SimResult:
    """Run ``workload`` to completion on ``config.replicas`` replicas, each with its own scheduler
    from ``make_scheduler()`` and the shared (stateless) ``cost`` model.

    Deterministic: the same inputs give identical tables (see `timing` for the event order).
    """
    cfg = config or SimConfig()
    if cfg.replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {cfg.replicas}")
    t0 = time.perf_counter()
    env = SimEnvironment()
    steps = StepLog(keep=cfg.keep_steps)
    reqlog = RequestLog()
    rejected: list[tuple[int, str]] = []
    router = ROUTING.create(cfg.router, **dict(cfg.router_kwargs))
    replicas: list[Replica] = []
    scheds = [make_scheduler() for _ in range(cfg.replicas)]
    views = [SchedulerView(s) for s in scheds]

    def deliver(req: Req, now: float) -> None:
        i = router.choose(req, views, now) if len(views) > 1 else 0
        try:
            replicas[i].submit(req)
        except ValueError as e:
            rejected.append((req.rid, str(e)))

    # on a shared device arrivals wait at the host's door, routed at a round's top
    shared = SharedDevice(env, cfg.replicas) if cfg.share_device else None
    arrivals = ArrivalProcess(env, workload, deliver if shared is None else shared.arrive)  # runs first at t=0
    quant = cost.noise_quantiles() if cfg.noise else None
    fast_forward = cfg.fast_forward and shared is None
    for i, s in enumerate(scheds):
        noise = None
        if quant is not None:
            seed = int(np.random.SeedSequence([cfg.seed, NOISE_STREAM, i]).generate_state(1)[0])
            noise = StepNoise(quant[0], quant[1], seed)
        host_seed = int(np.random.SeedSequence([cfg.seed, HOST_STREAM, i]).generate_state(1)[0])
        setup = ReplicaSetup(env, i, s, cost, steps, reqlog.add, arrivals.next_time, noise,
                             cfg.check_invariants, fast_forward, cfg.max_stretch, cfg.host_speed, cfg.plan, shared,
                             host_seed)
        replicas.append(make_replica(cfg.loop, setup))
    if shared is not None:
        env.process(shared.serve(deliver, replicas[0].wake_delay))
    _run(env, workload, arrivals, replicas, cfg.progress)
    leftover = 0
    for i, s in enumerate(scheds):
        rest = [*s.waiting, *s.running]
        leftover += len(rest)
        if rest:
            reqlog.add(rest, i)
    return SimResult(
        requests=reqlog.frame(),
        steps=steps.frame(),
        rejected=rejected,
        unfinished=leftover,
        sim_time_s=float(env.now),
        wall_s=time.perf_counter() - t0,
        num_steps=steps.count,
        stretch_steps=sum(r.stretch_steps for r in replicas),
        num_stretches=sum(r.num_stretches for r in replicas),
        busy_s=[r.busy_s for r in replicas],
    )


def _run(env: SimEnvironment, workload: Workload, arrivals: ArrivalProcess,
         replicas: list[Replica], progress: bool) -> None:
    """Run until no event is left. With ``progress``, a monitor process wakes every 1/400 of the
    trace's span to move a tqdm bar over simulated time, and stops once every request has been
    delivered and every replica waits idle; it reads nothing the simulation writes, so results
    do not change."""
    if not progress:
        env.run()
        return
    from tqdm import tqdm

    horizon = float(workload.arrivals[-1]) if len(workload) else 0.0
    delta = max(horizon / 400.0, 1e-3)
    bar = tqdm(total=round(horizon, 1), unit="sim-s", desc="simulating", mininterval=0.5,
               bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} sim-s [{elapsed}<{remaining}]")

    def monitor() -> Generator:
        while not (arrivals.done and all(r.idle for r in replicas)):
            yield env.timeout(delta)
            bar.update(round(min(env.now, horizon), 1) - bar.n)

    env.process(monitor())
    try:
        env.run()
    finally:
        bar.close()
