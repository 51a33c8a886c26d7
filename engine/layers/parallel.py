"""The tensor-parallel seam: which shard a layer holds and how partial results are combined."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

Collective = Callable[[torch.Tensor], torch.Tensor]


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


@dataclass(frozen=True)
class TPGroup:
    """A rank's place in its tensor-parallel group and the two collectives layers need.

    Contract: ``all_reduce(x)`` returns the element-wise sum of ``x`` over all ranks (row-parallel
    linears, vocab-parallel embedding); ``all_gather(x)`` concatenates ``x`` over ranks along the
    last dimension, in rank order (vocab-parallel LM head). With ``size == 1`` both are the
    identity and no layer calls them. `twinserve.engine.tp.comm.group_over` supplies
    torch.distributed-backed callables; layers never talk to torch.distributed themselves.
    """

    rank: int = 0
    size: int = 1
    all_reduce: Collective = _identity
    all_gather: Collective = _identity

    def __post_init__(self) -> None:
        if not (0 <= self.rank < self.size):
            raise ValueError(f"tp rank {self.rank} outside group of size {self.size}")

    def shard(self, total: int, what: str = "dimension") -> int:
        """The size of this rank's contiguous shard of ``total`` (which must divide evenly)."""
        if total % self.size:
            raise ValueError(f"{what} {total} is not divisible by tp_size {self.size}")
        return total // self.size


SINGLE = TPGroup()
