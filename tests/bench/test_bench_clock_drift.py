"""The clock-drift benchmark's fit, and its refusal without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from twinserve.bench.clock_drift import drift_fit, main


def test_drift_fit_reads_the_rate_and_the_offset_of_a_line():
    host = np.arange(0.0, 60.0, 2.0)
    offset = 20e-6 + 5e-6 * host + np.where(np.arange(host.size) % 2, 1e-6, -1e-6)  # 5 ppm, 20 us, jitter
    ppm, at0 = drift_fit(host, offset)
    assert ppm == pytest.approx(5.0, abs=0.1)
    assert at0 == pytest.approx(20e-6, abs=2e-6)


def test_without_cuda_it_says_so():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("has CUDA")
    with pytest.raises(SystemExit, match="needs a CUDA device"):
        main(["--seconds", "1"])
