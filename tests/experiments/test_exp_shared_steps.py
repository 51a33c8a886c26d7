"""`experiments.shared_steps`: a shared-GPU run's device timeline split into turn-taking (gaps,
clock offsets, steps after another replica's) and the device time of the steps themselves."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from twinserve.core.batch import BatchFeatures
from twinserve.core.errors import UserError
from twinserve.experiments import shared_steps as ss
from twinserve.simulator.cost.calibrated import CalibratedCostModel
from twinserve.simulator.cost.calibration import Calibration

CAL = Path(ss.__file__).parent / "calibrations" / "h200_qwen3-0.6b_tp1.json"
SPAN = 1e-3  # every step's predicted device span


def _timeline(order: list[int], gap: float, offset: float, slow_after_other: float) -> tuple[pd.DataFrame, np.ndarray]:
    """Decode steps run back to back on one device in ``order`` (replica per step), ``gap``
    apart; replica 1's clock reads ``offset`` less than replica 0's; a step right after another
    replica's takes ``slow_after_other`` x the predicted span, one after its own replica's 1x."""
    rows, t = [], 0.0
    for i, r in enumerate(order):
        d = SPAN * (slow_after_other if i and order[i - 1] != r else 1.0)
        shift = -offset if r == 1 else 0.0
        rows.append({"replica": r, "dev_start": t + shift, "dev_end": t + d + shift, "duration": d,
                     "num_prefills": 0, "num_decodes": 2})
        t += d + gap
    return pd.DataFrame(rows), np.full(len(rows), SPAN)


def test_switch_gap_cancels_the_clock_offset() -> None:
    steps, pred = _timeline([0, 1] * 20 + [0] * 10, gap=2e-6, offset=30e-6, slow_after_other=1.0)
    r = ss.shared_steps(steps, pred)
    assert r.steps == 50
    assert r.switch_gap_us == pytest.approx(2.0, abs=1e-6)
    assert r.clock_offset_us == pytest.approx(-30.0, abs=1e-6)  # replica 1's clock reads less
    assert r.same_gap_us == pytest.approx(2.0, abs=1e-6)
    assert r.busy == pytest.approx(SPAN / (SPAN + 2e-6), rel=1e-2)


def test_ratios_split_by_the_previous_replica() -> None:
    steps, pred = _timeline([0, 1] * 20 + [0] * 10, gap=0.0, offset=0.0, slow_after_other=1.2)
    r = ss.shared_steps(steps, pred)
    assert r.after_other == pytest.approx(1.2)
    assert r.after_same == pytest.approx(1.0)
    n_other = 40  # every step of the alternation but the first, and the first of the 0s
    assert r.ratio == pytest.approx((n_other * 1.2 + (50 - n_other)) / 50)
    assert r.by_regime["decode"] == pytest.approx(r.ratio)
    assert np.isnan(r.by_regime["prefill"]) and np.isnan(r.by_regime["mixed"])


def test_rows_without_a_device_span_are_left_out() -> None:
    steps, pred = _timeline([0, 1, 0, 1], gap=0.0, offset=0.0, slow_after_other=1.0)
    steps.loc[2, ["dev_start", "dev_end"]] = np.nan
    assert ss.shared_steps(steps, pred).steps == 3


def test_regimes() -> None:
    df = pd.DataFrame({"num_prefills": [0, 1, 1], "num_decodes": [3, 0, 2]})
    assert list(ss.regimes(df)) == ["decode", "prefill", "mixed"]


def test_scaled_calibration_scales_device_time_not_host() -> None:
    raw = json.loads(CAL.read_text())
    before = json.dumps(raw)
    scaled = ss.scaled_calibration(raw, 1.1)
    assert json.dumps(raw) == before  # the input is not modified
    base, big = CalibratedCostModel(Calibration.from_dict(raw)), CalibratedCostModel(Calibration.from_dict(scaled))
    for f in (BatchFeatures(num_seqs=3, num_decodes=3, new_tokens=3, decode_ctx=2000, padded_decodes=4,
                            max_ctx=900, decode_unique_ctx=2000, padded_tokens=4, graph_replay=1),
              BatchFeatures(num_seqs=1, num_prefills=1, new_tokens=512, prefill_tokens=512, prefill_ctx=512,
                            prefill_attn=512 * 513 // 2, max_ctx=512, padded_tokens=512)):
        assert big.host_parts(f).device == pytest.approx(1.1 * base.host_parts(f).device, rel=1e-9)
        assert big.host_parts(f).launch == base.host_parts(f).launch
        assert big.host_parts(f).sched == base.host_parts(f).sched


def test_main_refuses_a_folder_without_steps(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no steps.parquet"):
        ss.main([str(tmp_path)])


def test_main_refuses_steps_without_device_spans(tmp_path: Path) -> None:
    pd.DataFrame({"replica": [0], "duration": [1e-3]}).to_parquet(tmp_path / "steps.parquet")
    with pytest.raises(UserError, match="no device spans"):
        ss.main([str(tmp_path)])
