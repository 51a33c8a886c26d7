"""The rank-0 broadcast seam for tensor parallelism.

Only rank 0 owns the engine's input socket. Before each step it gathers the adds and aborts that
arrived (a `StepInputs`) and hands them to a `RankBroadcast`, which makes every other rank apply
exactly the same inputs in the same order, so every rank's scheduler makes the same decisions.

``tp_size == 1`` uses `SingleRank` (nothing to share). A multi-rank implementation publishes the
encoded `StepInputs` on ``IpcPaths.ranks`` (PUB on rank 0, SUB on ranks >= 1) and the follower
ranks run `engine_worker` with a `RankBroadcast` whose ``receive`` blocks on that socket; it is not
built yet, and the launcher refuses ``tp_size > 1`` with a clear message until it is.
"""

from __future__ import annotations

from typing import Protocol

from twinserve.server.messages import StepInputs


class RankBroadcast(Protocol):
    """Contract: ``share(inputs)`` on rank 0 returns the inputs every rank must apply this step
    (rank 0 applies the returned value too); it must not reorder or drop entries."""

    def share(self, inputs: StepInputs) -> StepInputs: ...

    def close(self) -> None: ...


class SingleRank:
    """The tp=1 broadcast: there is no other rank, the inputs are returned unchanged."""

    def share(self, inputs: StepInputs) -> StepInputs:
        return inputs

    def close(self) -> None:
        return None


def make_broadcast(tp_size: int) -> RankBroadcast:
    if tp_size == 1:
        return SingleRank()
    raise NotImplementedError(
        f"the server runs tp_size=1 only for now (got tp_size={tp_size}); the rank-0 broadcast "
        "seam is in twinserve/server/broadcast.py")
