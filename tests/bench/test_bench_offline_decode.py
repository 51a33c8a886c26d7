"""The decode micro-benchmark of `twinserve-bench offline` (bench/offline.py) on the CPU: the
copy rate it divides by is measured on the device, and the bound is bytes over that rate."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from twinserve.bench.offline import build_engine, copy_bandwidth, decode_bench, engine_args  # noqa: E402


def test_copy_bandwidth_is_measured_on_the_device():
    bw = copy_bandwidth(torch.device("cpu"), nbytes=1 << 22, reps=3)
    assert math.isfinite(bw) and bw > 1e8  # any machine copies more than 100 MB/s


def test_decode_bound_divides_by_the_given_copy_rate():
    eng = build_engine(engine_args("tiny-llama", device="cpu"))
    slow = decode_bench(eng, 2, 1e9, ctx=64, steps=4, rid0=1_000)
    fast = decode_bench(eng, 2, 4e9, ctx=64, steps=4, rid0=2_000)
    assert slow["copy_bw"] == 1e9 and fast["copy_bw"] == 4e9
    assert slow["steps"] > 0 and slow["ctx"] == pytest.approx(fast["ctx"])
    assert slow["bound_ms"] == pytest.approx(4 * fast["bound_ms"])
    assert slow["fraction_of_bound"] == pytest.approx(slow["bound_ms"] / slow["step_ms"])
