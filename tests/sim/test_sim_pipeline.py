"""The pipelined replica (the engine's overlap loop): arrivals are seen one step later."""

from __future__ import annotations

from typing import Any

import numpy as np

from twinserve.core.batch import BatchFeatures
from twinserve.core.workload import WORKLOADS
from twinserve.simulator.cost.base import CostModel, HostParts


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


def test_pipelined_timeline_matches_the_hand_worked_one(run_sim) -> None:
    """One request, 5 output tokens. Iteration 1 (t=0): mark 1 ms, device 1-11 ms, host free at
    3 + 0.5. Iteration 2 (t=3.5): mark 4.5, device 11-21; tokens of step 1 at max(6.5, 11) = 11,
    next iteration at 11 + 1 + 0.5 = 12.5. Iteration 3: mark 13.5, device 21-31, tokens of step 2
    at 21. So token i arrives at 11 + 10 i ms."""
    wl = WORKLOADS.create("poisson", num_requests=1, rate=1.0, seed=0, prompt_len=32,
                          output_len=5).with_vocab(1024)
    r = run_sim(wl, cost=_Fixed(), num_pages=64, page_size=16, pipeline=True, checked=True)
    row = r.requests.iloc[0]
    t0 = row["arrival_s"]
    assert np.allclose(np.asarray(row["token_times"]) - t0, [0.011, 0.021, 0.031, 0.041, 0.051])
    st = r.steps.sort_values("start")
    assert np.allclose(st["start"].to_numpy()[:3] - t0, [0.001, 0.0045, 0.0135])
