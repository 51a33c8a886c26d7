"""`Replica`: one SimPy process driving one `Scheduler` through the shared loop."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import replace
from typing import Any, Callable, Generator

from simpy import Event

from twinserve.core.batch import Batch, BatchFeatures
from twinserve.core.request import Req
from twinserve.simulator.cost.base import CostModel
from twinserve.simulator.cost.noise import StepNoise
from twinserve.simulator.fast_forward import FastForward
from twinserve.simulator.steps_log import StepLog
from twinserve.simulator.timing import STEP_END, At, SimEnvironment




def batch_tokens(batch: Batch) -> list[int]:
    """The token each request of ``batch`` samples: its trace answer at that output position
    (``output_hint``), 0 where nothing is sampled or no answer is known."""
    out = []
    for r, e, p in zip(batch.reqs, batch.emits, batch.out_pos):
        h = r.output_hint
        out.append(int(h[p]) if e and h is not None and p < len(h) else 0)
    return out


class Replica:
    """One serving replica: a scheduler, a cost model and the loop of DESIGN.md::

        batch = scheduler.schedule(env.now)
        yield env.timeout(wall time of the batch from the cost model)
        scheduler.complete(batch, tokens, env.now)

    With nothing to run it waits on an event that ``submit`` triggers. ``lag`` (the plain loop of
    a model fitted on an overlapping engine): a request that arrives while a step runs is first
    scheduled at the boundary after next, as the engine's overlap loop fixes each batch one step
    ahead; that is, a boundary admits the requests that arrived before the start of the step
    that just ended, and all of them when the replica would otherwise have nothing to run.
    Step time: device time
    ``cost.step_time(features)`` (times a noise factor when ``noise`` is set), host time
    ``cost.cpu_time``, wall time ``max`` or sum of the two as the model's ``overlap`` says; the
    step record's ``duration`` is the device time and ``cpu_s`` the host time.

    Fast-forward (``fast_forward=True``, `FastForward`): right after a ``complete()``, a stretch of
    identical decode-only steps that start before the next arrival (``next_arrival()``) is
    applied in one event and the replica sleeps once until its last step ends; the outcome is
    identical bit for bit. ``check`` runs ``check_invariants()`` after every step.
    """

    def __init__(self, env: SimEnvironment, index: int, sched: Any, cost: CostModel,
                 steps: StepLog, on_finish: Callable[[list[Req], int], None],
                 next_arrival: Callable[[], float], noise: StepNoise | None = None,
                 fast_forward: bool = True, check: bool = False, max_stretch: int = 4096,
                 pipeline: bool = False, lag: bool = False, host_speed: Any = None) -> None:
        self.env, self.index, self.sched, self.cost = env, index, sched, cost
        self.steps, self.noise = steps, noise
        self._on_finish, self._next_arrival = on_finish, next_arrival
        self.fast_forward, self.check, self.max_stretch = fast_forward, check, max_stretch
        self.pipeline = pipeline
        self.lag = lag and not pipeline
        self.host_speed = host_speed  # a `HostSpeed` replayed in the pipelined loop, or None
        self._lagged: deque[Req] = deque()  # arrived while a step ran, not yet schedulable
        self._wake: Event | None = None
        self.busy_s = 0.0
        self._ff = FastForward(sched, cost, steps, index, noise, max_stretch, check)
        self.process = env.process(self._run_pipelined() if pipeline else self._run())

    @property
    def num_stretches(self) -> int:
        return self._ff.num_stretches

    @property
    def stretch_steps(self) -> int:
        return self._ff.stretch_steps

    @property
    def idle(self) -> bool:
        """Waiting for a request (nothing it can run)."""
        return self._wake is not None

    # ---- called by the cluster ----------------------------------------------------------
    def submit(self, req: Req) -> None:
        """Queue ``req`` (``ValueError`` from the scheduler propagates) and wake the replica;
        with ``lag``, a request arriving while a step runs waits in ``_lagged``."""
        if self.lag and self._wake is None:
            self.sched.check(req)
            self._lagged.append(req)
            return
        self.sched.add(req)
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _admit(self, before: float) -> None:
        """Move the lagged requests that arrived at or before ``before`` into the scheduler."""
        q = self._lagged
        while q and q[0].arrival <= before:
            self.sched.add(q.popleft())

    def _next_visible(self) -> float:
        """The earliest arrival not yet in the scheduler (lagged or still to come)."""
        t = self._next_arrival()
        return min(self._lagged[0].arrival, t) if self._lagged else t

    # ---- the loop ---------------------------------------------------------------------------
    def _run(self) -> Generator:
        env, sched = self.env, self.sched
        last_start = -math.inf  # start of the step that ended last (``lag``)
        while True:
            self._admit(last_start)
            batch = sched.schedule(env.now)
            if batch is None and self._lagged:  # nothing else to run: the engine sees them now
                self._admit(math.inf)
                batch = sched.schedule(env.now)
            if batch is None:
                self._wake = env.event()
                yield self._wake
                self._wake = None
                continue
            last_start = env.now
            gpu, cpu, wall = self._step_cost(batch)
            rec = sched.record(batch, env.now, gpu, cpu_s=cpu, replica=self.index)
            yield env.timeout(wall)
            self._complete(batch, rec, wall)
            if self.fast_forward:
                self._admit(last_start)
                ff = self._stretch()
                if ff is not None:
                    end, last_start = ff
                    yield At(env, end, STEP_END)

    def _step_cost(self, batch: Batch) -> tuple[float, float, float]:
        gpu, cpu = self.cost.step_costs(batch.features())
        if self.noise is not None:
            gpu = gpu * self.noise.one()
        return gpu, cpu, self.cost.wall_time(gpu, cpu)

    def _complete(self, batch: Batch, rec: Any, wall: float) -> None:
        """After a step's wall time: deliver its tokens, log its record, hand on finished ones."""
        self.busy_s += wall
        finished = self.sched.complete(batch, batch_tokens(batch), self.env.now)
        self.steps.add(rec)
        if self.check:
            self.sched.check_invariants()
        if finished:
            self._on_finish(finished, self.index)

    def _run_pipelined(self) -> Generator:
        """The engine's overlap loop, host and device as two timelines. Iteration k starts at
        ``t``: ``schedule`` takes ``sched``; the step's device span starts when the device is
        free and the host has marked it (the mark also waits until the previous step has
        started on the device, as the engine's attention plan does); the host then spends
        ``launch``, waits for step k-1's device end, delivers its tokens (``complete`` of k-1),
        and spends ``loop`` before iteration k+1::

            mark = max(t + sched, dev_start[k-1]);  dev_start[k] = max(dev_end[k-1], mark)
            launched = (max(mark + pre, dev_end[k-1]) if sync else mark + pre) + launch
            ready = max(launched - post, mark) + device if graph else launched + tail
            dev_end[k] = max(dev_start[k] + device, ready)
            tokens of k-1 at max(launched, dev_end[k-1]);  next t = that + complete + loop

        A CUDA-graph step cannot start on the device before its replay was enqueued, ``post``
        before its launch ends (sampling and the token copy are launched after it); an eager step's
        kernels run as they are launched, so it ends no earlier than ``tail`` after the launch
        (a host-bound step); ``sync``: the launch waits for the previous step's device end
        once it has done ``pre`` of its own work.

        Host parts come from ``cost.host_parts`` (a calibration's ``host`` fits), slowed by
        ``host_speed`` at the iteration's start when one is given; a request
        arriving during iteration k is first scheduled in iteration k+1, as in the engine. After
        an idle wait the loop pays ``cost.wake_parts()``: its ``delay`` before the next iteration,
        and, when the wait (delay included) lasted longer than ``idle_s``, ``launch`` more launch
        work for the first step it launches. No fast-forward here (a batch is always in flight)."""
        env, sched, cost = self.env, self.sched, self.cost
        prev: tuple[Batch, Any, float, float, float] | None = None  # batch, rec, dev start, end, complete
        dev_end = -math.inf
        wake = cost.wake_parts()
        woke_launch = 0.0  # extra launch work of the first step after a long idle wait
        while True:
            t = env.now
            batch = sched.schedule(t)
            if batch is None and prev is None:
                idle_from = env.now
                self._wake = env.event()
                yield self._wake
                self._wake = None
                if wake.delay > 0.0:
                    yield env.timeout(wake.delay)
                woke_launch = wake.launch if env.now - idle_from > wake.idle_s else 0.0
                continue
            t_host = t
            launched = None
            loop = 0.0
            if batch is not None:
                f = batch.features()
                hp = self._host_parts(f, t)
                if woke_launch:
                    hp = replace(hp, launch=hp.launch + woke_launch)
                    woke_launch = 0.0
                gpu = hp.device if hp.device is not None else cost.step_time(f)
                if self.noise is not None:
                    gpu = gpu * self.noise.one()
                rec = sched.record(batch, t + hp.sched, gpu, cpu_s=hp.sched + hp.pre + hp.launch + hp.complete,
                                   replica=self.index)
                mark = t + hp.sched if prev is None else max(t + hp.sched, prev[2])
                d0 = max(dev_end, mark)
                t_host = (max(mark + hp.pre, dev_end) if hp.sync else mark + hp.pre) + hp.launch
                # a graph starts once enqueued (post before its launch ends); eager kernels run
                # as launched, ending >= tail after the launch
                ready = max(t_host - hp.post, mark) + gpu if hp.graph else t_host + hp.tail
                dev_end = max(d0 + gpu, ready)
                rec.duration = dev_end - d0  # the device span, as the engine's events measure it
                launched = (batch, rec, d0, dev_end, hp.complete)
                loop = hp.loop
            if prev is not None:
                t_tok = max(t_host, prev[3])
                if t_tok > env.now:
                    yield env.timeout(t_tok - env.now)
                self._complete(prev[0], prev[1], prev[3] - prev[2])
                t_host = t_tok + prev[4]
                if batch is None:
                    loop = self._host_parts(prev[0].features(), t).loop
            prev = launched
            nxt = t_host + loop
            if nxt > env.now:
                yield env.timeout(nxt - env.now)

    def _host_parts(self, f: BatchFeatures, t: float) -> Any:
        hp = self.cost.host_parts(f)
        return hp if self.host_speed is None else self.host_speed.scale(hp, t)

    def _stretch(self) -> tuple[float, float] | None:
        """Apply a fast-forward stretch if one of 2+ steps fits before the next arrival; return
        the time its last step ends (the replica sleeps until then) and when that step started,
        else None. With ``lag`` a step also fits when it starts after the arrival but the step
        before it did not (the arrival becomes schedulable one boundary later)."""
        now = self.env.now
        run = self._ff.run(now, self._next_visible(), self.lag)
        if run is None:
            return None
        self.busy_s += run.end - now
        return run.end, run.last_start
