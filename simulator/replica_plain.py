"""`PlainReplica`: the loop of DESIGN.md, one step at a time or fast-forwarded."""

from __future__ import annotations

from typing import Generator

from twinserve.core.batch import Batch
from twinserve.core.request import ReqState
from twinserve.simulator.fast_forward import FastForward, StretchRun
from twinserve.simulator.replica import Replica, ReplicaSetup
from twinserve.simulator.timing import STEP_END, At


class PlainReplica(Replica):
    """The loop both backends share, step time from the cost model::

        batch = scheduler.schedule(env.now)
        yield env.timeout(wall time of the batch)
        scheduler.complete(batch, tokens, env.now)

    With nothing to run it waits until ``submit`` wakes it. Step time: device time
    ``cost.step_time(features)`` (times a noise factor when ``noise`` is set), host time
    ``cost.cpu_time``, wall time ``max`` or sum of the two as the model's ``overlap`` says (with
    speculation, ``cost.serial_wall`` for every step formed after a step with verify rows or
    while `SpecDecoding.may_draft_next` says a verify step may come: the engine runs those
    without overlap; the other steps draft nothing, as the engine's pending requests do not);
    the step record's ``duration`` is the device time and ``cpu_s`` the host time.

    With ``fast_forward`` (`FastForward`), right after each ``complete()`` a stretch of
    identical decode-only steps that start before the next arrival is applied in one event and
    the replica sleeps until its last step ends; the tables are the same bit for bit.

    On a `SharedDevice` each step, from its schedule to its completion, is the replica's turn
    in the host's round (so the replicas' steps serialize); fast-forward is then off
    (`simulate`).
    """

    mode = "plain"

    def __init__(self, setup: ReplicaSetup) -> None:
        # with speculation: the current step is priced without overlap (None: decided once formed)
        self._serial: bool | None = False
        self._after_verify = False  # the previous step had verify rows (the engine settled it at once)
        self._ff = FastForward(setup.sched, setup.cost, setup.steps, setup.index, setup.noise,
                               setup.max_stretch, setup.check, setup.plan) if setup.fast_forward else None
        super().__init__(setup)

    @property
    def num_stretches(self) -> int:
        return self._ff.num_stretches if self._ff is not None else 0

    @property
    def stretch_steps(self) -> int:
        return self._ff.stretch_steps if self._ff is not None else 0

    def _run(self) -> Generator:
        env, sched = self.env, self.sched
        while True:
            yield from self._take_turn()
            self._gate_spec()
            batch = self._schedule()
            self._after_verify = batch is not None and batch.drafts is not None
            if batch is None:
                self._end_turn()
                yield from self._wait_for_work()
                continue
            self._started(env.now)
            gpu, cpu, wall = self._step_cost(batch)
            rec = sched.record(batch, self.plan, env.now, gpu, cpu_s=cpu, replica=self.index)
            yield env.timeout(wall)
            self._complete(batch, rec, wall)
            self._end_turn()
            if self._ff is not None:
                now = env.now
                run = self._stretch(self._ff, now)
                if run is not None:
                    self.busy_s += run.end - now
                    yield At(env, run.end, STEP_END)

    def _schedule(self) -> Batch | None:
        return self.sched.schedule(self.env.now)

    def _gate_spec(self) -> None:
        """Before a step is formed with speculation: whether the engine would settle its
        in-flight step first (always after verify rows; else `SpecDecoding.may_draft_next`),
        which prices the step without overlap; if not, the step drafts nothing (``held``)."""
        spec = self.sched.spec
        if spec is None:
            return
        if not any(r.state is ReqState.RUNNING for r in self.sched.running):
            self._serial = None  # only admissions: no drafts; priced by the batch's running count
            spec.held = False
            return
        self._serial = self._after_verify or spec.may_draft_next(self.sched.running, settled=True)
        spec.held = not self._serial

    def _started(self, t: float) -> None:
        """A step starts at ``t``."""
        return None

    def _stretch(self, ff: FastForward, now: float) -> StretchRun | None:
        """Fast-forward from ``now`` if a stretch fits before the next arrival."""
        return ff.run(now, self._next_arrival(), one_past=False)

    def _step_cost(self, batch: Batch) -> tuple[float, float, float]:
        f = batch.features(self.plan)
        gpu, cpu = self.cost.step_costs(f)
        if self.noise is not None:
            gpu = gpu * self.noise.one()
        spec = self.sched.spec
        if spec is not None and self._serial is None:
            self._serial = spec.may_draft(self.sched.num_running)
        if spec is not None and self._serial:
            wall = self.cost.serial_wall(f, gpu, cpu)  # the engine settles it before forming the next
        else:
            wall = self.cost.wall_time(gpu, cpu)
        if spec is not None and batch.drafts is not None and spec.draft_price is not None:
            # a draft model's proposals run before the step, on the host's clock (sched time)
            d = spec.draft_price(self.cost, self.plan, batch)
            cpu += d
            wall += d
        return gpu, cpu, wall
