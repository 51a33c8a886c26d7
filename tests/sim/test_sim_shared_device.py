"""Replicas sharing one GPU and host thread (``share_device``): their steps take turns."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from twinserve.core.batch import BatchFeatures
from twinserve.core.workload import WORKLOADS
from twinserve.experiments.compare import sim_matching_engine
from twinserve.simulator.cost.base import CostModel, HostParts


class _Fixed(CostModel):
    """10 ms of device time per step, no host time in the plain loop; in the pipelined loop
    host parts sched 1, launch 2, complete 1, loop 0.5 ms."""

    def _gpu(self, x: Any, mx: Any) -> Any:
        return x.num_seqs * 0.0 + 0.010

    def host_parts(self, f: BatchFeatures) -> HostParts:
        return HostParts(0.001, 0.002, 0.001, 0.0005)


def _pair() -> Any:
    """Two identical requests arriving together (one per replica under round robin)."""
    return WORKLOADS.create("poisson", num_requests=2, rate=1e6, seed=0, prompt_len=32,
                            output_len=40).with_vocab(1024)


def _tpot(res: Any) -> float:
    r = res.requests
    return float(((r["finish_s"] - r["first_token_s"]) / (r["output_tokens"] - 1)).mean())


@pytest.mark.parametrize("loop", ["plain", "lagged", "pipelined"])
def test_two_replicas_on_one_device_take_twice_as_long_per_token(run_sim, loop: str) -> None:
    pipeline = loop == "pipelined"
    kw = dict(cost=_Fixed(), num_pages=64, page_size=16, pipeline=pipeline,
              lag_arrivals=loop == "lagged", router="round_robin")
    one = run_sim(_pair(), replicas=1, **kw)  # both requests batched: one step per token
    apart = run_sim(_pair(), replicas=2, **kw)
    shared = run_sim(_pair(), replicas=2, share_device=True, checked=True, **kw)
    assert sorted(shared.requests["replica"]) == [0, 1]
    # separate GPUs: each replica runs one request at a time, as fast as alone per step
    assert _tpot(apart) == pytest.approx(_tpot(one), rel=0.05)
    if not pipeline:
        assert _tpot(apart) == pytest.approx(0.010, rel=0.05)
    assert _tpot(shared) == pytest.approx(2.0 * _tpot(apart), rel=0.1)
    # one device: the steps' device time fits in the run's span (two devices: it does not)
    span = float(shared.requests["finish_s"].max() - shared.requests["arrival_s"].min())
    assert shared.steps["duration"].sum() <= span + 1e-9
    apart_span = float(apart.requests["finish_s"].max() - apart.requests["arrival_s"].min())
    assert apart.steps["duration"].sum() > 1.5 * apart_span
    if not pipeline:  # the plain loop's record starts at the step's start: no two overlap
        st = shared.steps.sort_values("start")
        ends = (st["start"] + st["duration"]).to_numpy()
        assert (st["start"].to_numpy()[1:] >= ends[:-1] - 1e-12).all()


@pytest.mark.parametrize("pipeline", [False, True])
def test_one_replica_on_a_shared_device_runs_as_on_its_own(run_sim, poisson, pipeline: bool) -> None:
    wl = poisson(n=40, rate=20.0, seed=2)
    a = run_sim(wl, num_pages=300, page_size=16, pipeline=pipeline, fast_forward=False)
    b = run_sim(wl, num_pages=300, page_size=16, pipeline=pipeline, share_device=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    pd.testing.assert_frame_equal(a.requests.drop(columns="token_times"),
                                  b.requests.drop(columns="token_times"), check_exact=True)


def test_compare_gives_the_simulator_the_engines_gpu_sharing() -> None:
    shared = sim_matching_engine(pd.DataFrame(), {"run": {"replicas_share_gpu": True}})
    apart = sim_matching_engine(pd.DataFrame(), {"run": {"replicas_share_gpu": False}})
    assert "backend.share_gpu=true" in shared
    assert not any(o.startswith("backend.share_gpu") for o in apart)
