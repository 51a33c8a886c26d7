"""Drift of the GPU's event clock against the host's: ``twinserve-bench clock-drift``.

The engine puts each step's device span on the host's timeline through one origin event
recorded while idle (`ModelRunner.mark_origin`, then the host clock's reset), and the
calibration reads host and device times against each other (a graph step's device work is its
device end minus the host's enqueue, `calibration.timeline`). If the two clocks run at slightly
different rates, every such reading moves by the elapsed time times the drift. This records an
origin the engine's way, then every ``--every`` seconds one event on the idle device, and
prints the offset of the device's reading from the host's for the same instant (the host's is
the middle of the record-and-synchronize window) against the elapsed time, and the fitted drift.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def drift_fit(host_s: np.ndarray, offset_s: np.ndarray) -> tuple[float, float]:
    """``(drift in ppm, offset at time 0 in seconds)`` of a least-squares line through the
    offsets (device reading minus host reading) against host time."""
    slope, intercept = np.polyfit(np.asarray(host_s, np.float64), np.asarray(offset_s, np.float64), 1)
    return float(slope * 1e6), float(intercept)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to watch")
    ap.add_argument("--every", type=float, default=2.0, help="seconds between samples")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("clock-drift needs a CUDA device")
    origin = torch.cuda.Event(enable_timing=True)
    origin.record()
    origin.synchronize()
    t0 = time.perf_counter()
    host, offset, window = [], [], []
    print("| elapsed s | device - host (us) | sync window (us) |\n|---|---|---|")
    while not host or host[-1] < args.seconds:
        time.sleep(args.every)
        before = time.perf_counter()
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        e.synchronize()
        after = time.perf_counter()
        h = (before + after) / 2 - t0
        host.append(h)
        offset.append(origin.elapsed_time(e) / 1e3 - h)
        window.append(after - before)
        print(f"| {h:.1f} | {offset[-1] * 1e6:.1f} | {window[-1] * 1e6:.1f} |", flush=True)
    ppm, at0 = drift_fit(np.array(host), np.array(offset))
    print(f"\ndrift {ppm:+.2f} ppm (device clock against host), offset at the origin {at0 * 1e6:+.1f} us, "
          f"after {host[-1]:.0f} s {offset[-1] * 1e6:+.1f} us; median sync window {np.median(window) * 1e6:.1f} us")


if __name__ == "__main__":
    main()
