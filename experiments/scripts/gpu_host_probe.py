"""Does the engine's host get slower after the profiler's grid? One engine, the host benchmark
(`twinserve.bench.host_steps`) before and after each stage of a calibration-like run:

    python3 experiments/scripts/gpu_host_probe.py --shape llama3-8b --grid-s 45 --json OUT.jsonl

Stages: ``fresh`` (right after warm-up), ``after_grid`` (after ``--grid-s`` of the profiler's
grid, as the fidelity suite runs it), ``after_idle`` (after ``--idle-s`` of sleep),
``after_empty_cache`` (after ``gc.collect()`` and ``torch.cuda.empty_cache()``). Prints one
line per stage and kind of step, and with ``--cprofile N`` the costliest functions of the last
stage's mixed steps.
"""

from __future__ import annotations

import argparse
import gc
import time
from dataclasses import asdict

import torch

from twinserve.bench.offline import append_jsonl, build_engine, engine_args
from twinserve.bench.host_steps import host_bench
from twinserve.engine.profiler import ProfileGrid, profile_engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="llama3-8b")
    ap.add_argument("--grid-s", type=float, default=45.0)
    ap.add_argument("--idle-s", type=float, default=15.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--cprofile", type=int, default=0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    t0 = time.perf_counter()
    eng = build_engine(engine_args(a.shape))
    eng.warmup()
    print(f"{a.shape}: engine ready in {time.perf_counter() - t0:.1f} s", flush=True)
    rows = []

    def stage(name: str, top: int = 0) -> None:
        for k in range(a.repeats):
            stats, table = host_bench(eng, cprofile_top=top if k == a.repeats - 1 else 0)
            for st in stats:
                print(f"{a.shape} {name:18s} {k}: {st.line()}", flush=True)
                rows.append({"model": a.shape, "stage": name, "repeat": k, "at_s": time.perf_counter() - t0,
                             **asdict(st)})
            if table:
                print(table, flush=True)

    stage("fresh")
    if a.grid_s > 0:
        res = profile_engine(eng, ProfileGrid(), a.grid_s, None, warmup=False, progress=False)
        print(f"{a.shape}: grid ran {res.cases_run} cases, {len(res.steps)} steps", flush=True)
        stage("after_grid")
    time.sleep(a.idle_s)
    stage("after_idle")
    gc.collect()
    torch.cuda.empty_cache()
    stage("after_empty_cache", a.cprofile)
    append_jsonl(a.json, rows)
    eng.shutdown()


if __name__ == "__main__":
    main()
