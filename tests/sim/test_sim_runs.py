"""End-to-end simulations: completeness, timing sanity, determinism, invariants, routers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from twinserve.core.workload import WORKLOADS
from twinserve.simulator.cost import COST_MODELS


def test_small_trace_runs_to_completion(run_sim: Any, poisson: Any) -> None:
    w = poisson(n=80, rate=10.0)
    res = run_sim(w)
    r = res.requests
    assert len(r) == 80 and res.unfinished == 0 and not res.rejected
    assert (r.finish_reason == "length").all()
    assert (r.output_tokens.to_numpy() == w.output_lens).all()
    assert (r.prompt_tokens.to_numpy() == w.prompt_lens).all()
    assert (r.arrival_s.to_numpy() == w.arrivals).all()
    assert ((r.scheduled_s >= r.arrival_s) & (r.first_token_s > r.scheduled_s)
            & (r.finish_s >= r.first_token_s)).all()
    for times, n in zip(r.token_times, r.output_tokens):
        assert len(times) == n and np.all(np.diff(times) > 0)
    s = res.steps
    assert len(s) == res.num_steps and (s.duration > 0).all()
    assert (np.diff(s.start.to_numpy()) > 0).all()  # one replica: steps never overlap
    assert s.new_tokens.sum() == w.prompt_lens.sum() + w.output_lens.sum() - 80 - r.cached_tokens.sum()
    assert (s.free_pages + s.used_pages + s.cached_pages == s.free_pages.iloc[0]
            + s.used_pages.iloc[0] + s.cached_pages.iloc[0]).all()


def test_single_request_latencies_are_the_cost_models_step_times(run_sim: Any) -> None:
    w = WORKLOADS.create("poisson", num_requests=1, rate=1.0, prompt_len=500, output_len=4).with_vocab(1024)
    cost = COST_MODELS.create("constant", step_s=0.02, cpu_s=0.005, overlap=False)
    r = run_sim(w, cost=cost).requests.iloc[0]
    assert r.first_token_s - r.arrival_s == pytest.approx(0.025)
    assert list(np.diff(r.token_times)) == pytest.approx([0.025] * 3)
    steps = run_sim(w, cost=cost).steps
    assert list(steps.duration) == [0.02] * 4 and list(steps.cpu_s) == [0.005] * 4


def test_same_config_same_tables_and_progress_changes_nothing(run_sim: Any, poisson: Any) -> None:
    w = poisson(n=60, rate=15.0, seed=3)
    a = run_sim(w, replicas=2, router="least_loaded")
    b = run_sim(w, replicas=2, router="least_loaded", progress=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    pd.testing.assert_frame_equal(a.requests.drop(columns="token_times"),
                                  b.requests.drop(columns="token_times"), check_exact=True)
    c = run_sim(poisson(n=60, rate=15.0, seed=4), replicas=2, router="least_loaded")
    assert not a.steps.start.equals(c.steps.start)


def test_invariants_hold_after_every_step_under_memory_pressure(run_sim: Any) -> None:
    w = WORKLOADS.create("shared_prefix", num_requests=60, rate=30.0, num_groups=2, prefix_len=128,
                         suffix_len=64, output_len={"dist": "uniform", "lo": 1, "hi": 100}).with_vocab(1024)
    res = run_sim(w, num_pages=60, check_invariants=True, checked=True)
    r = res.requests
    assert len(r) == 60 and res.unfinished == 0
    assert r.preemptions.sum() > 0 and r.cached_tokens.sum() > 0  # the checks saw both


def test_requests_that_cannot_run_are_reported_not_trimmed(run_sim: Any) -> None:
    w = WORKLOADS.create("poisson", num_requests=20, rate=5.0, seed=1,
                         prompt_len={"dist": "uniform", "lo": 100, "hi": 3000},
                         output_len=100).with_vocab(1024)
    res = run_sim(w, max_model_len=2000)
    long_ids = [s.rid for s in w if s.prompt_len + s.output_len > 2000]
    assert long_ids and sorted(rid for rid, _ in res.rejected) == long_ids
    assert all("max_model_len" in why for _, why in res.rejected)
    assert len(res.requests) == 20 - len(long_ids)


def test_noise_is_seeded_and_changes_step_times(run_sim: Any, poisson: Any) -> None:
    from twinserve.simulator.cost import Calibration, CpuFit, LinearFit, Provenance

    cal = Calibration(Provenance("h200", "m", 1),
                      {"decode": LinearFit(["1"], [0.01]), "prefill": LinearFit(["1"], [0.02])},
                      CpuFit(["1"], [0.0]))
    cal.residuals.levels, cal.residuals.ratio = [0.0, 1.0], [0.5, 1.5]
    cost = COST_MODELS.create("calibrated", calibration=cal)
    w = poisson(n=20, rate=10.0)
    quiet = run_sim(w, cost=cost).steps.duration
    assert set(quiet.round(9)) <= {0.01, 0.02}
    a, b = run_sim(w, cost=cost, noise=True, seed=1), run_sim(w, cost=cost, noise=True, seed=1)
    c = run_sim(w, cost=cost, noise=True, seed=2)
    assert a.steps.duration.equals(b.steps.duration) and not a.steps.duration.equals(c.steps.duration)
    assert a.steps.duration.between(0.005, 0.03).all() and a.steps.duration.nunique() > 10


def test_round_robin_and_least_loaded_spread_requests(run_sim: Any, poisson: Any) -> None:
    w = poisson(n=90, rate=50.0)
    rr = run_sim(w, replicas=3, router="round_robin").requests
    assert list(rr.sort_values("arrival_s", kind="stable").replica[:6]) == [0, 1, 2, 0, 1, 2]
    ll = run_sim(w, replicas=3, router="least_loaded")
    counts = ll.requests.replica.value_counts()
    assert len(counts) == 3 and counts.min() >= 15
    assert set(ll.steps.replica) == {0, 1, 2}


def test_prefix_affinity_keeps_groups_together(run_sim: Any) -> None:
    w = WORKLOADS.create("shared_prefix", num_requests=120, rate=4.0, num_groups=20, prefix_len=512,
                         suffix_len=32, output_len=8, seed=1).with_vocab(1024)
    aff = run_sim(w, replicas=3, router="prefix_affinity").requests
    rr = run_sim(w, replicas=3, router="round_robin").requests
    groups = len({s.hash_ids[0] for s in w})
    # affinity: only a group's first request misses; round robin: its first on each replica
    assert (aff.cached_tokens > 0).sum() >= len(w) - groups - 3
    assert aff.cached_tokens.sum() > 1.3 * rr.cached_tokens.sum()
