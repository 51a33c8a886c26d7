"""`twinserve-run backend=engine replicas=2`: two tiny CPU engines behind a router write the
simulator's tables with the ``replica`` column filled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from twinserve.experiments.run import run_experiment

pytest.importorskip("torch")

CLUSTER = ["backend=engine", "backend.device=cpu", "backend.warmup=false", "model=tiny-llama",
           "replicas=2", "workload=shared_prefix", "workload.num_requests=8", "workload.prefix_len=64",
           "workload.suffix_len=8", "workload.output_len=4", "workload.num_groups=2", "workload.rate=4.0",
           "backend.cpu_kv_tokens=2048", "kv.num_pages=null"]


@pytest.mark.parametrize("router", ["round_robin", "least_loaded", "prefix_affinity", "cache_aware"])
def test_two_engines_behind_a_router(make_cfg: Any, tmp_path: Path, router: str) -> None:
    s = run_experiment(make_cfg(*CLUSTER, f"router={router}"), tmp_path)
    req = pd.read_parquet(tmp_path / "requests.parquet")
    steps = pd.read_parquet(tmp_path / "steps.parquet")
    assert s["completed"] == 8 and s["run"]["replicas"] == 2 and s["run"]["router"] == router
    assert s["run"]["replica_devices"] == ["cpu", "cpu"]
    assert list(req.rid) == sorted(req.rid) and set(steps.replica) <= {0, 1}
    if router == "round_robin":
        assert list(req.replica) == [0, 1] * 4 and set(steps.replica) == {0, 1}
    elif router != "least_loaded":  # each group stays where its prefix is cached
        assert (req.cached_tokens > 0).sum() >= 8 - 2
