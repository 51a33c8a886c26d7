"""`SharedDevice`: one GPU and one host thread that several replicas take turns on."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from simpy import Resource

from twinserve.simulator.timing import SimEnvironment


@dataclass(slots=True)
class SharedDevice:
    """The device and host thread of replicas that share one GPU, as `backend=engine` runs them
    when there are fewer GPUs than replicas (`engine/cluster.py`): one host thread steps every
    engine with work once, in turn, and their kernels queue on the one device.

    Contract: a replica holds ``host`` (capacity 1, FIFO) for a whole loop iteration (schedule,
    launch, the wait for its tokens, their delivery), so iterations of different replicas never
    overlap in time and take turns in the order they asked; ``dev_end`` is when the device
    finishes the last step any of them launched, so a step starts on the device no earlier.
    Invariant: ``dev_end`` never decreases."""

    host: Resource
    dev_end: float = field(default=-math.inf)

    @classmethod
    def on(cls, env: SimEnvironment) -> SharedDevice:
        """A shared device with a free host thread in ``env``."""
        return cls(Resource(env, capacity=1))

    def ran_until(self, t: float) -> None:
        """A step launched on the device ends at ``t``."""
        self.dev_end = max(self.dev_end, t)
