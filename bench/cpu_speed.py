"""How fast each vCPU runs Python right now: ``twinserve-bench cpu-speed``.

On the GPU host (a KVM guest) each vCPU is at times fast and at times about 1.6x slower, for
seconds at a stretch, independently of the others and with the machine idle (docs/engine.md,
"The host's vCPUs"). Pure-Python work shows it best, since it is what the engine's launch path
spends its time on. It has no heavy imports.

- ``spin_unit()``: the seconds a fixed pure-Python loop takes on the calling thread.
- ``diagnose``: sweeps the vCPUs (pinned to each in turn) for ``--seconds`` and reports, per
  vCPU, its median unit time and the share of sweeps it was fast in, plus how often at least
  one vCPU was fast.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

UNIT_ITERS = 2000  # about 0.1 ms on a fast vCPU of the GPU host
SLOW_RATIO = 1.25  # a unit this many times the run's fastest is "slow"


def spin_unit(iters: int = UNIT_ITERS) -> float:
    """Seconds that ``iters`` iterations of a fixed pure-Python loop take on this thread."""
    t = time.perf_counter()
    s = 0
    for i in range(iters):
        s += i * i
    return time.perf_counter() - t


def parse_cpus(text: str) -> list[int]:
    """``"0-3,8"`` -> ``[0, 1, 2, 3, 8]`` (the kernel's cpu-list syntax)."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return sorted(out)


def measure(cpu: int, reps: int) -> float:
    """The fastest of ``reps`` unit times with this thread pinned to ``cpu``."""
    os.sched_setaffinity(0, {cpu})
    return min(spin_unit() for _ in range(reps))


@dataclass(slots=True)
class CpuReport:
    """One vCPU over a diagnostic sweep: median unit time and the share of sweeps it was fast."""

    cpu: int
    median_ms: float
    fast_share: float


def diagnose(cpus: list[int], seconds: float, reps: int = 3) -> tuple[list[CpuReport], float, int]:
    """Sweep ``cpus`` back to back for ``seconds``; per-vCPU reports, the share of sweeps with at
    least one fast vCPU, and the number of sweeps. The calling thread's affinity is restored."""
    rows: list[list[float]] = []
    mask = os.sched_getaffinity(0)
    t0 = time.time()
    try:
        while time.time() - t0 < seconds or not rows:
            rows.append([measure(c, reps) for c in cpus])
    finally:
        os.sched_setaffinity(0, mask)
    m = np.array(rows)
    fast = m < SLOW_RATIO * m.min()
    reps_ = [CpuReport(c, float(np.median(m[:, i])) * 1e3, float(fast[:, i].mean())) for i, c in enumerate(cpus)]
    return reps_, float(fast.any(axis=1).mean()), len(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpus", default=None, help="cpu list, e.g. 0-15 (default: this process's affinity)")
    ap.add_argument("--seconds", type=float, default=15.0, help="diagnostic length")
    ap.add_argument("--reps", type=int, default=3, help="unit runs per vCPU and sweep (the fastest counts)")
    args = ap.parse_args(argv)
    cpus = parse_cpus(args.cpus) if args.cpus else sorted(os.sched_getaffinity(0))
    reports, any_fast, n = diagnose(cpus, args.seconds, args.reps)
    print(f"{n} sweeps over {len(cpus)} vCPUs; 'fast' = under {SLOW_RATIO}x the fastest unit seen")
    for r in reports:
        print(f"cpu {r.cpu:3d}  median {r.median_ms:7.3f} ms  fast {100 * r.fast_share:5.1f} % of sweeps")
    print(f"at least one vCPU fast in {100 * any_fast:.1f} % of sweeps")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
