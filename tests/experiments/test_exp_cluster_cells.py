"""`experiments.cluster_cells`: engine clusters against the simulator over a set of cells, with
leave-one-out measured device time, errors against the issue's bounds and router rankings."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from twinserve.core.errors import UserError
from twinserve.experiments import cluster_cells as cc
from twinserve.experiments.compare import run_compare
from twinserve.experiments.shared_steps import pooled_ratio
from twinserve.simulator.cost.calibration import Calibration

TINY = ["engine.device=cpu", "engine.warmup=false", "engine.cpu_kv_tokens=2048", "model=tiny-llama", "replicas=2",
        "workload=shared_prefix", "workload.num_requests=8", "workload.prefix_len=64", "workload.suffix_len=8",
        "workload.output_len=4", "workload.num_groups=2", "workload.rate=4.0", "kv.num_pages=null",
        "print_summary=false", "progress=false"]


def _row(cell: str, run: str, router: str, ttft: float, per_replica: str, hit: float = 0.5,
         workload: str = "sessions", rate: str = "40") -> dict:
    return {"cell": cell, "workload": workload, "rate": rate, "router": router, "run": run,
            "device_ratio": math.nan, "ttft_ms": ttft, "tpot_ms": 3.0, "hit_rate": hit, "per_replica": per_replica}


def test_errors_against_the_bounds() -> None:
    t = pd.DataFrame([_row("a", "engine", "rr", 10.0, "150/150"), _row("a", "calibration", "rr", 8.0, "150/150"),
                      _row("a", "measured", "rr", 10.5, "144/156", hit=0.52)])
    e = cc.errors(t).set_index("sim")
    assert e.loc["calibration", "ttft"] == pytest.approx(-20.0) and not e.loc["calibration", "within"]
    assert e.loc["measured", "ttft"] == pytest.approx(5.0)
    assert e.loc["measured", "hit"] == pytest.approx(4.0)
    assert e.loc["measured", "per_replica"] == pytest.approx(4.0)  # 6 of 150 on each replica
    assert e.loc["measured", "within"]


def test_replica_error_is_the_largest_replica_s() -> None:
    assert cc._replica_err("160/140", "150/150") == pytest.approx(100 * 10 / 150)
    assert cc._replica_err("300/0", "300/0") == 0.0
    assert math.isnan(cc._replica_err("150/150", "100/100/100"))


def test_rankings_per_workload_and_rate() -> None:
    t = pd.DataFrame([_row("a", "engine", "rr", 10.0, "1/1"), _row("b", "engine", "ca", 9.0, "1/1"),
                      _row("a", "calibration", "rr", 8.0, "1/1"), _row("b", "calibration", "ca", 8.5, "1/1"),
                      _row("c", "engine", "rr", 5.0, "1/1", rate="100"),
                      _row("c", "calibration", "rr", 5.0, "1/1", rate="100")])
    r = cc.rankings(t).set_index("group")
    assert r.loc["sessions 40", "engine"] == "ca < rr" and r.loc["sessions 40", "calibration"] == "rr < ca"
    assert not r.loc["sessions 40", "calibration_same"] and r.loc["sessions 100", "calibration_same"]


def test_no_cells_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no cells"):
        cc.main([str(tmp_path)])


def test_two_cpu_cells_leave_one_out(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    for router in ("round_robin", "cache_aware"):
        d = tmp_path / router
        d.mkdir()
        (d / cc.OVERRIDES_FILE).write_text("\n".join([*TINY, f"router={router}"]) + "\n")
        run_compare([*TINY, f"router={router}"], d)
    cal_path = Path(cc.__file__).parent / "calibrations" / "h200_qwen3-0.6b_tp1.json"
    cc.main([str(tmp_path), "--calibration", str(cal_path)])
    table = pd.read_csv(tmp_path / "cells.csv")
    assert sorted(table.run) == ["calibration", "calibration", "engine", "engine", "measured", "measured"]
    # each cell's measured run is scaled by the *other* cell's engine run alone
    ratio = pooled_ratio(Calibration.load(cal_path), [tmp_path / "cache_aware" / "engine"])
    base = json.loads(cal_path.read_text())["regimes"]
    scaled = json.loads((tmp_path / "round_robin" / "measured" / "calibration.json").read_text())["regimes"]
    for name, fit in base.items():
        assert scaled[name]["coef"] == pytest.approx([c * ratio for c in fit["coef"]])
    rr = table[(table.cell == "round_robin") & (table.run == "measured")].iloc[0]
    assert rr.device_ratio == pytest.approx(ratio)
    assert rr.per_replica == "4/4"  # round robin over two replicas, in the simulator too
    text = (tmp_path / "cells.md").read_text()
    assert "shared_prefix 4.0 round_robin | measured" in text and "Routers by mean TTFT" in text
