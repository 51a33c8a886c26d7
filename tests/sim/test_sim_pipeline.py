"""The pipelined replica (the engine's overlap loop): arrivals are seen one step later."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from twinserve.core.batch import BatchFeatures
from twinserve.core.workload import WORKLOADS
from twinserve.simulator.cost.base import CostModel, HostParts, WakeParts


def test_pipelined_replica_serves_everything_one_step_later(run_sim, poisson) -> None:
    wl = poisson(n=60, rate=30.0, seed=3)
    plain = run_sim(wl, num_pages=400, page_size=16, fast_forward=False)
    piped = run_sim(wl, num_pages=400, page_size=16, pipeline=True, check_invariants=True, checked=True)
    a, b = plain.requests.set_index("rid"), piped.requests.set_index("rid")
    assert (b["finish_reason"] == "length").all() and len(b) == 60
    assert (b["output_tokens"] == a["output_tokens"]).all()
    # the next batch is fixed when the current one starts: a request waits at least as long
    ttft_a = (a["first_token_s"] - a["arrival_s"]).mean()
    ttft_b = (b["first_token_s"] - b["arrival_s"]).mean()
    assert ttft_b > ttft_a
    # one device stream: the steps' device time fits in the span they were scheduled over
    st = piped.steps.sort_values("start")
    assert np.all(np.diff(st["start"].to_numpy()) > 0)
    span = b["finish_s"].max() - st["start"].min()
    assert st["duration"].sum() <= span + 1e-9


def test_pipelined_replica_is_deterministic(run_sim, poisson) -> None:
    wl = poisson(n=40, rate=25.0, seed=5)
    r1 = run_sim(wl, num_pages=300, page_size=16, pipeline=True)
    r2 = run_sim(wl, num_pages=300, page_size=16, pipeline=True)
    assert r1.requests.equals(r2.requests) and r1.steps.equals(r2.steps)


class _Fixed(CostModel):
    """10 ms of device time per step; host parts sched 1, launch 2, complete 1, loop 0.5 ms."""

    def _gpu(self, x: Any, mx: Any) -> Any:
        return x.num_seqs * 0.0 + 0.010

    def host_parts(self, f: BatchFeatures) -> HostParts:
        return HostParts(0.001, 0.002, 0.001, 0.0005)


def _one_request_run(run_sim, cost: CostModel) -> Any:
    """One request (32-token prompt, 5 output tokens) through the pipelined loop under ``cost``."""
    wl = WORKLOADS.create("poisson", num_requests=1, rate=1.0, seed=0, prompt_len=32,
                          output_len=5).with_vocab(1024)
    return run_sim(wl, cost=cost, num_pages=64, page_size=16, pipeline=True, checked=True)


def _token_times(run_sim, cost: CostModel) -> np.ndarray:
    """That request's token times after its arrival."""
    row = _one_request_run(run_sim, cost).requests.iloc[0]
    return np.asarray(row["token_times"]) - row["arrival_s"]


def test_pipelined_timeline_matches_the_hand_worked_one(run_sim) -> None:
    """One request, 5 output tokens. Iteration 1 (t=0): mark 1 ms, device 1-11 ms, host free at
    3 + 0.5. Iteration 2 (t=3.5): mark 4.5, device 11-21; tokens of step 1 at max(6.5, 11) = 11,
    next iteration at 11 + 1 + 0.5 = 12.5. Iteration 3: mark 13.5, device 21-31, tokens of step 2
    at 21. So token i arrives at 11 + 10 i ms."""
    r = _one_request_run(run_sim, _Fixed())
    row = r.requests.iloc[0]
    t0 = row["arrival_s"]
    assert np.allclose(np.asarray(row["token_times"]) - t0, [0.011, 0.021, 0.031, 0.041, 0.051])
    st = r.steps.sort_values("start")
    assert np.allclose(st["start"].to_numpy()[:3] - t0, [0.001, 0.0045, 0.0135])


class _GraphSync(_Fixed):
    """Graph steps whose launch waits for the previous step's device end after 0.5 ms of its
    own work: sched 1, pre 0.5, launch 2 (after the wait), complete 1, loop 0.5, device 10 ms."""

    def host_parts(self, f: BatchFeatures) -> HostParts:
        return HostParts(0.001, 0.002, 0.001, 0.0005, graph=True, sync=True, pre=0.0005)


def test_pipelined_graph_launch_waits_after_its_own_work(run_sim) -> None:
    """Iteration 1 (t=0): mark 1, launch ends at 1 + 0.5 + 2 = 3.5 (the device is idle), the graph
    runs 3.5-13.5. Iteration 2 (t=4): mark 5, its pre ends at 5.5 but the wait lasts until 13.5,
    launch ends 15.5, graph 15.5-25.5; tokens of step 1 at 15.5, next iteration at 17. From then on
    every step ends 12 ms (post-wait launch + device) after the previous one."""
    times = _token_times(run_sim, _GraphSync())
    assert np.allclose(times, [0.0155, 0.0275, 0.0395, 0.0515, 0.0615])


