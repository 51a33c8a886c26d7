"""`twinserve-run` describes itself: ``--help`` lists what it does and each group's options, keys
that a workload reads need no ``+`` prefix, and the example policy's docstring override runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from twinserve.core.conf_path import conf_dir

RUN = [sys.executable, "-m", "twinserve.experiments.app"]
CONF = conf_dir()


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*RUN, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TWINSERVE_DEBUG": ""})


def test_help_says_what_the_app_does_and_lists_every_groups_options(tmp_path: Path) -> None:
    p = run("--help", cwd=tmp_path)
    assert p.returncode == 0 and p.stderr == ""
    out = p.stdout
    assert out.startswith("twinserve-run: run one workload through one serving backend")
    assert "_knobs" not in out and "--debug" in out
    groups = sorted(d.name for d in CONF.iterdir() if d.is_dir() and d.name != "hydra")
    for g in groups:
        assert f"\n{g}:\n" in out, g
        for opt in (CONF / g).glob("*.yaml"):
            if not opt.stem.startswith("_"):
                assert f"  {g}={opt.stem} " in out or out.rstrip().endswith(f"{g}={opt.stem}"), (g, opt.stem)
    assert "  scheduler=lpm" in out and "  replicas=1" in out and "  tp=1" in out


def test_workload_row_handling_needs_no_plus(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,5\n1,,5\n2,12,6\n")
    base = ("workload=csv", f"workload.path={trace}", "progress=false", f"hydra.run.dir={tmp_path / 'out'}")
    refused = run(*base, cwd=tmp_path)
    assert refused.returncode == 2 and "workload.invalid=drop skips them" in refused.stderr
    p = run(*base, "workload.invalid=drop", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["completed"] == 2


def test_the_example_policys_docstring_override_runs(tmp_path: Path) -> None:
    from twinserve.experiments.examples import my_policy

    line = next(ln.strip() for ln in my_policy.__doc__.splitlines() if ln.strip().startswith("twinserve-run "))
    args = line.split()[1:]
    p = run(*args, "workload.num_requests=20", "progress=false", f"hydra.run.dir={tmp_path / 'out'}",
            cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    ran = json.loads((tmp_path / "out" / "summary.json").read_text())["run"]["scheduler"]
    assert ran == "twinserve.experiments.examples.my_policy:CacheAwareAging"
