"""The runs table: discovery, one row per run, summary keys and parsed overrides as columns."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from twinserve.experiments.report.frame import build_frame, flatten
from twinserve.experiments.report.latency import SLO, request_latencies, slo_attainment
from twinserve.experiments.report.runs import find_runs, parse_overrides


def test_parse_overrides_types_and_prefixes() -> None:
    got = parse_overrides(["scheduler=lpm", "workload.rate=4", "+memory.watermark=0.05",
                           "++cache.enabled=true", "~seed", "scheduler.policy=pkg.mod:My",
                           "name=a=b"])
    assert got == {"scheduler": "lpm", "workload.rate": 4, "memory.watermark": 0.05,
                   "cache.enabled": True, "seed": None, "scheduler.policy": "pkg.mod:My",
                   "name": "a=b"}


def test_find_runs_accepts_multirun_run_and_summary_paths(sweep_dir) -> None:
    runs = find_runs([sweep_dir])
    assert len(runs) == 12
    assert [p.name for p in runs[:3]] == ["0", "1", "2"] and runs[10].name == "10"
    assert find_runs([sweep_dir / "3", sweep_dir / "3" / "summary.json"]) == [runs[3]]
    with pytest.raises(FileNotFoundError, match=f"no such run folder: {sweep_dir / 'nope'}"):
        find_runs([sweep_dir / "nope"])


def test_frame_one_row_per_run_with_summary_and_override_columns(sweep_dir) -> None:
    df = build_frame([sweep_dir, sweep_dir / "0"])  # duplicates collapse
    assert len(df) == 12
    summary = json.loads((sweep_dir / "5" / "summary.json").read_text())
    for key in summary:
        assert key in df.columns, key
    assert {"workload.rate", "overrides", "path", "run_name", "policy", "combo"} <= set(df.columns)
    row = df[df["path"].str.endswith("/5")].iloc[0]
    assert row["mean_ttft_ms"] == pytest.approx(summary["mean_ttft_ms"])
    assert row["workload.rate"] == summary["rate"]  # parsed as a number, not a string
    assert pd.api.types.is_numeric_dtype(df["workload.rate"])
    assert row["combo"] == f"{summary['scheduler']}+{summary['cache']}"
    assert set(df["policy"]) == {"fcfs", "sjf"} and set(df["cache"]) == {"none", "radix"}


def test_labels_fall_back_to_overrides_then_config(tmp_path, make_run) -> None:
    run = make_run(tmp_path / "r", scheduler="sjf", rate=3.0,
                    extra_overrides=("scheduler.policy=my.mod:Mine",))
    summary = json.loads((run / "summary.json").read_text())
    for key in ("scheduler", "rate", "cache"):
        summary.pop(key)
    (run / "summary.json").write_text(json.dumps(summary))
    df = build_frame([run])
    assert df.loc[0, "scheduler"] == "sjf"          # from overrides
    assert df.loc[0, "rate"] == 3.0                 # from config workload.rate
    assert df.loc[0, "scheduler.policy"] == "my.mod:Mine"
    assert df.loc[0, "combo"] == "sjf+radix"


def test_frame_writes_to_parquet_and_csv(sweep_dir, tmp_path) -> None:
    df = build_frame([sweep_dir], slo=SLO(200.0, 50.0))
    df.to_parquet(tmp_path / "x.parquet")
    back = pd.read_parquet(tmp_path / "x.parquet")
    assert len(back) == 12 and list(back.columns) == list(df.columns)
    assert df["slo_attainment"].between(0, 1).all()


def test_slo_attainment_matches_hand_count(tmp_path, make_run) -> None:
    run = make_run(tmp_path / "r", rate=4.0)
    reqs = pd.read_parquet(run / "requests.parquet")
    lat = request_latencies(reqs)
    ttft = 1e3 * (reqs.first_token_s - reqs.arrival_s)
    assert lat["ttft_ms"].to_numpy() == pytest.approx(ttft.to_numpy())
    bound = float(ttft.median())
    assert slo_attainment(reqs, SLO(ttft_ms=bound)) == pytest.approx((ttft <= bound).mean())
    # aborted requests count as misses
    reqs.loc[ttft <= bound, "finish_reason"] = "abort"
    assert slo_attainment(reqs, SLO(ttft_ms=bound)) == 0.0


def test_flatten_nested_and_lists() -> None:
    assert flatten({"a": {"b": 1, "c": {"d": "x"}}, "l": [1, 2]}) == {"a.b": 1, "a.c.d": "x",
                                                                     "l": "[1, 2]"}


def test_slo_comes_from_run_configs_when_shared(tmp_path, make_run) -> None:
    import yaml

    from twinserve.experiments.report.cli import slo_of_runs
    from twinserve.experiments.report.runs import load_runs

    a, b = make_run(tmp_path / "a"), make_run(tmp_path / "b", rate=4.0)
    assert slo_of_runs(load_runs([tmp_path])) is None          # no slo in the configs
    for run, ttft in ((a, 300), (b, 300)):
        cfg = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
        cfg["slo"] = {"ttft_ms": ttft, "tpot_ms": None, "e2e_ms": None}
        (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert slo_of_runs(load_runs([tmp_path])) == SLO(300, None)
    cfg = yaml.safe_load((b / ".hydra" / "config.yaml").read_text())
    cfg["slo"]["ttft_ms"] = 500
    (b / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert slo_of_runs(load_runs([tmp_path])) is None          # runs disagree
