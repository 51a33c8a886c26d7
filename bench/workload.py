"""Timing of the workload layer: ``twinserve-bench workload [--metrics N]``.

Prints the time to load the bundled Azure conversation trace (CSV read + 19,366 specs + the
Workload) and the cost of making one request's prompt tokens, median of several repeats; with
``--metrics N``, also the time of `metrics.requests_frame` and `metrics.summarize` on N finished
requests whose lengths follow the trace.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from twinserve.core.metrics import requests_frame, summarize
from twinserve.core.request import Req, ReqState
from twinserve.core.sampling import SamplingParams
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


def time_metrics(w: Workload, n: int) -> tuple[float, float, int]:
    """Seconds for ``requests_frame`` and ``summarize`` over ``n`` finished requests (the trace's
    lengths, repeated; 20 ms per output token), and the number of output tokens."""
    reqs = []
    for i in range(n):
        spec = w[i % len(w)]
        r = Req(i, np.zeros(spec.prompt_len, np.int32), SamplingParams(max_tokens=spec.output_len),
                arrival=spec.arrival)
        times = spec.arrival + 0.1 + 0.02 * np.arange(spec.output_len)
        r.append_tokens(w.output_tokens(spec), spec.output_len)
        r.set_times(0, times)
        r.t_scheduled, r.t_finish, r.finish_reason = spec.arrival, float(times[-1]), "length"
        r.state = ReqState.FINISHED
        reqs.append(r)
    t = time.perf_counter()
    df = requests_frame(reqs)
    t_frame = time.perf_counter() - t
    t = time.perf_counter()
    summarize(df, slo_ttft_ms=200.0)
    return t_frame, time.perf_counter() - t, int(df["output_tokens"].sum())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="twinserve-bench workload", description=__doc__)
    ap.add_argument("--trace", default="azure_conv", choices=["azure_conv", "azure_code"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--metrics", type=int, default=0, metavar="N",
                    help="also time the metrics on N requests")
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

    if args.metrics:
        t_frame, t_sum, ntok = time_metrics(w, args.metrics)
        print(f"metrics on {args.metrics} requests ({ntok} output tokens):")
        print(f"  {'requests_frame:':<30}{t_frame * 1e3:8.1f} ms")
        print(f"  {'summarize:':<30}{t_sum * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
