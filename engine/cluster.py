"""Several in-process engines behind one router: their devices and configs, and a workload
replayed on them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

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


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the replicas run: ``devices[r]`` is replica ``r``'s (its rank 0's). ``shared``: all
    on one GPU, each to get an equal share of its KV memory."""

    devices: list[str]
    shared: bool = False


def place_replicas(device: str, replicas: int, tp_size: int = 1, shared_ok: bool = False,
                   gpu_count: int | None = None) -> Placement:
    """All replicas on the CPU for a CPU device; on CUDA, replica ``r`` on ``cuda:(i + r * tp_size)``
    from ``device="cuda:i"`` (its TP ranks on the GPUs that follow) where there are that many
    GPUs (``gpu_count``, default the host's); else, with ``shared_ok`` and ``tp_size`` 1, all on
    ``cuda:i``, shared. UserError otherwise."""
    from twinserve.engine.executor import resolve_device

    dev = resolve_device(device, 0)
    if dev.type != "cuda":
        return Placement([str(dev)] * replicas)
    if gpu_count is None:
        import torch

        gpu_count = torch.cuda.device_count()
    base = dev.index or 0
    if base + replicas * tp_size <= gpu_count:
        return Placement([f"cuda:{base + r * tp_size}" for r in range(replicas)])
    if shared_ok and tp_size == 1 and base < gpu_count:
        return Placement([f"cuda:{base}"] * replicas, shared=True)
    share = " (replicas share one GPU only at tp=1)" if shared_ok else "; replicas sharing one GPU are not supported here"
    raise UserError(f"replicas={replicas} with tp={tp_size} from {dev} needs {base + replicas * tp_size} "
                    f"GPUs, this host has {gpu_count}{share}", "replicas")


def replica_devices(device: str, replicas: int, tp_size: int = 1) -> list[str]:
    """`place_replicas` without sharing: one GPU (or ``tp_size`` GPUs) per replica, or the CPU."""
    return place_replicas(device, replicas, tp_size).devices


def replica_configs(base: Any, placement: Placement, first_num_pages: int | None = None) -> list[Any]:
    """Each replica's `EngineConfig`: ``base`` on its device. On a shared GPU (and no explicit
    ``num_pages``), replica 0 takes ``mem_fraction / N`` of the memory free after its weights,
    and the others as many pages as it got (``first_num_pages``, known once it is built; None
    gives replica 0's config alone)."""
    n = len(placement.devices)
    cfgs = [replace(base, device=d) for d in placement.devices]
    if not placement.shared or base.num_pages is not None:
        return cfgs
    first = replace(cfgs[0], mem_fraction=base.mem_fraction / n)
    if first_num_pages is None:
        return [first]
    return [first] + [replace(c, num_pages=int(first_num_pages)) for c in cfgs[1:]]


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
