"""Simulator speed and memory: ``twinserve-bench sim``.

Prints (1) the full bundled Azure conversation trace (19,366 requests, 58 min) with llama3-8b on
h200 (roofline, FCFS, on-demand memory, radix cache, pool sized from memory), and (2) simulated
requests per wall second at 1k, 10k and 100k requests of a synthetic trace scaled from it:
Poisson arrivals at the trace's mean rate, (prompt, output) pairs drawn from the trace, with the
peak resident memory of each run. Every measurement runs in a fresh subprocess (clean RSS).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np

from twinserve.core.config import SchedulerConfig
from twinserve.core.model_shapes import get_shape
from twinserve.core.workload import WORKLOADS, RequestSpec, Workload
from twinserve.simulator.cluster import SimConfig, simulate
from twinserve.simulator.cost import COST_MODELS
from twinserve.simulator.hardware import get_hardware
from twinserve.simulator.kv_plan import kv_pages

MODEL, HARDWARE = "llama3-8b", "h200"


def trace_like(n: int, seed: int = 0) -> Workload:
    """``n`` requests with Poisson arrivals at the Azure conversation trace's mean rate and
    (prompt, output) lengths resampled from it."""
    base = WORKLOADS.create("azure_conv")
    rng = np.random.default_rng(seed)
    rate = base.mean_rate()
    gaps = rng.exponential(1.0 / rate, size=n)
    times = np.cumsum(gaps) - gaps[0]  # first arrival at 0
    pick = rng.integers(0, len(base), size=n)
    p, o = base.prompt_lens[pick], base.output_lens[pick]
    specs = [RequestSpec(i, float(t), int(a), int(b)) for i, (t, a, b) in
             enumerate(zip(times.tolist(), p.tolist(), o.tolist()))]
    return Workload(specs, name=f"azure_conv-like poisson x{n}", seed=seed)


def measure(which: str) -> dict[str, Any]:
    """One run in this process: ``which`` is "trace" or a request count."""
    shape, hw = get_shape(MODEL), get_hardware(HARDWARE)
    t0, c0 = time.perf_counter(), time.process_time()
    w = WORKLOADS.create("azure_conv") if which == "trace" else trace_like(int(which))
    w = w.with_vocab(shape.vocab_size)
    sc = SchedulerConfig(num_pages=kv_pages(shape, hw), max_model_len=shape.max_position_embeddings)
    cost = COST_MODELS.create("roofline", shape=shape, hardware=hw)

    from twinserve.policies.factory import build_scheduler

    res = simulate(w, lambda: build_scheduler(sc), cost, SimConfig())
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"workload": which, "requests": len(w), "wall_s": wall, "cpu_s": cpu,
            "sim_s": res.sim_time_s, "req_per_s": len(w) / wall, "steps": res.num_steps,
            "ff_steps": res.stretch_steps, "events": res.num_steps - res.stretch_steps + res.num_stretches,
            "rejected": len(res.rejected),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _child(which: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "twinserve.bench.simulator", "--one", which],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _request_count(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"a request count is at least 1, got {n}")
    return n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="twinserve-bench sim", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=_request_count, nargs="*", default=[1000, 10000, 100000],
                    help="request counts of the synthetic runs")
    ap.add_argument("--no-trace", action="store_true", help="skip the full Azure trace run")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    runs = ([] if args.no_trace else ["trace"]) + [str(n) for n in args.sizes]
    print(f"simulator benchmark: {MODEL} on {HARDWARE}, roofline, fcfs/on_demand/radix, fast-forward on")
    print(f"{'workload':>10} {'requests':>9} {'wall s':>8} {'cpu s':>8} {'sim s':>9} {'req/s':>8} "
          f"{'steps':>9} {'events':>8} {'peak MB':>8}")
    for which in runs:
        r = _child(which)
        print(f"{r['workload']:>10} {r['requests']:>9} {r['wall_s']:>8.2f} {r['cpu_s']:>8.2f} "
              f"{r['sim_s']:>9.0f} {r['req_per_s']:>8.0f} {r['steps']:>9} {r['events']:>8} "
              f"{r['peak_rss_mb']:>8.0f}", flush=True)


if __name__ == "__main__":
    main()
