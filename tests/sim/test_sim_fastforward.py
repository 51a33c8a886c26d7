"""Fast-forward gives exactly the tables of stepping one by one (random workloads)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from twinserve.core.workload import WORKLOADS
from twinserve.simulator import SimResult
from twinserve.simulator.cost import COST_MODELS, Calibration, CpuFit, LinearFit, Provenance


def assert_same(a: SimResult, b: SimResult) -> None:
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    ra, rb = a.requests, b.requests
    pd.testing.assert_frame_equal(ra.drop(columns="token_times"), rb.drop(columns="token_times"),
                                  check_exact=True)
    for x, y in zip(ra.token_times, rb.token_times):
        assert np.array_equal(x, y)
    assert a.sim_time_s == b.sim_time_s and a.rejected == b.rejected


def noisy_model() -> Any:
    cal = Calibration(
        provenance=Provenance("h200", "tiny", 1),
        regimes={"decode": LinearFit(["1", "num_seqs", "decode_ctx"], [2e-3, 1e-5, 2e-9]),
                 "prefill": LinearFit(["1", "new_tokens", "prefill_attn"], [3e-3, 2e-5, 1e-10])},
        cpu=CpuFit(["1", "num_seqs"], [5e-4, 2e-5], overlap=True))
    cal.residuals.levels, cal.residuals.ratio = [0.0, 0.5, 1.0], [0.8, 1.0, 1.5]
    return COST_MODELS.create("calibrated", calibration=cal)


def first_decode_model() -> Any:
    """Steps with first decodes cost more on both sides, so a stretch that starts with them must
    price its first step apart from the rest."""
    cal = Calibration(
        provenance=Provenance("h200", "tiny", 1),
        regimes={"decode": LinearFit(["1", "num_seqs", "first_decodes"], [2e-3, 1e-5, 4e-4]),
                 "prefill": LinearFit(["1", "new_tokens"], [3e-3, 2e-5])},
        cpu=CpuFit(["1", "num_seqs", "first_decodes"], [5e-4, 2e-5, 3e-4], overlap=True))
    return COST_MODELS.create("calibrated", calibration=cal)


MODELS = {"noisy": noisy_model, "first_decodes": first_decode_model}

CASES = [
    dict(),                                                   # roofline, radix, one replica
    dict(cache="none", max_num_batched_tokens=512, chunk_size=256),
    dict(num_pages=80, memory="on_demand", expect_preemptions=True),  # evictions, preemption
    dict(scheduling="lpm", mixed=False, max_running=8),
    dict(replicas=3, router="least_loaded"),
    dict(replicas=2, router="prefix_affinity", noise=True, cost="noisy"),
    dict(memory="reserve", num_pages=400, cost="noisy", noise=True, seed=5),
    dict(lag_arrivals=True),                                  # the overlapping engine's arrival lag
    dict(lag_arrivals=True, replicas=2, router="least_loaded", cost="noisy", noise=True, num_pages=120),
    dict(cost="first_decodes"),
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_fast_forward_equals_step_by_step(run_sim: Any, poisson: Any, case: int, seed: int) -> None:
    kw = dict(CASES[case])
    expect_preemptions = kw.pop("expect_preemptions", False)
    if kw.get("cost") in MODELS:
        kw["cost"] = MODELS[kw["cost"]]()
    w = poisson(n=60, rate=float(np.random.default_rng(seed).uniform(2, 40)), seed=seed + 10 * case)
    off = run_sim(w, fast_forward=False, **kw)
    on = run_sim(w, fast_forward=True, **kw)
    assert on.stretch_steps > 0  # the case really fast-forwarded
    assert off.stretch_steps == 0
    assert_same(off, on)
    assert len(on.requests) == 60 and on.unfinished == 0
    if expect_preemptions:
        assert on.requests.preemptions.sum() > 0


def test_fast_forward_on_shared_prefixes_with_checks(run_sim: Any) -> None:
    w = WORKLOADS.create("shared_prefix", num_requests=80, rate=10.0, num_groups=3, prefix_len=256,
                         suffix_len=64, output_len={"dist": "uniform", "lo": 1, "hi": 80}).with_vocab(1024)
    off = run_sim(w, fast_forward=False, num_pages=200, check_invariants=True, checked=True)
    on = run_sim(w, fast_forward=True, num_pages=200, check_invariants=True, checked=True)
    assert on.stretch_steps > 0
    assert_same(off, on)
