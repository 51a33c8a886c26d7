"""The calibrate command reports a profile without step records as one line, exit 2."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from twinserve.core.errors import UserError
from twinserve.experiments.calibrate import calibrate_steps


def test_empty_steps_is_a_user_error() -> None:
    with pytest.raises(UserError, match="no step records"):
        calibrate_steps(pd.DataFrame(), "h200", "m", 1, "bf16", True, "cmd")


def test_cli_prints_the_message_without_traceback(tmp_path) -> None:
    empty = tmp_path / "steps.parquet"
    pd.DataFrame({"x": []}).to_parquet(empty)
    res = subprocess.run([sys.executable, "-m", "twinserve.experiments.calibrate", "--model", "qwen3-0.6b",
                          "--from-steps", str(empty), "--gpu", "h200", "--out", str(tmp_path / "c.json")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert "calibrate: error: no step records" in res.stderr
    assert "Traceback" not in res.stderr
