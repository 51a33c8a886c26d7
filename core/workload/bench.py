"""Timing of the workload layer: ``python -m twinserve.core.workload.bench``.

Prints the time to load the bundled Azure conversation trace (CSV read + 19,366 specs + the
Workload) and the cost of making one request's prompt tokens, median of several repeats.
"""

from __future__ import annotations

import argparse
import statistics
import time

from twinserve.core.workload.loaders import load_azure
from twinserve.core.workload.spec import RequestSpec
from twinserve.core.workload.workload import Workload


def time_load(name: str = "azure_conv", repeats: int = 5) -> tuple[float, Workload]:
    """Median seconds to load a bundled trace, and the workload."""
    times = []
    w = None
    for _ in range(repeats):
        t = time.perf_counter()
        w = load_azure(name)
        times.append(time.perf_counter() - t)
    assert w is not None
    return statistics.median(times), w


def time_prompt_tokens(w: Workload, spec: RequestSpec, repeats: int = 2000) -> float:
    """Median-of-5 mean seconds per ``w.prompt_tokens(spec)`` call."""
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(repeats):
            w.prompt_tokens(spec)
        runs.append((time.perf_counter() - t) / repeats)
    return statistics.median(runs)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default="azure_conv", choices=["azure_conv", "azure_code"])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    _, w = time_load(args.trace, repeats=1)
    cold = time.perf_counter() - t0
    warm, w = time_load(args.trace, repeats=args.repeats)
    print(f"load {args.trace}: {len(w)} requests, span {w.stats()['span_s'] / 60:.1f} min")
    print(f"  {'first load (cold):':<30}{cold * 1e3:8.1f} ms")
    print(f"  {f'load, median of {args.repeats}:':<30}{warm * 1e3:8.1f} ms")
    rand = RequestSpec(0, 0.0, 1000, 16)
    hashed = RequestSpec(1, 0.0, 1000, 16, hash_ids=(1, 2))
    print(f"  {'prompt_tokens, 1k unique:':<30}{time_prompt_tokens(w, rand) * 1e6:8.1f} us")
    print(f"  {'prompt_tokens, 1k hash-block:':<30}{time_prompt_tokens(w, hashed) * 1e6:8.1f} us")


if __name__ == "__main__":
    main()
