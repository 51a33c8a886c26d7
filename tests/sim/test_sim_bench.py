"""The benchmark command's building blocks run (the numbers themselves go to the README)."""

from __future__ import annotations

import numpy as np

from twinserve.core.workload import WORKLOADS
from twinserve.bench.simulator import measure, trace_like


def test_trace_like_workload_resamples_the_trace() -> None:
    w = trace_like(3000, seed=1)
    base = WORKLOADS.create("azure_conv")
    assert len(w) == 3000 and w.arrivals[0] == 0.0 and np.all(np.diff(w.arrivals) >= 0)
    assert abs(w.mean_rate() / base.mean_rate() - 1) < 0.1
    assert set(zip(w.prompt_lens[:200], w.output_lens[:200])) <= set(zip(base.prompt_lens, base.output_lens))


def test_measure_reports_a_run() -> None:
    r = measure("150")
    assert r["requests"] == 150 and r["steps"] > r["events"] > 0 and r["peak_rss_mb"] > 0
    assert r["sim_s"] > 20 and r["wall_s"] > 0
