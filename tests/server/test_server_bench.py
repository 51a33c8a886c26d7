"""The bench client replays a workload against the shared server and times it on the client."""

from __future__ import annotations

import numpy as np
import pytest

from twinserve.core.metrics import COLUMNS, requests_frame
from twinserve.core.workload import RequestSpec, Workload, synthetic
from twinserve.server.bench_client import BenchConfig, bench_workload, run_bench


def _workload() -> Workload:
    wl = synthetic(num_requests=10, rate=20.0, prompt_len={"dist": "uniform", "lo": 8, "hi": 48},
                   output_len={"dist": "uniform", "lo": 3, "hi": 10}, seed=1, vocab_size=1024,
                   tenants=["a", "b"])
    too_long = RequestSpec(rid=999, arrival=float(wl.arrivals[-1]) + 0.01, prompt_len=500, output_len=4)
    return Workload(list(wl) + [too_long], name="bench-test", vocab_size=1024)


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
def test_bench_client_rows_and_timing(server, transport: str) -> None:
    if transport == "aiohttp":
        pytest.importorskip("aiohttp")
    wl = _workload()
    res = bench_workload(BenchConfig(base_url=server.url, transport=transport), wl)
    df = res.requests
    assert list(df.columns) == list(COLUMNS)
    # same dtypes as the in-process backends' frame
    ref = requests_frame([], 0)
    assert [str(t) for t in df.dtypes] == [str(t) for t in ref.dtypes]
    ok = df[df.rid != 999].set_index("rid")
    for s in wl:
        if s.rid == 999:
            continue
        r = ok.loc[s.rid]
        assert r.output_tokens == s.output_len and r.prompt_tokens == s.prompt_len
        assert r.finish_reason == "length"
        assert len(r.token_times) == s.output_len  # one SSE chunk per token
        assert r.arrival_s >= s.arrival - 1e-3 and r.arrival_s - s.arrival < 0.5  # sent on time
        assert r.arrival_s < r.first_token_s <= r.finish_s
        assert np.all(np.diff(r.token_times) >= 0)
    bad = df[df.rid == 999].iloc[0]
    assert bad.finish_reason == "abort" and np.isnan(bad.finish_s)
    assert [rid for rid, _ in res.errors] == [999] and "HTTP 400" in res.errors[0][1]
    s = res.summary
    assert s["completed"] == 10 and s["failed"] == 1
    assert s["total_output_tokens"] == sum(x.output_len for x in wl if x.rid != 999)
    assert s["mean_ttft_ms"] > 0 and s["mean_itl_ms"] > 0 and s["output_throughput"] > 0


def test_run_bench_adapter(server, tiny_model: str) -> None:
    wl = synthetic(num_requests=4, rate=50.0, prompt_len=12, output_len=3, seed=2, vocab_size=1024)
    cfg = {"backend": {"name": "server", "url": server.url, "model_name": None, "timeout_s": 60,
                       "prompt_format": "text", "max_concurrency": 2},
           "model": {"path": tiny_model}}
    reqs, steps, meta = run_bench(cfg, wl)
    assert steps is None and meta["bench_client"]["errors"] == 0
    assert len(reqs) == 4 and (reqs.output_tokens == 3).all()
    assert meta["bench_client"]["prompt_format"] == "text"
