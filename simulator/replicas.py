"""The replica loop modes by name, and `make_replica`."""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from twinserve.simulator.replica import Replica, ReplicaSetup
from twinserve.simulator.replica_lagged import LaggedReplica
from twinserve.simulator.replica_pipelined import PipelinedReplica
from twinserve.simulator.replica_plain import PlainReplica

REPLICA_LOOPS: Mapping[str, type[Replica]] = MappingProxyType(
    {cls.mode: cls for cls in (PlainReplica, LaggedReplica, PipelinedReplica)})


def make_replica(mode: str, setup: ReplicaSetup) -> Replica:
    """A replica running the loop ``mode`` (a key of `REPLICA_LOOPS`); its process starts now."""
    if mode not in REPLICA_LOOPS:
        raise ValueError(f"unknown replica loop '{mode}'; known: {', '.join(sorted(REPLICA_LOOPS))}")
    return REPLICA_LOOPS[mode](setup)
