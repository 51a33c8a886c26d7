"""Replicas on one shared GPU run in the host's rounds: arrivals are routed at a round's top, then
every replica with work takes one turn, in index order (as `replay_open_loop` steps engines)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from twinserve.core.batch import BatchFeatures
from twinserve.core.workload import RequestSpec, Workload
from twinserve.simulator.cost.base import CostModel, HostParts, WakeParts

STEP = 0.010  # device time of every step
SCHED = 0.001  # host parts of the pipelined loop: sched, launch, complete, loop
HOST = HostParts(SCHED, 0.002, 0.001, 0.0005)


class _Fixed(CostModel):
    """``STEP`` of device time per step, no host time in the plain loop, ``HOST`` in the
    pipelined one, and an idle wake-up of ``wake`` seconds."""

    def __init__(self, wake: float = 0.0) -> None:
        self.wake = wake

    def _gpu(self, x: Any, mx: Any) -> Any:
        return x.num_seqs * 0.0 + STEP

    def host_parts(self, f: BatchFeatures) -> HostParts:
        return HOST

    def wake_parts(self) -> WakeParts:
        return WakeParts(self.wake, 0.0, 0.0)


def _workload(*specs: tuple[float, int]) -> Workload:
    """Requests ``rid = i`` arriving at ``specs[i][0]`` with a 32-token prompt and
    ``specs[i][1]`` output tokens."""
    return Workload([RequestSpec(i, t, 32, n) for i, (t, n) in enumerate(specs)], vocab_size=1024)


def _kw(pipeline: bool = False, wake: float = 0.0) -> dict:
    return dict(cost=_Fixed(wake), num_pages=256, page_size=16, pipeline=pipeline, router="round_robin",
                replicas=2, share_device=True, checked=True)


def test_a_request_arriving_during_another_replicas_turn_waits_for_the_next_round(run_sim) -> None:
    # plain loop, 10 ms turns: r0 [0, 10], r1 [10, 20], round top 20, r0 [20, 30], r1 [30, 40],
    # top 40, r0 [40, 50], r1 [50, 60], top 60, r0 [60, 70], r1 from 70
    wl = _workload((0.0, 20), (0.0, 20), (0.035, 5), (0.045, 5))
    res = run_sim(wl, **_kw())
    r = res.requests.set_index("rid")
    assert r["replica"].tolist() == [0, 1, 0, 1]
    # rid 2 (to r0) arrives in r1's turn: routed at the top at 40, r0 schedules it at once
    assert r.loc[2, "scheduled_s"] == pytest.approx(0.040)
    # rid 3 (to r1) arrives in r0's turn: routed at the top at 60, after r1's turn at 50 began,
    # and scheduled once r0's turn of that round has ended
    assert r.loc[3, "scheduled_s"] == pytest.approx(0.070)
    assert r.loc[3, "first_token_s"] == pytest.approx(0.080)


def _turn_starts(res: Any, k: int) -> np.ndarray:
    """When replica ``k``'s pipelined iterations that scheduled a step began."""
    s = res.steps
    return np.sort(s.loc[s["replica"] == k, "start"].to_numpy() - SCHED)


def test_pipelined_replica_one_schedules_after_replica_zeros_next_turn(run_sim) -> None:
    # replica 0 stays busy (rid 0's long output), so every round starts with its turn; the
    # others arrive at random times and alternate between the replicas
    rng = np.random.default_rng(3)
    times = np.sort(rng.uniform(0.0, 1.5, 40))
    wl = _workload((0.0, 200), *((float(t), int(rng.integers(5, 40))) for t in times))
    res = run_sim(wl, **_kw(pipeline=True))
    t0, t1 = _turn_starts(res, 0), _turn_starts(res, 1)
    r = res.requests
    late = 0
    for _, q in r[r["rid"] > 0].iterrows():
        a, s = q["arrival_s"], q["scheduled_s"]
        top = t0[np.searchsorted(t0, a - 1e-12)]  # the first round top at or after the arrival
        if q["replica"] == 0:
            assert s == pytest.approx(top, abs=1e-9)
            continue
        first = t1[np.searchsorted(t1, a - 1e-12)]  # replica 1's first turn after the arrival
        expect = t1[np.searchsorted(t1, top)]  # its first turn once the request was routed
        assert s == pytest.approx(expect, abs=1e-9)
        late += bool(expect > first + 1e-9)
    assert late > 0  # some arrived during replica 0's turn and missed replica 1's next one


def test_the_host_wakes_once_for_all_idle_and_not_for_a_replica_joining_busy_rounds(run_sim) -> None:
    wake = 0.1
    # rid 1 (r1) is done early; rid 3 comes to an idle r1 while r0 still serves rid 0 and rid 2;
    # rid 4 comes when both are long idle
    wl = _workload((0.0, 60), (0.0, 2), (0.2, 40), (0.3, 3), (3.0, 3))
    res = run_sim(wl, **_kw(pipeline=True, wake=wake))
    r = res.requests.set_index("rid")
    assert r["replica"].tolist() == [0, 1, 0, 1, 0]
    queue = r["scheduled_s"] - r["arrival_s"]
    # r1 is stepped in r0's rounds: within two turns, no wake-up
    assert queue[3] < 3 * (STEP + HOST.sched + HOST.launch)
    assert queue[3] < wake
    # every replica idle: the host sleeps, then pays the wake-up before routing
    assert queue[4] == pytest.approx(wake)


def test_shared_turns_counts_the_requests_that_missed_their_replicas_step(run_sim) -> None:
    from twinserve.experiments.shared_turns import replica_turns

    wl = _workload((0.0, 20), (0.0, 20), (0.035, 5), (0.045, 5))
    res = run_sim(wl, **_kw())
    t0, t1 = replica_turns(res.requests, res.steps)
    assert (t0.requests, t0.missed, t1.requests, t1.missed) == (2, 0, 2, 1)
    assert t1.queue_missed_ms == pytest.approx(25.0)  # rid 3: arrived at 45, scheduled at 70
    assert t0.queue_ms == pytest.approx(2.5)  # rid 0 at once, rid 2 after 5 ms
