"""The shipped Ray launcher config runs a sweep on a local one-node Ray (when the plugin is
installed: `pip install hydra-ray-launcher`)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from twinserve.core.conf_path import conf_dir
from twinserve.experiments.report.frame import build_frame

CONF = conf_dir()

pytestmark = pytest.mark.slow


def _conf_without_joblib_only_keys(tmp: Path) -> Path:
    """The app's conf tree; if config.yaml pins a joblib-only key (hydra.launcher.n_jobs), a
    copy without it (that key makes every other launcher fail to compose)."""
    cfg = yaml.safe_load((CONF / "config.yaml").read_text())
    if "launcher" not in (cfg.get("hydra") or {}):
        return CONF
    copy = tmp / "conf"
    shutil.copytree(CONF, copy)
    text = (copy / "config.yaml").read_text()
    text = text.replace("override hydra/launcher: joblib\n", "override hydra/launcher: joblib_env\n")
    lines = text.splitlines(keepends=True)
    out, skip = [], False
    for ln in lines:
        if ln.startswith("  launcher:"):
            skip = True
            continue
        if skip and ln.startswith("    "):
            continue
        skip = False
        out.append(ln)
    (copy / "config.yaml").write_text("".join(out))
    return copy


@pytest.mark.skipif(importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is None,
                    reason="hydra-ray-launcher not installed")
@pytest.mark.skipif(importlib.util.find_spec("twinserve.experiments.app") is None,
                    reason="twinserve-run app missing")
def test_ray_local_launcher_runs_a_sweep(tmp_path) -> None:
    conf = _conf_without_joblib_only_keys(tmp_path)
    sweep = tmp_path / "ray_sweep"
    cmd = [sys.executable, "-m", "twinserve.experiments.app", "-cp", str(conf), "-m",
           "hydra/launcher=ray_local", "hydra.launcher.ray.init.num_cpus=2",
           "workload=sessions", "workload.num_sessions=4", "workload.turns=2",
           "cache=radix,none", "print_summary=false", f"hydra.sweep.dir={sweep}"]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Ray Launcher is launching 2 jobs" in res.stdout + res.stderr
    df = build_frame([sweep])
    assert sorted(df["cache"]) == ["none", "radix"] and (df["completed"] == 8).all()
