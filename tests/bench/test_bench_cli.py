"""`twinserve-bench`: ``python -m twinserve.bench.cli`` lists the benchmarks, each importable."""

from __future__ import annotations

import importlib
import subprocess
import sys

from twinserve.bench.cli import BENCHMARKS


def test_the_module_lists_every_benchmark() -> None:
    out = subprocess.run([sys.executable, "-m", "twinserve.bench.cli"], capture_output=True, text=True,
                         check=True).stdout
    assert all(name in out for name in BENCHMARKS) and "overlap" in out


def test_every_benchmark_module_has_a_main() -> None:
    for b in BENCHMARKS.values():
        assert callable(importlib.import_module(b.module).main), b.module
