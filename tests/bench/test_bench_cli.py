"""`twinserve-bench`: ``python -m twinserve.bench.cli`` lists the benchmarks, each importable; a
benchmark's user error is one line, not a traceback."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from twinserve.bench.cli import BENCHMARKS


def test_the_module_lists_every_benchmark() -> None:
    out = subprocess.run([sys.executable, "-m", "twinserve.bench.cli"], capture_output=True, text=True,
                         check=True).stdout
    assert all(name in out for name in BENCHMARKS) and "overlap" in out


def test_every_benchmark_module_has_a_main() -> None:
    for b in BENCHMARKS.values():
        assert callable(importlib.import_module(b.module).main), b.module


def test_a_benchmarks_user_error_is_one_line_and_exit_status_2(capsys, monkeypatch) -> None:
    from twinserve.bench.cli import main

    monkeypatch.delenv("TWINSERVE_DEBUG", raising=False)
    with pytest.raises(SystemExit) as e:
        main(["recipe-floor", "--model", "nope"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err
    assert err.startswith("twinserve-bench recipe-floor: error: unknown model shape 'nope'; known: ")
    with pytest.raises(SystemExit) as e:
        main(["sim", "--sizes", "-5"])
    assert e.value.code == 2 and "a request count is at least 1, got -5" in capsys.readouterr().err
