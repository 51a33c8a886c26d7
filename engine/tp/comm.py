"""The data plane of a tensor-parallel group: a torch.distributed backend and the `TPGroup`
collectives the layers call.

The backend is a standalone ``ProcessGroupNCCL`` (CUDA) or ``ProcessGroupGloo`` (CPU) built on a
rendezvous store; nothing is registered in torch.distributed's global state, so several engines
(and the user's own process groups) can coexist in one process.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from twinserve.engine.layers.parallel import TPGroup
from twinserve.engine.tp.progress import Progress

STORE_PREFIX = "twinserve-tp"


def make_backend(store: Any, rank: int, size: int, device: torch.device, timeout_s: float) -> Any:
    """NCCL for CUDA devices, gloo (on the loopback interface) otherwise; every collective
    fails after ``timeout_s`` instead of waiting forever on a silent peer. Blocks until every
    rank has created its backend."""
    store = dist.PrefixStore(STORE_PREFIX, store)
    timeout = timedelta(seconds=timeout_s)
    if device.type == "cuda":
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, size, opts)
    opts = dist.ProcessGroupGloo._Options()
    opts._timeout = timeout
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
    return dist.ProcessGroupGloo(store, rank, size, opts)


def group_over(backend: Any, rank: int, size: int, progress: Progress | None = None) -> TPGroup:
    """The `TPGroup` whose collectives run on ``backend`` (see TPGroup's contract); each
    collective is reported to ``progress`` (entered, left) when given."""

    def all_reduce(x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        if progress is not None:
            progress.enter("all-reduce")
        backend.allreduce([x]).wait()
        if progress is not None:
            progress.leave()
        return x

    def all_gather(x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty((size * x.shape[0],) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
        if progress is not None:
            progress.enter("all-gather")
        backend._allgather_base(out, x).wait()  # rank r's x lands in rows [r*n, (r+1)*n)
        if progress is not None:
            progress.leave()
        return torch.cat(out.view((size,) + tuple(x.shape)).unbind(0), dim=-1)

    return TPGroup(rank=rank, size=size, all_reduce=all_reduce, all_gather=all_gather)


def check_group(group: TPGroup, device: torch.device) -> None:
    """One all-reduce of ones: every rank must see ``size`` (also creates NCCL's communicator
    eagerly, before any CUDA-graph capture)."""
    x = torch.ones(1, device=device)
    got = float(group.all_reduce(x).item())
    if got != group.size:
        raise RuntimeError(f"tensor-parallel self-check: all-reduce of ones gave {got}, expected {group.size}")


def shutdown_backend(backend: Any) -> None:
    """Release the backend's communicators without waiting on peers (best effort)."""
    for name in ("abort", "shutdown"):
        fn = getattr(backend, name, None)
        if fn is not None:
            try:
                fn()
                return
            except Exception:
                continue
