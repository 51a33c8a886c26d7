"""Small builders shared by the core tests."""

from __future__ import annotations

import numpy as np

from twinserve.core.config import SchedulerConfig
from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.core.scheduler import Scheduler
from twinserve.policies import build_scheduler


def make_req(rid: int, prompt: list[int] | np.ndarray | int, max_tokens: int = 4, arrival: float = 0.0,
             priority: int = 0, tenant: str = "default", ignore_eos: bool = True) -> Req:
    if isinstance(prompt, int):
        prompt = np.arange(1000 + 100 * rid, 1000 + 100 * rid + prompt)  # unique tokens per rid
    return Req(rid, np.asarray(prompt, dtype=np.int32),
               SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos, temperature=0.0),
               arrival=arrival, priority=priority, tenant=tenant)


def make_sched(scheduling: str = "fcfs", memory: str = "on_demand", cache: str = "radix",
               eos: tuple[int, ...] = (), **cfg: int | bool) -> Scheduler:
    defaults = dict(num_pages=64, page_size=4, max_num_batched_tokens=64, chunk_size=64, max_running=16)
    defaults.update(cfg)
    mem_kwargs = {"watermark": 0.0} if memory == "on_demand" else {}
    return build_scheduler(SchedulerConfig(**defaults), scheduling, memory, cache,
                           memory_kwargs=mem_kwargs, eos_token_ids=eos, checked=True)


def step(s: Scheduler, now: float, token: int = 7) -> tuple[list[tuple[int, int]], list[Req]]:
    """One schedule + complete; returns [(rid, new_tokens)] and the released requests."""
    b = s.schedule(now)
    if b is None:
        return [], []
    shape = [(r.rid, n) for r, n in zip(b.reqs, b.new_tokens)]
    ended = s.complete(b, [token] * len(b), now + 1.0)
    s.check_invariants()
    return shape, ended


def drain(s: Scheduler, t0: float = 0.0, max_steps: int = 10000) -> list[Req]:
    out: list[Req] = []
    t = t0
    for _ in range(max_steps):
        if not s.has_work:
            return out
        _, ended = step(s, t)
        out.extend(ended)
        t += 1.0
    raise AssertionError("scheduler did not drain")
