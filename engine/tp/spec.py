"""`GroupSpec`: what a follower rank needs to join rank 0's group (pickled into a file)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GroupSpec:
    """The engine config every rank builds from, and where the group meets.

    ``store_port``: rank 0's rendezvous TCPStore on 127.0.0.1; ``workdir``: the private folder
    holding the control sockets and the ranks' error reports (``rank{r}.err``);
    ``timeout_s``: the collectives' time limit; ``start_timeout_s``: the rendezvous store's
    (joining, agreeing on the KV pool) during startup; ``num_threads``: torch
    intra-op threads per follower (rank 0's own setting); ``leader_pid``: rank 0's pid (a
    follower exits when it is gone).
    """

    engine_cfg: Any
    world_size: int
    store_port: int
    workdir: str
    timeout_s: float
    start_timeout_s: float
    num_threads: int
    leader_pid: int

    def error_path(self, rank: int) -> str:
        return f"{self.workdir}/rank{rank}.err"


def keys(what: str, ranks: range | list[int]) -> list[str]:
    """Rendezvous store keys ``what/r`` (``hello``: joined, ``pages``: local pool capacity,
    ``ready``: built and waiting for steps)."""
    return [f"{what}/{r}" for r in ranks]
