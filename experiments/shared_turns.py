"""Per-replica queueing of a cluster run, split by whether a request missed its replica's next step.

    python -m twinserve.experiments.shared_turns ENGINE_RUN_DIR SIM_RUN_DIR ...

For replicas that take turns on one host thread (`backend=engine` with a shared GPU, or the
simulator's ``backend.share_gpu``), a request that arrives during another replica's turn may be
routed only at the next round's top, after its own replica began the step it could have joined.
For each run folder and replica this prints the requests, their mean TTFT and queue time
(``scheduled_s - arrival_s``), and how many "missed" a step: their replica started a step
(``start`` in steps.parquet) after their arrival and before scheduling them. Both backends
record ``start`` right after the step's ``schedule``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd


@dataclass(frozen=True, slots=True)
class ReplicaTurns:
    """One replica's requests in a run: ``missed`` of ``requests`` were scheduled after a step of
    their replica that started after they arrived; queue and TTFT means in ms (NaN when none)."""

    replica: int
    requests: int
    ttft_ms: float
    queue_ms: float
    missed: int
    queue_missed_ms: float
    queue_caught_ms: float


def _mean_ms(x: np.ndarray) -> float:
    return float(x.mean() * 1e3) if x.size else float("nan")


def replica_turns(requests: pd.DataFrame, steps: pd.DataFrame) -> list[ReplicaTurns]:
    """`ReplicaTurns` of every replica in ``requests`` (finished requests only)."""
    out = []
    done = requests[requests["first_token_s"].notna()]
    for k, g in done.groupby("replica", sort=True):
        starts = np.sort(steps.loc[steps["replica"] == k, "start"].to_numpy(np.float64))
        arr = g["arrival_s"].to_numpy(np.float64)
        sch = g["scheduled_s"].to_numpy(np.float64)
        # steps of this replica that started in (arrival, scheduled)
        skipped = np.searchsorted(starts, sch, side="left") - np.searchsorted(starts, arr, side="right")
        missed = skipped > 0
        q = sch - arr
        out.append(ReplicaTurns(int(k), len(g), _mean_ms(g["first_token_s"].to_numpy(np.float64) - arr),
                                _mean_ms(q), int(missed.sum()), _mean_ms(q[missed]), _mean_ms(q[~missed])))
    return out


def table(runs: Sequence[Path]) -> str:
    """A Markdown table of `replica_turns` for each run folder."""
    lines = ["| run | replica | requests | TTFT (ms) | queue (ms) | missed a step | queue missed / not (ms) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for run in runs:
        reqs = pd.read_parquet(run / "requests.parquet")
        steps = pd.read_parquet(run / "steps.parquet", columns=["replica", "start"])
        for t in replica_turns(reqs, steps):
            lines.append(f"| {run.name} | {t.replica} | {t.requests} | {t.ttft_ms:.3f} | {t.queue_ms:.3f} | "
                         f"{t.missed} | {t.queue_missed_ms:.3f} / {t.queue_caught_ms:.3f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Per-replica queueing of cluster runs (missed steps).")
    ap.add_argument("runs", nargs="+", type=Path, help="run folders with requests.parquet and steps.parquet")
    print(table(ap.parse_args(argv).runs))


if __name__ == "__main__":
    main()
