"""`PipelinedReplica`: the engine's overlap loop, host and device as two timelines."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Generator

from twinserve.core.batch import Batch, BatchFeatures
from twinserve.simulator.cost.noise import StepNoise
from twinserve.simulator.host_speed import scaled_host
from twinserve.simulator.replica import Replica, ReplicaSetup


class PipelinedReplica(Replica):
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

    Host parts come from ``cost.host_parts`` (a calibration's ``host`` fits), each step's
    multiplied by a factor drawn from ``cost.host_spread()`` where the model has one (on the
    stream of ``setup.host_seed``), and slowed by ``host_speed`` at the iteration's start when
    one is given; a request
    arriving during iteration k is first scheduled in iteration k+1, as in the engine. After
    an idle wait the loop pays ``cost.wake_parts()``: its ``delay`` before the next iteration,
    and, when the wait (delay included) lasted longer than ``idle_s``, ``launch`` more launch
    work for the first step it launches, ``post`` of it after a graph's replay. No fast-forward
    here (a batch is always in flight).

    On a `SharedDevice` an iteration, from ``schedule`` to the start of the next one, is the
    replica's turn in the host's round, and a step starts on the device no earlier than the end
    of the last step any replica launched there (``dev_start[k] >= shared.dev_end``), as
    engines stepped in turn by one thread on one GPU; the wake delay is then the host's, paid
    when every replica was idle, not this replica's.

    With speculation (``sched.spec``) the loop does what the engine's does: before forming a
    step that may have verify rows (`SpecDecoding.may_draft_next` of the running requests) it
    waits for the in-flight step's tokens and completes it, so that drafts start from known
    tokens; a step with verify rows is completed as soon as its device span ends, before the
    next iteration; a draft model's proposal time (``spec.draft_price``) is schedule work of
    every step with verify rows. Requests whose token is still in flight draft nothing (their
    ``pending`` token, as in the engine)."""

    mode = "pipelined"

    def __init__(self, setup: ReplicaSetup) -> None:
        self.host_speed = setup.host_speed  # a `HostSpeed` replayed over time, or None
        super().__init__(setup)
        spread = self.cost.host_spread()
        self.host_noise = StepNoise(*spread, setup.host_seed) if spread is not None else None

    def _run(self) -> Generator:
        env, sched, cost = self.env, self.sched, self.cost
        prev: tuple[Batch, Any, float, float, float] | None = None  # batch, rec, dev start, end, complete
        dev_end = -math.inf
        wake = cost.wake_parts()
        woke = False  # the next step is the first after a long idle wait (more launch work)
        spec = sched.spec
        while True:
            yield from self._take_turn()
            if spec is not None and prev is not None and spec.may_draft_next(sched.running):
                yield from self._settle(prev)  # drafts need every request's tokens known
                prev = None
            t = env.now
            batch = sched.schedule(t)
            if batch is None and prev is None:
                self._end_turn()
                idle_from = env.now
                yield from self._wait_for_work()
                if wake.delay > 0.0 and self.shared is None:  # a shared host paid it (`SharedDevice`)
                    yield env.timeout(wake.delay)
                woke = env.now - idle_from > wake.idle_s
                continue
            t_host = t
            launched = None
            loop = 0.0
            if batch is not None:
                f = batch.features(self.plan)
                hp = self._host_parts(f, t)
                if woke:
                    hp = replace(hp, sched=hp.sched + wake.sched, launch=hp.launch + wake.launch,
                                 post=hp.post + wake.post if hp.graph else hp.post)
                    woke = False
                if spec is not None and batch.drafts is not None and spec.draft_price is not None:
                    # the draft model proposes
                    hp = replace(hp, sched=hp.sched + spec.draft_price(cost, self.plan, batch))
                gpu = hp.device if hp.device is not None else cost.step_time(f)
                if self.noise is not None:
                    gpu = gpu * self.noise.one()
                rec = sched.record(batch, self.plan, t + hp.sched, gpu,
                                   cpu_s=hp.sched + hp.pre + hp.launch + hp.complete, replica=self.index)
                mark = t + hp.sched if prev is None else max(t + hp.sched, prev[2])
                d0 = max(dev_end, mark) if self.shared is None else max(dev_end, mark, self.shared.dev_end)
                t_host = (max(mark + hp.pre, dev_end) if hp.sync else mark + hp.pre) + hp.launch
                # a graph starts once enqueued (post before its launch ends); eager kernels run
                # as launched, ending >= tail after the launch
                ready = max(t_host - hp.post, mark) + gpu if hp.graph else t_host + hp.tail
                dev_end = max(d0 + gpu, ready)
                if self.shared is not None:
                    self.shared.ran_until(dev_end)
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
                    loop = self._host_parts(prev[0].features(self.plan), t).loop
            if launched is not None and launched[0].drafts is not None:  # a verify step settles at once
                if t_host > env.now:
                    yield env.timeout(t_host - env.now)
                yield from self._settle(launched)
                t_host, launched = env.now, None
            prev = launched
            nxt = t_host + loop
            if nxt > env.now:
                yield env.timeout(nxt - env.now)
            self._end_turn()

    def _settle(self, step: tuple[Batch, Any, float, float, float]) -> Generator:
        """Wait for ``step``'s device end (from now), deliver its tokens and spend its
        ``complete`` host time."""
        batch, rec, d0, d1, complete = step
        if d1 > self.env.now:
            yield self.env.timeout(d1 - self.env.now)
        self._complete(batch, rec, d1 - d0)
        if complete > 0.0:
            yield self.env.timeout(complete)

    @property
    def wake_delay(self) -> float:
        return self.cost.wake_parts().delay

    def _host_parts(self, f: BatchFeatures, t: float) -> Any:
        hp = self.cost.host_parts(f)
        if self.host_noise is not None:
            hp = scaled_host(hp, self.host_noise.one())
        return hp if self.host_speed is None else self.host_speed.scale(hp, t)
