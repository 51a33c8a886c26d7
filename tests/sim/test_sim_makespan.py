"""On an offline batch the simulator finishes sooner under makespan than in arrival order."""

from __future__ import annotations

import math

from twinserve.core.workload import WORKLOADS


def test_makespan_finishes_an_offline_batch_sooner(run_sim) -> None:
    wl = WORKLOADS.create("poisson", num_requests=128, rate=math.inf, seed=3,
                          prompt_len={"dist": "uniform", "lo": 100, "hi": 1024},
                          output_len={"dist": "uniform", "lo": 100, "hi": 1024}).with_vocab(1024)
    kw = dict(max_num_batched_tokens=16384, chunk_size=16384, max_running=256, num_pages=40000, page_size=16)
    fcfs = run_sim(wl, scheduling="fcfs", **kw)
    span = run_sim(wl, scheduling="makespan", checked=True, check_invariants=True, **kw)
    assert len(span.requests) == len(fcfs.requests) == 128
    assert span.requests["finish_s"].notna().all()
    end_fcfs, end_span = fcfs.sim_time_s, span.sim_time_s
    # fewer idle weight reads: the longest requests start first and prefill rides on decode steps
    assert end_span < 0.97 * end_fcfs, (end_span, end_fcfs)
    # the longest request is admitted first
    first = span.requests.sort_values(["scheduled_s", "rid"]).iloc[0]
    assert first["output_tokens"] == span.requests["output_tokens"].max()
