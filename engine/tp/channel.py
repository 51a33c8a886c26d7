"""The control plane: rank 0 sends each step's `StepInputs` to every other rank (ZMQ, IPC).

One PUSH socket per follower (rank 0 connects, the follower binds ``ipc://DIR/rank{r}``); a
message is a pickled ``("step", StepInputs)`` or ``("stop", None)``. Sends never block (no high
water mark), so a stuck follower cannot stall rank 0 here; the data plane's collectives and
rank 0's liveness checks catch it instead.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import replace
from typing import Any

import torch
import zmq

from twinserve.engine.step_inputs import StepInputs


def endpoint(workdir: str, rank: int) -> str:
    return f"ipc://{os.path.join(workdir, f'rank{rank}')}"


def encode(kind: str, inputs: StepInputs | None = None) -> bytes:
    if inputs is not None:
        inputs = replace(inputs, packed=inputs.packed.numpy())
    return pickle.dumps((kind, inputs), protocol=5)


def decode(data: bytes) -> tuple[str, StepInputs | None]:
    kind, inputs = pickle.loads(data)
    if inputs is not None:
        inputs = replace(inputs, packed=torch.from_numpy(inputs.packed))
    return kind, inputs


class StepSender:
    """Rank 0's end: ``send(kind, inputs)`` delivers one message to every follower, in order."""

    def __init__(self, workdir: str, ranks: list[int]) -> None:
        self.ctx = zmq.Context()
        self.socks = []
        for r in ranks:
            s = self.ctx.socket(zmq.PUSH)
            s.setsockopt(zmq.SNDHWM, 0)
            s.setsockopt(zmq.LINGER, 1000)
            s.connect(endpoint(workdir, r))
            self.socks.append(s)

    def send(self, kind: str, inputs: StepInputs | None = None) -> None:
        data = encode(kind, inputs)
        for s in self.socks:
            s.send(data, copy=False)

    def close(self) -> None:
        for s in self.socks:
            s.close()
        self.ctx.term()


class StepReceiver:
    """A follower's end: ``recv(alive)`` blocks for the next message, calling ``alive()`` about
    every ``poll_ms`` while idle and returning ``("stop", None)`` once it says rank 0 is gone."""

    def __init__(self, workdir: str, rank: int, poll_ms: int = 500) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.PULL)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint(workdir, rank))
        self.poll_ms = poll_ms

    def recv(self, alive: Any) -> tuple[str, StepInputs | None]:
        while not self.sock.poll(self.poll_ms):
            if not alive():
                return "stop", None
        return decode(self.sock.recv())

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()
