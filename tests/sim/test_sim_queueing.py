"""A queueing check with a known answer: the simulator as an M/D/1 queue.

One request admitted at a time (max_running=1), every request one step long (one output token),
a constant step time D and Poisson arrivals at rate lambda: the replica is an M/D/1 FCFS server.
Pollaczek-Khinchine: mean wait in queue W_q = rho * D / (2 (1 - rho)), rho = lambda * D.
"""

from __future__ import annotations

from typing import Any

import pytest

from twinserve.core.workload import WORKLOADS
from twinserve.simulator.cost import COST_MODELS


@pytest.mark.parametrize("rho", [0.5, 0.7])
def test_md1_mean_wait_matches_pollaczek_khinchine(run_sim: Any, rho: float) -> None:
    D, n = 0.01, 30000
    w = WORKLOADS.create("poisson", num_requests=n, rate=rho / D, seed=2, prompt_len=16,
                         output_len=1).with_vocab(1024)
    res = run_sim(w, cost=COST_MODELS.create("constant", step_s=D), max_running=1, cache="none")
    r = res.requests
    assert len(r) == n and res.num_steps == n  # one step per request
    wq = rho * D / (2 * (1 - rho))
    wait = (r.scheduled_s - r.arrival_s).mean()
    assert wait == pytest.approx(wq, rel=0.05)
    assert (r.finish_s - r.scheduled_s).to_numpy() == pytest.approx(D)  # deterministic service
    assert (r.finish_s - r.arrival_s).mean() == pytest.approx(wq + D, rel=0.03)
    assert res.busy_s[0] / res.sim_time_s == pytest.approx(rho, rel=0.03)
