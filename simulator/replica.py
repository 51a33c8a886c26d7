"""`Replica`: what every loop mode of one simulated serving replica shares."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, ClassVar, Generator

import numpy as np
from simpy import Event

from twinserve.core.batch import Batch
from twinserve.core.graph_plan import GraphPlan
from twinserve.core.records import StepRecord
from twinserve.core.request import Req
from twinserve.core.scheduler import Scheduler
from twinserve.simulator.cost.base import CostModel
from twinserve.simulator.cost.noise import StepNoise
from twinserve.simulator.host_speed import HostSpeed
from twinserve.simulator.shared_device import SharedDevice
from twinserve.simulator.steps_log import StepLog
from twinserve.simulator.timing import SimEnvironment


def batch_tokens(batch: Batch) -> list[int]:
    """The token each request of ``batch`` samples: its trace answer at that output position
    (``output_hint``), 0 where nothing is sampled or no answer is known."""
    out = []
    for r, e, p in zip(batch.reqs, batch.emits, batch.out_pos):
        h = r.output_hint
        out.append(int(h[p]) if e and h is not None and p < len(h) else 0)
    return out


def batch_verified(batch: Batch) -> list | None:
    """Per row of a batch with verify rows (``batch.drafts``), the answer's tokens at its
    ``1 + d`` positions (None for plain rows); None for a batch without verify rows."""
    if batch.drafts is None:
        return None
    out: list = []
    for r, d, e, p in zip(batch.reqs, batch.drafts, batch.emits, batch.out_pos):
        if not (d and e):
            out.append(None)
            continue
        h = r.output_hint
        v = np.zeros(d + 1, dtype=np.int64)
        seg = h[p - d:p + 1]
        v[:seg.size] = seg
        out.append(v)
    return out


@dataclass(frozen=True, slots=True)
class ReplicaSetup:
    """What a replica is built from: its place in the cluster (``env``, ``index``), its
    scheduler and the shared cost model, the step log, ``on_finish(reqs, index)`` for released
    requests, ``next_arrival()`` (the time of the next request not yet delivered), its noise
    stream, the loop knobs of `SimConfig` (each mode reads the ones it documents) and the
    simulated engine's `GraphPlan`, which its step features follow. ``shared``: the
    `SharedDevice` it takes turns on with the other replicas, or None for a GPU of its own.
    ``host_seed``: the seed of its host-spread stream (`PipelinedReplica`)."""

    env: SimEnvironment
    index: int
    sched: Scheduler
    cost: CostModel
    steps: StepLog
    on_finish: Callable[[list[Req], int], None]
    next_arrival: Callable[[], float]
    noise: StepNoise | None
    check: bool
    fast_forward: bool
    max_stretch: int
    host_speed: HostSpeed | None
    plan: GraphPlan
    shared: SharedDevice | None = None
    host_seed: int = 0


class Replica(ABC):
    """One serving replica: a scheduler, a cost model and one SimPy process running the loop
    its subclass defines (``_run``; the modes are in `twinserve.simulator.replicas`).

    Contract: ``submit(req)`` queues a request (the scheduler's ``ValueError`` propagates) and
    wakes the replica when it waits for work (``idle``); ``busy_s`` sums the wall time of the
    steps it ran; ``num_stretches`` / ``stretch_steps`` count fast-forwarded stretches and their
    steps (0 in modes without fast-forward). ``check`` runs ``check_invariants()`` after every
    step. The process starts when the replica is built. A replica whose scheduler speculates
    prices its steps with ``cost.speculating()``.
    """

    mode: ClassVar[str]

    def __init__(self, setup: ReplicaSetup) -> None:
        self.env, self.index, self.sched = setup.env, setup.index, setup.sched
        self.cost = setup.cost if setup.sched.spec is None else setup.cost.speculating()
        self.steps, self.noise, self.check, self.plan = setup.steps, setup.noise, setup.check, setup.plan
        self._on_finish, self._next_arrival = setup.on_finish, setup.next_arrival
        self.shared = setup.shared
        self._turn = False  # holding its turn on ``shared`` during an iteration
        self._wake: Event | None = None
        self.busy_s = 0.0
        self.process = setup.env.process(self._run())

    @property
    def idle(self) -> bool:
        """Waiting for a request (nothing it can run)."""
        return self._wake is not None

    @property
    def num_stretches(self) -> int:
        return 0

    @property
    def stretch_steps(self) -> int:
        return 0

    def submit(self, req: Req) -> None:
        """Queue ``req`` and wake the replica."""
        self.sched.add(req)
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    @abstractmethod
    def _run(self) -> Generator:
        """The replica's process: the loop of its mode."""

    def _wait_for_work(self) -> Generator:
        """Sleep until ``submit`` wakes the replica."""
        self._wake = self.env.event()
        yield self._wake
        self._wake = None

    @property
    def wake_delay(self) -> float:
        """The loop's delay from the arrival that ends an idle wait to its next iteration (0
        here); on a `SharedDevice` the host pays it, once, when every replica was idle."""
        return 0.0

    def _take_turn(self) -> Generator:
        """On a shared device, wait for this replica's turn in the host's round and hold it;
        nothing otherwise."""
        if self.shared is not None:
            yield self.shared.turn(self.index)
            self._turn = True

    def _end_turn(self) -> None:
        """Give the shared host thread back (a no-op when not holding it)."""
        if self._turn:
            self.shared.end_turn(self.index)
            self._turn = False

    def _complete(self, batch: Batch, rec: StepRecord, wall: float) -> None:
        """After a step's wall time: deliver its tokens, log its record, hand on finished ones."""
        self.busy_s += wall
        finished = self.sched.complete(batch, batch_tokens(batch), self.env.now, batch_verified(batch))
        self.steps.add(rec)
        if self.check:
            self.sched.check_invariants()
        if finished:
            self._on_finish(finished, self.index)
