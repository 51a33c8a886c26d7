"""Saturation: the simulator's capacity on each suite workload against the engine's.

The engine side measures a workload's capacity by sending its first ``requests`` requests at once
and dividing by the time to finish them all (`engine_side._Suite.capacity`, ``capacity.json``;
the count is in ``suite.json``). `sim_capacity` runs the same burst on the simulator, configured
as the report configures it for that workload's runs (`compare.sim_matching_engine`: the KV pool,
the loop, the token graphs). A simulator that saturates at a higher rate than the engine does
predicts too little queueing near the engine's knee, which is where the 90 % runs miss.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

# Overrides of a run folder that the burst replaces: the offered rate and the trace window.
_BURST_REPLACES = ("workload.rate=", "workload.duration_s=")


@dataclass(frozen=True, slots=True)
class CapacityRow:
    """One workload's saturation throughput: the engine's (``capacity.json``) and the
    simulator's on the same burst of ``requests`` requests, with the signed error in %."""

    model: str
    workload: str
    requests: int
    engine_req_s: float
    sim_req_s: float
    err_pct: float


def burst_requests(suite_log: dict) -> dict[str, int]:
    """Requests sent at once per workload, from the engine side's ``capacity`` stages (none when
    the suite took its capacity from an earlier one)."""
    return {s["workload"]: int(s["requests"]) for s in suite_log.get("stages", []) if s.get("stage") == "capacity"}


def sim_capacity(run_dir: Path, requests: int, extra: Sequence[str] = ()) -> float:
    """Requests/s of the simulator when the first ``requests`` requests of ``run_dir``'s workload
    arrive at once (the engine side's capacity burst), with the report's settings for that run."""
    from twinserve.experiments.backends.base import RunContext
    from twinserve.experiments.backends.sim import SimBackend
    from twinserve.experiments.build import build_workload, hardware_spec, model_shape, plain
    from twinserve.experiments.fidelity_suite.resim import sim_overrides
    from twinserve.experiments.fidelity_suite.workloads import compose

    sim = sim_overrides(run_dir, drop=_BURST_REPLACES, extra=("workload.rate=1", "workload.duration_s=100000", *extra))
    cfg = plain(compose(sim))
    shape = model_shape(cfg["model"])
    wl = build_workload(cfg["workload"], shape.vocab_size).head(requests).scale_time(0.0)
    with tempfile.TemporaryDirectory() as tmp:
        res = SimBackend().run(RunContext(cfg, shape, hardware_spec(cfg["hardware"]), Path(tmp), False), wl)
    finish = res.requests["finish_s"].dropna()
    if finish.empty:
        raise ValueError(f"the simulator finished none of the {requests} burst requests of {run_dir}")
    return len(finish) / float(finish.max())


def capacity_rows(model_dir: Path, run_dirs: Sequence[Path], extra: Sequence[str] = ()) -> list[CapacityRow]:
    """A `CapacityRow` per workload of ``model_dir/capacity.json`` that has a run folder among
    ``run_dirs`` and a burst size in ``model_dir/suite.json``."""
    cap_path, log_path = model_dir / "capacity.json", model_dir / "suite.json"
    if not (cap_path.exists() and log_path.exists()):
        return []
    caps = json.loads(cap_path.read_text())
    sizes = burst_requests(json.loads(log_path.read_text()))
    first = {}
    for d in run_dirs:
        first.setdefault(d.name.rsplit("_", 1)[0], d)
    rows = []
    for w, eng in caps.items():
        if w not in sizes or w not in first:
            continue
        sim = sim_capacity(first[w], sizes[w], extra)
        rows.append(CapacityRow(model_dir.name, w, sizes[w], float(eng), sim, 100.0 * (sim - eng) / eng))
    return rows


def write_capacity(rows: Sequence[CapacityRow], out: Path) -> str:
    """``capacity.md`` and ``capacity.csv`` in ``out`` (one row per model and workload)."""
    lines = ["| model | workload | requests at once | engine req/s | simulator req/s | error |",
             "|---|---|---:|---:|---:|---:|"]
    lines += [f"| {r.model} | {r.workload} | {r.requests} | {r.engine_req_s:.2f} | {r.sim_req_s:.2f} | "
              f"{r.err_pct:+.1f}% |" for r in rows]
    text = "\n".join(lines) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "capacity.md").write_text(text)
    pd.DataFrame([asdict(r) for r in rows]).to_csv(out / "capacity.csv", index=False)
    return text