class _GraphPost(_Fixed):
    """Graph steps whose replay is enqueued 0.5 ms before the 2 ms launch ends (no wait)."""

    def host_parts(self, f: BatchFeatures) -> HostParts:
        return HostParts(0.001, 0.002, 0.001, 0.0005, graph=True, post=0.0005)


def test_pipelined_graph_starts_when_its_replay_is_enqueued(run_sim) -> None:
    """Iteration 1 (t=0): mark 1, launch ends at 3, its replay was enqueued at 2.5: the graph
    runs 2.5-12.5 (at 3-13 without ``post``). Iteration 2 (t=3.5): mark 4.5, graph 12.5-22.5;
    tokens of step 1 at max(6.5, 12.5); then every 10 ms (the device sets the pace)."""
    times = _token_times(run_sim, _GraphPost())
    assert np.allclose(times, [0.0125, 0.0225, 0.0325, 0.0425, 0.0525])


def test_plain_loop_lag_schedules_an_arrival_one_boundary_later(run_sim) -> None:
    """Constant 10 ms steps. Request 0 arrives at 0 (idle replica: its step starts at once),
    request 1 at 5 ms, during step 0 (0-10). Without the lag it joins the step at 10 ms; with
    it the boundary at 10 ms admits only arrivals before 0 (the step that just ended began at
    0), so it joins at 20 ms, as the engine's overlap loop (batch 2 fixed at 0+) would."""
    from twinserve.core.workload import RequestSpec, Workload
    from twinserve.simulator.cost import COST_MODELS

    wl = Workload([RequestSpec(0, 0.0, 32, 6), RequestSpec(1, 0.005, 32, 3)], vocab_size=1024)
    cost = COST_MODELS.create("constant", step_s=0.01, cpu_s=0.0)
    first = {}
    for lag in (False, True):
        r = run_sim(wl, cost=cost, num_pages=64, page_size=16, lag_arrivals=lag, checked=True)
        req = r.requests.set_index("rid")
        first[lag] = req["scheduled_s"].to_numpy()
    assert np.allclose(first[False], [0.0, 0.01]) and np.allclose(first[True], [0.0, 0.02])


class _Waking(_Fixed):
    """`_Fixed`, and waking from an idle wait costs 0.3 ms before the loop runs and 9 ms more
    launch work for its first step (eager: the device then ends 2 + 9 ms after the mark, not 10)
    when the wait lasted over ``idle_s``."""

    def __init__(self, idle_s: float, sched: float = 0.0) -> None:
        super().__init__()
        self.idle_s, self.sched = idle_s, sched

    def wake_parts(self) -> WakeParts:
        return WakeParts(delay=0.0003, launch=0.009, idle_s=self.idle_s, sched=self.sched)


def test_the_loop_pays_for_waking_from_an_idle_wait(run_sim) -> None:
    """Two requests, the second long after the first has finished: its timeline is the
    hand-worked one above shifted by the 0.3 ms delay. After a wait longer than ``idle_s`` its
    first step launches 11 ms (host free at 0.3 + 1 + 11 = 12.3 ms, the device done then too),
    iteration 2 starts at 12.8 and launches until 15.8, when step 1's tokens are delivered;
    the later tokens come every 10 ms from step 2's device end (13.8 + 10 = 23.8). The first
    request, there at the start, waited for nothing."""
    wl = WORKLOADS.create("poisson", num_requests=2, rate=1.0, seed=0, prompt_len=32,
                          output_len=5).with_vocab(1024)

    def times(cost: CostModel) -> list[np.ndarray]:
        r = run_sim(wl, cost=cost, num_pages=64, page_size=16, pipeline=True, checked=True)
        return [np.asarray(row["token_times"]) - row["arrival_s"] for _, row in r.requests.sort_values("rid").iterrows()]

    hand = np.array([0.011, 0.021, 0.031, 0.041, 0.051])
    plain = times(_Fixed())
    assert plain[0] == pytest.approx(hand) and plain[1] == pytest.approx(hand)
    first, second = list(wl)
    assert second.arrival - first.arrival > 0.1  # the first finished long before
    short = times(_Waking(idle_s=10.0))
    assert short[0] == pytest.approx(hand) and short[1] == pytest.approx(0.0003 + hand)
    long = times(_Waking(idle_s=0.001))
    assert long[0] == pytest.approx(hand)
    assert long[1] == pytest.approx([0.0158, 0.0238, 0.0338, 0.0438, 0.0538])
    slower = times(_Waking(idle_s=0.001, sched=0.002))  # 2 ms more schedule work: all 2 ms later
    assert slower[0] == pytest.approx(hand) and slower[1] == pytest.approx(long[1] + 0.002)
