"""`shape`: trace offsets, and rate x duration slices that run at the rate asked for."""

from __future__ import annotations

import pytest

from twinserve.core.workload import build


def test_rate_and_duration_slice_runs_at_that_rate() -> None:
    # the first minutes of the conversation trace are quieter than its mean: rescaling the
    # whole trace and then cutting 15 s would give a slower slice; the slice itself is rescaled
    w = build("azure_conv", rate=10.0, duration_s=15.0)
    assert len(w) == 150 and w.mean_rate() == pytest.approx(10.0)
    assert w.arrivals[-1] <= 15.0 + 1e-9
    whole = build("azure_conv", rate=10.0)  # no duration: the whole trace at a mean of 10 req/s
    assert whole.mean_rate() == pytest.approx(10.0) and len(whole) > 19000
    assert len(whole.first_seconds(15.0)) != 150


def test_start_s_skips_into_the_trace_and_rebases() -> None:
    full = build("azure_code")
    later = build("azure_code", start_s=600.0)
    assert later.arrivals[0] >= 0.0 and later.arrivals[0] < 60.0
    first = later[0]
    t0 = full.arrivals[0]
    skipped = [s for s in full if s.arrival < t0 + 600.0]
    assert len(later) == len(full) - len(skipped)
    assert first.prompt_len == full[len(skipped)].prompt_len
    # combined with a rate and a duration: a different window, same run length
    a = build("azure_code", rate=5.0, duration_s=20.0)
    b = build("azure_code", rate=5.0, duration_s=20.0, start_s=1800.0)
    assert len(a) == len(b) == 100
    assert [s.prompt_len for s in a] != [s.prompt_len for s in b]
