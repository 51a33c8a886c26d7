"""One engine run folder rerun on the simulator: its overrides with the engine side's replaced
by the simulator settings that match the engine run, and the comparison written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from twinserve.experiments.fidelity_suite.workloads import compose


ENGINE_SIDE = ("backend=", "backend.", "kv.num_pages=")  # a run folder's overrides the simulator replaces


def sim_overrides(run_dir: Path, drop: Sequence[str] = (), extra: Sequence[str] = ()) -> list[str]:
    """A run folder's overrides for the simulator: without the engine side's (`ENGINE_SIDE`)
    and those starting with ``drop``, with ``backend=sim``, the settings that match the engine
    run (`compare.sim_matching_engine`) and ``extra`` last."""
    from twinserve.experiments.compare import sim_matching_engine
    from twinserve.experiments.run import load_run

    ov = json.loads((run_dir / "overrides.json").read_text())["overrides"]
    _, steps, summary = load_run(run_dir)
    sim = [o for o in ov if not o.lstrip("+~").startswith((*ENGINE_SIDE, *drop))]
    return [*sim, "backend=sim", *sim_matching_engine(steps, summary), *extra]


def resimulate(run_dir: Path, out_dir: Path, extra: Sequence[str] = (),
               host_speed: bool = False) -> tuple[pd.DataFrame, Any]:
    """Rerun one engine run folder's overrides on the simulator and write the comparison;
    ``host_speed``: with the engine run's own measured host speed replayed (a diagnostic)."""
    from twinserve.experiments.compare import write_report
    from twinserve.experiments.run import run_experiment

    sim = sim_overrides(run_dir, extra=extra)
    if host_speed:
        sim.append(f"backend.host_speed_from={run_dir.resolve()}")
    run_experiment(compose(sim), out_dir / "sim")
    return write_report(run_dir, out_dir / "sim", out_dir, title=f"{run_dir.parent.name} {run_dir.name}")
