"""metrics: the per-request frame from Req objects, and summary formulas checked by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from twinserve.core.metrics import (COLUMNS, format_summary, inter_token_latencies,
                                    requests_frame, summarize)
from twinserve.core.request import Req, ReqState
from twinserve.core.sampling import SamplingParams


def _req(rid, arrival, prompt_len, sched, times, reason="length", cached=0, preempt=0,
         tenant="default"):
    r = Req(rid, np.arange(prompt_len), SamplingParams(max_tokens=8), arrival=arrival,
            tenant=tenant)
    r.state = ReqState.RUNNING
    r.t_scheduled = sched
    for i, t in enumerate(times):
        idx = r.append_tokens(-1)
        assert idx == i
        r.set_output(i, 100 + i, t)
    r.max_cached = cached
    r.num_preemptions = preempt
    if reason == "abort":
        r.state = ReqState.ABORTED
        r.t_finish = None
        r.finish_reason = "abort"
    else:
        r.state = ReqState.FINISHED
        r.t_finish = times[-1]
        r.finish_reason = reason
    return r


def _three():
    return [
        _req(0, 0.0, 10, 0.5, [1.0, 1.5, 2.0], cached=4),
        _req(1, 1.0, 20, 1.0, [2.0], reason="stop", tenant="b"),
        _req(2, 2.0, 30, 3.0, [4.0, 4.2, 4.6, 5.0], preempt=1),
        _req(3, 0.5, 40, 0.6, [1.1], reason="abort"),
    ]


def test_requests_frame_columns_and_values():
    reqs = _three()
    df = requests_frame(reqs, replica=2)
    assert tuple(df.columns) == COLUMNS
    assert df["replica"].tolist() == [2] * 4
    assert df["first_token_s"].tolist() == [1.0, 2.0, 4.0, 1.1]
    assert df["output_tokens"].tolist() == [3, 1, 4, 1]
    assert df["cached_tokens"].tolist() == [4, 0, 0, 0]
    assert df["preemptions"].tolist() == [0, 0, 1, 0]
    assert df["finish_reason"].tolist() == ["length", "stop", "length", "abort"]
    assert math.isnan(df["finish_s"].iloc[3])
    assert df["token_times"].iloc[2].tolist() == [4.0, 4.2, 4.6, 5.0]
    reqs[0].set_output(0, 1, 99.0)                   # the frame holds a copy
    assert df["token_times"].iloc[0][0] == 1.0
    assert requests_frame([]).columns.tolist() == list(COLUMNS)


def test_running_request_with_placeholder_in_flight():
    r = _req(7, 0.0, 4, 0.1, [0.5, 0.7], reason="length")
    r.state, r.t_finish, r.finish_reason = ReqState.RUNNING, None, None
    r.append_tokens(-1)                              # launched, value not yet delivered
    r.pending = 1
    df = requests_frame([r])
    assert df["output_tokens"].tolist() == [2]
    assert df["token_times"].iloc[0].tolist() == [0.5, 0.7]
    s = summarize(df)
    assert s["completed"] == 0 and s["incomplete"] == 1 and s["failed"] == 0


def test_summary_matches_hand_computation():
    s = summarize(requests_frame(_three()))
    assert s["completed"] == 3 and s["failed"] == 1 and s["incomplete"] == 0
    assert s["total_input_tokens"] == 60 and s["total_output_tokens"] == 8
    assert s["duration"] == 5.0                      # last finish 5.0 - first arrival 0.0
    assert s["request_throughput"] == pytest.approx(0.6)
    assert s["output_throughput"] == pytest.approx(1.6)
    assert s["total_token_throughput"] == pytest.approx(13.6)
    assert s["request_goodput"] is None
    # TTFT 1.0, 1.0, 2.0 s
    assert s["mean_ttft_ms"] == pytest.approx(4000 / 3)
    assert s["median_ttft_ms"] == pytest.approx(1000)
    assert s["std_ttft_ms"] == pytest.approx(math.sqrt(2e6 / 9))
    # TPOT: (2-1)/2 = 0.5 and (5-4)/3; the 1-token request is left out
    assert s["mean_tpot_ms"] == pytest.approx((500 + 1000 / 3) / 2)
    # ITL gaps 0.5 0.5 | 0.2 0.4 0.4
    assert s["mean_itl_ms"] == pytest.approx(400)
    assert s["median_itl_ms"] == pytest.approx(400)
    assert s["p90_itl_ms"] == pytest.approx(500)
    # E2E 2, 1, 3 s; p99 by linear interpolation
    assert s["mean_e2el_ms"] == pytest.approx(2000)
    assert s["p99_e2el_ms"] == pytest.approx(2980)
    assert s["p50_e2el_ms"] == pytest.approx(2000)
    # queueing 0.5, 0, 1.0 s
    assert s["mean_queue_ms"] == pytest.approx(500)
    assert s["total_cached_tokens"] == 4 and s["total_preemptions"] == 1


def test_goodput_under_slos():
    df = requests_frame(_three())
    assert summarize(df, slo_ttft_ms=1500)["request_goodput"] == pytest.approx(2 / 5)
    # TPOT: req0 0.5 s fails 400 ms; the 1-token request counts as meeting it
    assert summarize(df, slo_ttft_ms=1500, slo_tpot_ms=400)["request_goodput"] == \
        pytest.approx(1 / 5)
    assert summarize(df, slo_e2e_ms=2500)["request_goodput"] == pytest.approx(2 / 5)
    assert summarize(df, slo_tpot_ms=1000, duration_s=10.0)["request_goodput"] == \
        pytest.approx(3 / 10)


def test_custom_percentiles_and_duration():
    s = summarize(requests_frame(_three()), duration_s=2.0, percentiles=(25, 99.9))
    assert s["request_throughput"] == pytest.approx(1.5)
    assert "p99.9_ttft_ms" in s and "p25_ttft_ms" in s and "p99_ttft_ms" not in s
    assert s["p25_ttft_ms"] == pytest.approx(1000)


def test_itl_excludes_gaps_across_requests():
    gaps = inter_token_latencies([np.array([0.0, 1.0]), np.array([]), np.array([5.0]),
                                  np.array([10.0, 10.5, 12.0])])
    assert gaps.tolist() == [1.0, 0.5, 1.5]
    assert inter_token_latencies([]).size == 0


def test_parquet_round_trip_gives_same_summary(tmp_path):
    df = requests_frame(_three())
    p = tmp_path / "requests.parquet"
    df.to_parquet(p)
    back = pd.read_parquet(p)
    a, b = summarize(df), summarize(back)
    assert a.keys() == b.keys()
    for k in a:
        assert (a[k] == b[k]) or (a[k] != a[k] and b[k] != b[k]) or a[k] == pytest.approx(b[k])


def test_empty_and_all_single_token():
    s = summarize(requests_frame([]))
    assert s["completed"] == 0 and math.isnan(s["mean_ttft_ms"])
    one = summarize(requests_frame([_req(0, 0.0, 5, 0.0, [0.3])]))
    assert one["completed"] == 1 and math.isnan(one["mean_tpot_ms"])
    assert math.isnan(one["mean_itl_ms"]) and one["mean_ttft_ms"] == pytest.approx(300)


def test_format_summary_table():
    s = summarize(requests_frame(_three()), slo_ttft_ms=1500)
    text = format_summary(s)
    assert "Serving Benchmark Result" in text
    assert "Successful requests:" in text and text.count("\n") > 20
    line = next(ln for ln in text.splitlines() if ln.startswith("Mean TTFT (ms):"))
    assert line.split()[-1] == "1333.33"
    assert "P99 E2EL (ms):" in text and "Request goodput (req/s):" in text
    assert "Request goodput" not in format_summary(summarize(requests_frame(_three())))
