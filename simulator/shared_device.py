"""`SharedDevice`: one GPU and one host thread that several replicas take turns on, in rounds."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Generator

from simpy import Event

from twinserve.core.request import Req
from twinserve.simulator.timing import SimEnvironment


@dataclass(slots=True)
class SharedDevice:
    """The device and host thread of replicas that share one GPU, as `backend=engine` runs them
    when there are fewer GPUs than replicas (`engine/replay.py` `replay_open_loop`): one host
    thread loops in rounds; at the top of a round it routes every request that has arrived,
    then steps each engine with work once, in index order; with nothing to step it sleeps until
    the next arrival. Their kernels queue on the one device.

    Contract: ``arrive(req)`` holds an arriving request at the door; `serve` (the host's
    process) hands the door's requests to ``route`` only at a round's top, so a request that
    arrives during any replica's turn waits for the round to end, and one routed to replica
    ``i`` then waits for the turns of replicas ``0 .. i-1``. A replica asks for its turn with
    ``turn(i)`` (an event that fires when the round reaches it) and gives it back with
    ``end_turn(i)``; it holds the turn for a whole loop iteration (schedule, launch, the wait
    for its tokens, their delivery), so iterations of different replicas never overlap in
    time. After sleeping with every replica idle the host pays ``wake_delay`` once before the
    round's top (the loop's wake-up). ``dev_end`` is when the device finishes the last step
    any of them launched, so a step starts on the device no earlier.
    Invariants: ``dev_end`` never decreases; at most one replica holds a turn."""

    env: SimEnvironment
    replicas: int
    dev_end: float = field(default=-math.inf)
    _door: list[Req] = field(default_factory=list)
    _knock: Event | None = None  # while the host sleeps: fires on the next arrival
    _gates: list[Event | None] = field(default_factory=list)
    _asking: list[bool] = field(default_factory=list)
    _done: Event | None = None  # while a replica holds its turn: fires when it ends

    def __post_init__(self) -> None:
        self._gates = [None] * self.replicas
        self._asking = [False] * self.replicas

    def ran_until(self, t: float) -> None:
        """A step launched on the device ends at ``t``."""
        self.dev_end = max(self.dev_end, t)

    # ---- arrivals ---------------------------------------------------------------------------
    def arrive(self, req: Req, now: float) -> None:
        """Hold ``req`` until the next round's top; wake the host if it sleeps."""
        self._door.append(req)
        if self._knock is not None and not self._knock.triggered:
            self._knock.succeed()

    # ---- turns (the replicas' side) ---------------------------------------------------------
    def turn(self, i: int) -> Event:
        """Replica ``i`` asks for its turn: an event that fires when the round reaches it."""
        self._asking[i] = True
        return self._gate(i)

    def end_turn(self, i: int) -> None:
        """Replica ``i`` gives its turn back; the round moves on."""
        self._gates[i] = None
        done, self._done = self._done, None
        done.succeed()

    def _gate(self, i: int) -> Event:
        if self._gates[i] is None:
            self._gates[i] = self.env.event()
        return self._gates[i]

    # ---- the host thread --------------------------------------------------------------------
    def serve(self, route: Callable[[Req, float], None], wake_delay: float = 0.0) -> Generator:
        """The host's process: rounds forever (it ends with the simulation's last event).
        ``route(req, now)`` sends a request to a replica (`Replica.submit`), which wakes it if
        idle; a woken replica asks for its turn at the same instant, before the round goes on."""
        env = self.env
        while True:
            if self._door:
                door, self._door = self._door, []
                for req in door:
                    route(req, env.now)
                yield env.timeout(0.0)  # the replicas woken by ``route`` ask for their turn
            stepped = False
            for i in range(self.replicas):
                if not self._asking[i]:
                    continue
                stepped = True
                self._asking[i] = False
                self._done = env.event()
                self._gate(i).succeed()
                yield self._done
            if not stepped and not self._door:
                self._knock = env.event()
                yield self._knock
                self._knock = None
                if wake_delay > 0.0:
                    yield env.timeout(wake_delay)
