"""`bench.overlap`: the split of a batch and the command line (the timing itself needs CUDA)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from twinserve.bench.overlap import halves


def test_halves_cover_the_batch() -> None:
    assert halves(256) == (128, 128)
    assert halves(255) == (128, 127)
    assert halves(2) == (1, 1)
    with pytest.raises(ValueError, match="cannot be split"):
        halves(1)


def test_the_command_documents_its_schedules() -> None:
    out = subprocess.run([sys.executable, "-m", "twinserve.bench.overlap", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "--batch" in out and "--ctx" in out and "two half batches" in out
