"""The device clock's drift read off an engine run's blocked steps (`calibration.clock`)."""

import numpy as np
import pandas as pd
import pytest

from twinserve.calibration.clock import drift_corrected, fit_clock


def drifting_run(ppm: float, seconds: float = 20.0, n: int = 4000, seed: int = 0, replica: int | None = None,
                 origin_s: float = 0.0) -> pd.DataFrame:
    """Steps of ``n`` back-to-back device spans whose recorded device times run ``ppm`` off the
    host's clock; the host gets each step's tokens a wake-up latency (>= 10 µs) after its true end."""
    rng = np.random.default_rng(seed)
    end = np.sort(rng.uniform(0.01, seconds, n))
    span = np.full(n, 1e-3)
    rate = 1.0 + ppm * 1e-6
    latency = 10e-6 + rng.exponential(40e-6, n)
    df = pd.DataFrame({
        "iter_start": end - 3e-3, "dev_start": (end - span) * rate + origin_s, "dev_end": end * rate + origin_s,
        "tokens_at": end + latency, "wait_s": np.where(rng.uniform(size=n) < 0.7, 5e-4, 1e-5),
        "duration": span * rate})
    if replica is not None:
        df["replica"] = replica
    return df


@pytest.mark.parametrize("ppm", [-18.7, 0.0, 25.0])
def test_fit_clock_finds_the_drift(ppm):
    fit = fit_clock(drifting_run(ppm))
    assert fit is not None
    assert fit.ppm == pytest.approx(ppm, abs=1.0)
    assert 0 < fit.offset_s < 30e-6  # the latency's low quantile, not the drift


def test_drift_corrected_puts_device_ends_on_the_host_clock():
    raw = drifting_run(-18.7)
    fixed, fits = drift_corrected(raw)
    late = raw["tokens_at"] > 15
    before = (raw["tokens_at"] - raw["dev_end"])[late].quantile(0.1)
    after = (fixed["tokens_at"] - fixed["dev_end"])[late].quantile(0.1)
    assert before > 290e-6  # 18.7 ppm of 15-20 s
    assert after < 40e-6
    assert len(fits) == 1
    assert raw["dev_end"].iloc[-1] != fixed["dev_end"].iloc[-1]  # the input is left as it was
    assert list(fixed.index) == list(raw.index)


def test_each_replica_and_each_run_gets_its_own_fit():
    a = drifting_run(-18.7, replica=0)
    b = drifting_run(-18.7, seed=1, replica=1)
    again = drifting_run(10.0, seed=2, replica=0)  # the clock restarts: a second run of replica 0
    steps = pd.concat([a, b, again], ignore_index=True)
    _, fits = drift_corrected(steps)
    assert sorted(round(f.ppm) for f in fits) == [-19, -19, 10]


def test_too_few_blocked_steps_leave_the_run_alone():
    raw = drifting_run(-18.7, n=60)
    fixed, fits = drift_corrected(raw)
    assert fits == [] and fit_clock(raw) is None
    pd.testing.assert_frame_equal(fixed, raw)


def test_steps_without_device_times_pass_through():
    raw = pd.DataFrame({"iter_start": [0.0, 1.0], "duration": [1e-3, 1e-3]})
    fixed, fits = drift_corrected(raw)
    assert fixed is raw and fits == []
