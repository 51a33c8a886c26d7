"""CPU cost of the scheduler core: ``twinserve-bench core``.

Prints (targets from the foundation issue):
- schedule() + complete() per step with 256 running decodes (target <= 0.5 ms),
- radix match + insert of a 2,000-token prompt (target <= 50 us),
- loading the full Azure conv trace (target <= 2 s).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from twinserve.core.config import SchedulerConfig
from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams


def bench_decode_step(batch: int = 256, steps: int = 2000, cache: str = "radix") -> float:
    from twinserve.policies import build_scheduler

    cfg = SchedulerConfig(num_pages=200_000, page_size=16, max_running=batch,
                          max_num_batched_tokens=max(8192, batch))
    s = build_scheduler(cfg, "fcfs", "on_demand", cache)
    rng = np.random.default_rng(0)
    for i in range(batch):
        s.add(Req(i, rng.integers(0, 32000, 1024, dtype=np.int32),
                  SamplingParams(max_tokens=steps + 200, ignore_eos=True)))
    t = 0.0
    while any(r.num_output == 0 for r in s.running) or s.waiting:  # finish all prefills
        b = s.schedule(t)
        s.complete(b, np.zeros(len(b), dtype=np.int32), t)
        t += 1
    tokens = np.ones(batch, dtype=np.int32)
    t0 = time.perf_counter()
    for _ in range(steps):
        b = s.schedule(t)
        assert b is not None and len(b) == batch and b.decode_only
        s.complete(b, tokens, t)
        t += 1
    return (time.perf_counter() - t0) / steps


def bench_radix(prompt_len: int = 2000, page_size: int = 16, reps: int = 2000) -> float:
    from twinserve.policies.cache import RadixCache

    rng = np.random.default_rng(0)
    cache = RadixCache(page_size)
    shared = rng.integers(0, 32000, prompt_len, dtype=np.int32)
    n = prompt_len // page_size
    cache.insert(shared[: n * page_size], list(range(n)))
    prompts = [np.concatenate([shared[: prompt_len // 2], rng.integers(0, 32000, prompt_len - prompt_len // 2,
                                                                        dtype=np.int32)])
               for _ in range(reps)]
    t0 = time.perf_counter()
    for i, p in enumerate(prompts):
        m = cache.match(p)
        cache.insert(p[: n * page_size], m.pages + list(range(10_000 + i * n, 10_000 + i * n + n - len(m.pages))))
    return (time.perf_counter() - t0) / reps


def bench_trace_load(name: str = "azure_conv") -> tuple[float, int]:
    from twinserve.core.workload import WORKLOADS

    t0 = time.perf_counter()
    wl = WORKLOADS.create(name)
    return time.perf_counter() - t0, len(wl)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="twinserve-bench core", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=2000)
    args = ap.parse_args(argv)
    for cache in ("radix", "none"):
        per = bench_decode_step(args.batch, args.steps, cache)
        print(f"schedule+complete, {args.batch} running decodes, cache={cache}: {per * 1e3:.3f} ms/step "
              f"(target <= 0.5 ms)")
    print(f"radix match+insert, 2,000-token prompt (page 16, half shared): {bench_radix() * 1e6:.1f} us "
          f"(target <= 50 us)")
    secs, n = bench_trace_load()
    print(f"load Azure conv trace ({n:,} requests): {secs:.3f} s (target <= 2 s)")


if __name__ == "__main__":
    main()
