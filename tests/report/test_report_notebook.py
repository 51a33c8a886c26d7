"""The report notebook executes end to end (nbclient) on a small simulator sweep, and
`twinserve-report` handles the same sweep."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient

from twinserve.experiments.report.cli import build_report

NOTEBOOK = Path(__file__).resolve().parents[2] / "experiments" / "notebooks" / "report.ipynb"


def test_notebook_executes_on_a_sweep(sim_sweep, tmp_path, monkeypatch) -> None:
    sweep, _ = sim_sweep
    monkeypatch.setenv("TWINSERVE_SWEEP", str(sweep))
    monkeypatch.setenv("TWINSERVE_REPORT_OUT", str(tmp_path / "figs"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=180, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    pngs = sorted(p.name for p in (tmp_path / "figs").glob("*.png"))
    assert {"ttft_cdf.png", "latency_vs_rate.png", "slo_goodput.png"} <= set(pngs)
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == len(pngs)


def test_report_on_a_real_sweep(sim_sweep, tmp_path) -> None:
    sweep, by_app = sim_sweep
    rep = build_report([sweep], tmp_path / "out")
    df = pd.read_parquet(rep.parquet)
    assert len(df) == 8
    assert sorted(df["policy"].unique()) == ["fcfs", "lpm"]
    assert sorted(df["cache"].unique()) == ["none", "radix"]
    assert sorted(df["rate"].unique()) == [2, 8]
    assert (df["backend"] == "sim").all()
    if by_app:  # overrides from .hydra/overrides.yaml are columns, parsed
        assert df["scheduler.name"].tolist().count("lpm") == 4
        assert df["workload.num_sessions"].eq(4).all()
        assert df["print_summary"].eq(False).all()
        # the SLO comes from the runs' config, and the report's goodput agrees with the app's
        assert "TTFT<=300ms, TPOT<=8ms" in rep.markdown.read_text()
        assert df["slo_goodput"].to_numpy() == pytest.approx(df["request_goodput"].to_numpy())
    assert {p.path.stem for p in rep.plots} >= {"ttft_cdf", "tpot_cdf", "latency_vs_rate",
                                                "throughput_latency", "slo_goodput",
                                                "kv_batch_timeline"}
    assert "sim_vs_engine" not in {p.path.stem for p in rep.plots}  # simulator only
    assert os.path.getsize(rep.markdown) > 0
