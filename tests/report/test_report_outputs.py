"""Every plot file is written and non-empty; report.md links only images that exist; the CLI."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from twinserve.experiments.report.cli import build_report, main
from twinserve.experiments.report.fidelity import fidelity_table
from twinserve.experiments.report.plot_timeline import step_timeline
from twinserve.experiments.report.render import ORDER

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 5000, path


@pytest.fixture(scope="module")
def report(tmp_path_factory, make_sweep):
    """One report over a simulator sweep plus a sim+engine pair sweep (built once per module)."""
    root = tmp_path_factory.mktemp("synthetic")
    sweep = make_sweep(root / "multirun" / "sweep")
    both = make_sweep(root / "both", backends=("sim", "engine"), schedulers=("fcfs",),
                      caches=("radix",), rates=(1.0, 4.0))
    return build_report([sweep, both], root / "out")


def test_all_plots_written_when_both_backends_and_a_sweep_exist(report) -> None:
    assert [p.path.stem for p in report.plots] == list(ORDER)
    for p in report.plots:
        _check_png(p.path)
    assert len(pd.read_parquet(report.parquet)) == 12 + 4 == len(pd.read_csv(report.csv))


def test_report_md_references_existing_images(report) -> None:
    text = report.markdown.read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(links) == len(report.plots) == len(ORDER)
    for link in links:
        assert not Path(link).is_absolute()
        _check_png(report.markdown.parent / link)
    # headline table: one line per run (+ header + separator)
    headline = text.split("## Headline numbers")[1].split("##")[0]
    assert len([ln for ln in headline.splitlines() if ln.startswith("|")]) == 16 + 2
    fidelity = text.split("## Simulator vs engine")[1].split("##")[0]
    assert "mean_ttft_ms" in fidelity


def test_fidelity_pairs_only_matching_runs(both_backends_dir) -> None:
    from twinserve.experiments.report.frame import build_frame

    df = build_frame([both_backends_dir])
    table = fidelity_table(df)
    assert set(table["rate"]) == {"1.0", "4.0"}
    one = table[(table["metric"] == "mean_ttft_ms") & (table["rate"] == "1.0")].iloc[0]
    sim = df[(df.backend == "sim") & (df.rate == 1.0)].iloc[0]["mean_ttft_ms"]
    eng = df[(df.backend == "engine") & (df.rate == 1.0)].iloc[0]["mean_ttft_ms"]
    assert one["rel_err_pct"] == pytest.approx(100 * (sim - eng) / eng)
    assert len(table) == 2 * table["metric"].nunique()


def test_step_timeline_bins_and_percentages(make_run, tmp_path) -> None:
    steps = pd.read_parquet(make_run(tmp_path / "r").joinpath("steps.parquet"))
    tl = step_timeline(steps, bins=10)
    assert 1 <= len(tl) <= 10
    assert tl["kv_used_pct"].between(0, 100).all() and tl["t"].is_monotonic_increasing
    total = steps.free_pages + steps.used_pages + steps.cached_pages
    assert tl["kv_used_pct"].mean() == pytest.approx(
        (100 * steps.used_pages / total).groupby(pd.cut(steps.start, 10, labels=False)).mean().mean(),
        rel=0.05)


def test_cli_main_and_console_script(sweep_dir, tmp_path, capsys) -> None:
    assert main([str(sweep_dir), "--out", str(tmp_path / "a"), "--plots", "ttft_cdf"]) == 0
    assert sorted(p.name for p in (tmp_path / "a" / "figures").iterdir()) == ["ttft_cdf.png"]
    assert main([str(tmp_path / "missing")]) == 2
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2
    exe = shutil.which("twinserve-report")
    if exe is None:
        pytest.skip("console script twinserve-report not installed (pip install -e .)")
    res = subprocess.run([exe, str(sweep_dir), "--out", str(tmp_path / "b"),
                          "--plots", "latency_vs_rate"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "b" / "figures" / "latency_vs_rate.png").exists()
    assert (tmp_path / "b" / "report.md").exists()
