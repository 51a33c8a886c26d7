"""Shared builders for the simulator tests (fixtures only; test files import nothing local)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd
import pytest

from twinserve.core.config import SchedulerConfig
from twinserve.core.model_shapes import get_shape
from twinserve.core.workload import WORKLOADS, Workload
from twinserve.policies.factory import build_scheduler
from twinserve.simulator import COST_MODELS, SimConfig, SimResult, get_hardware, simulate


def _run(workload: Workload, *, scheduling: str = "fcfs", memory: str = "on_demand",
         cache: str = "radix", cost: Any = None, model: str = "llama3-8b", hardware: str = "h200",
         checked: bool = False, sched_kwargs: dict | None = None, **kw: Any) -> SimResult:
    """Simulate ``workload``; SchedulerConfig fields and SimConfig fields go in ``kw``."""
    sc_fields = set(SchedulerConfig.__dataclass_fields__)
    sc = SchedulerConfig(**{k: v for k, v in kw.items() if k in sc_fields})
    sim = SimConfig(**{k: v for k, v in kw.items() if k not in sc_fields})
    if cost is None:
        cost = COST_MODELS.create("roofline", shape=get_shape(model), hardware=get_hardware(hardware))

    def make() -> Any:
        return build_scheduler(SchedulerConfig(**{f: getattr(sc, f) for f in sc_fields}),
                               scheduling=scheduling, memory=memory, cache=cache,
                               scheduling_kwargs=sched_kwargs, checked=checked)

    return simulate(workload, make, cost, sim)


@pytest.fixture
def run_sim() -> Callable[..., SimResult]:
    return _run


@pytest.fixture
def poisson() -> Callable[..., Workload]:
    def make(n: int = 50, rate: float = 20.0, seed: int = 0, **kw: Any) -> Workload:
        kw.setdefault("prompt_len", {"dist": "uniform", "lo": 16, "hi": 600})
        kw.setdefault("output_len", {"dist": "uniform", "lo": 1, "hi": 120})
        return WORKLOADS.create("poisson", num_requests=n, rate=rate, seed=seed, **kw).with_vocab(1024)

    return make


def _timeline_steps(n: int, seed: int, sync: bool = False, pre: float = 0.0,
                    slow: tuple[int, int] | None = None, slow_factor: float = 2.0,
                    idle_every: int = 0, post: float | None = None, pieces_every: int = 0,
                    piece_launch: float = 0.0, wake_every: int = 0, wake_launch: float = 0.0,
                    wake_s: float = 0.0, verify_every: int = 0,
                    verify_extra: tuple[float, float, float] = (0.0, 0.0, 0.0), wake_post: float = 0.0,
                    prompt_every: int = 0, prompt_loop: float = 0.0, first_every: int = 0,
                    first_launch: float = 0.0, host_factor: float = 1.0, wake_sched: float = 0.0) -> pd.DataFrame:
    """Decode-only CUDA-graph steps laid out by the engine's overlap loop with known parts: sched
    50 us + 1 us/seq, launch 300 us + 2 us/seq, complete 40 us + 1 us/seq, loop 30 us, graph
    1 ms + 20 us/seq (it starts once launched). ``sync``: the launch waits for the previous
    step's device end after ``pre`` seconds of its own work (``launch_s`` then includes the
    wait, as the engine records it). Steps ``slow[0] .. slow[1]-1`` run every host part
    ``slow_factor`` times slower (a slow-host episode; device work unchanged). Every
    ``idle_every``-th iteration first waits 3 ms for work (the device falls idle). ``post``: the
    graph replay is enqueued that long (times the slow factor) before the launch ends, and the
    graph starts from then (``replay_end`` recorded); None: at the launch's end, no column.
    ``pieces_every``: every such step is recorded as one that ran the pieces (``graph_replay``
    and ``eager_step`` 0; the others ``graph_replay`` 1) and launches ``piece_launch`` longer.
    ``wake_every``: every such iteration (from the first) follows an idle wait instead: the
    previous step's tokens are delivered, the loop sleeps 10 ms, and the step is a lone prefill
    (no decodes) that schedules ``wake_sched`` and launches ``wake_launch`` longer and records
    ``wake_s``.
    ``verify_every``: every such step (from the second) has 1-3 rows that verify a draft
    (``verify_rows``; 0 on the others) and spends ``verify_extra`` (sched, launch, complete)
    seconds longer in those parts. ``wake_post``: a woken step's replay is enqueued that much
    earlier in its longer launch (more of it after the replay). ``prompt_every``: every such
    step (from the first) has one row that computes a prompt chunk (``num_prefills`` 1), and the
    loop after it takes ``prompt_loop`` longer. ``first_every``: every such step (from the
    second) has one first decode (``first_decodes`` 1) and launches ``first_launch`` longer.
    ``host_factor``: every host part of every step that much slower (another engine's host)."""
    rng = np.random.default_rng(seed)
    rows, t, dev_end, prev = [], 0.0, 0.0, None
    for i in range(n):
        f = (slow_factor if slow is not None and slow[0] <= i < slow[1] else 1.0) * host_factor
        if idle_every and i and i % idle_every == 0:
            t += 3e-3
        woke = bool(wake_every) and i > 0 and i % wake_every == 0
        if woke:
            prev["tokens_at"] = max(t, prev["dev_end"])
            t = max(t, prev["tokens_at"] + prev["complete_s"]) + 10e-3
            prev = None
        b = int(rng.integers(1, 64))
        pieces = bool(pieces_every) and i % pieces_every == 1
        sched, launch, comp, loop = f * (50e-6 + 1e-6 * b), f * (300e-6 + 2e-6 * b), f * (40e-6 + 1e-6 * b), f * 30e-6
        launch += f * piece_launch * pieces + wake_launch * woke
        sched += wake_sched * woke
        prompt = bool(prompt_every) and i % prompt_every == 0
        first = bool(first_every) and i % first_every == 1
        loop += prompt_loop * prompt
        launch += first_launch * first
        verify = int(rng.integers(1, 4)) if verify_every and i % verify_every == 1 else 0
        if verify:
            sched, launch, comp = (x + f * e for x, e in zip((sched, launch, comp), verify_extra))
        g = 1e-3 + 2e-5 * b
        mark = t + sched
        d0 = max(dev_end, mark)
        le = (max(mark + f * pre, dev_end) if sync else mark + f * pre) + launch
        enq = le if post is None else le - f * post - wake_post * woke
        d1 = max(d0, enq) + g
        row = dict(num_seqs=b, num_decodes=b, num_prefills=0, new_tokens=b, prefill_tokens=0,
                   decode_ctx=100 * b, prefill_ctx=0, prefill_attn=0, padded_decodes=b, max_ctx=100,
                   duration=d1 - d0, cpu_s=sched + launch + comp, iter_start=t, sched_s=sched,
                   launch_s=le - mark, launch_end=le, plan_wait_s=0.0, complete_s=comp,
                   tokens_at=np.nan, dev_start=d0, dev_end=d1)
        if post is not None:
            row["replay_end"] = enq
        if woke:
            row.update(num_decodes=0, num_prefills=1, prefill_tokens=b, prefill_ctx=b, decode_ctx=0, wake_s=wake_s)
        if pieces_every:
            row.update(graph_replay=int(not pieces), eager_step=0)
        if verify_every:
            row["verify_rows"] = verify
        if prompt_every:
            row.update(num_decodes=b - prompt, num_prefills=row["num_prefills"] + prompt)
        if first_every:
            row["first_decodes"] = int(first)
        dev_end = d1
        t_host = le
        if prev is not None:
            prev["tokens_at"] = max(t_host, prev["dev_end"])
            t_host = prev["tokens_at"] + prev["complete_s"]
        rows.append(row)
        prev = row
        t = t_host + loop
    prev["tokens_at"] = prev["dev_end"]
    return pd.DataFrame(rows)


@pytest.fixture
def timeline_steps() -> Callable[..., pd.DataFrame]:
    return _timeline_steps
