"""Several in-process engines behind one router: their devices, and a workload replayed on them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from twinserve.core.errors import UserError
from twinserve.core.records import StepRecord
from twinserve.core.request import Req
from twinserve.engine.engine import Engine
from twinserve.engine.replay import replay_open_loop
from twinserve.policies.routing import Router


@dataclass(slots=True)
class ClusterReplay:
    """What `replay_cluster` gives back: the accepted requests in arrival order, the replica each
    went to (``replicas[i]`` for ``requests[i]``), and every replica's step records of the replay
    with ``replica`` set, on the trace's clock."""

    requests: list[Req]
    replicas: list[int]
    steps: list[StepRecord]


def replica_devices(device: str, replicas: int, tp_size: int = 1) -> list[str]:
    """The device of each replica: all on the CPU for a CPU device; on CUDA, replica ``r`` on
    ``cuda:(i + r * tp_size)`` from ``device="cuda:i"`` (its TP ranks on the GPUs that follow).
    UserError when there are fewer GPUs than that (replicas sharing a GPU are not supported)."""
    import torch

    from twinserve.engine.executor import resolve_device

    dev = resolve_device(device, 0)
    if dev.type != "cuda":
        return [str(dev)] * replicas
    base = dev.index or 0
    have = torch.cuda.device_count()
    if base + replicas * tp_size > have:
        raise UserError(f"replicas={replicas} with tp={tp_size} from {dev} needs {base + replicas * tp_size} "
                        f"GPUs, this host has {have}; replicas sharing one GPU are not supported",
                        "replicas")
    return [f"cuda:{base + r * tp_size}" for r in range(replicas)]


def replay_cluster(engines: Sequence[Engine], router: Router, workload, progress: bool = True,
                   warmup: bool = True, answers: bool = True) -> ClusterReplay:
    """Replay ``workload`` open-loop on ``engines`` (idle, owned by the caller), each arriving
    request routed by ``router`` over the engines' live schedulers (`replay_open_loop`; one host
    thread steps the engines in turn). ``warmup`` first warms every engine (`Engine.warmup`).
    The engines are left idle with an empty prefix cache."""
    if warmup:
        for e in engines:
            e.warmup()
    n0 = [len(e.steps) for e in engines]
    reqs, picks = replay_open_loop(engines, router, workload, progress, answers)
    for e in engines:
        e.flush_cache()
    steps = [replace(rec, replica=k) for k, e in enumerate(engines) for rec in e.steps[n0[k]:]]
    return ClusterReplay(reqs, picks, steps)
