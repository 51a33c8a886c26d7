"""The walk-through's example policy (experiments/examples/my_policy.py) does what it claims."""

from __future__ import annotations

import numpy as np

from twinserve.core.config import SchedulerConfig
from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.experiments.examples.my_policy import CacheAwareAging
from twinserve.policies import SCHEDULING, build_scheduler
from twinserve.policies.cache import NoCache, RadixCache


def req(rid: int, prompt: list[int], arrival: float, max_tokens: int = 4) -> Req:
    return Req(rid, np.asarray(prompt, dtype=np.int32),
               SamplingParams(max_tokens=max_tokens, ignore_eos=True), arrival=arrival)


def test_orders_by_uncached_tokens_then_ages() -> None:
    cache = RadixCache(4)
    shared = np.arange(100, 124, dtype=np.int32)
    cache.insert(shared, list(range(6)))
    long_cached = req(0, list(shared) + [1, 2, 3, 4, 5, 6], arrival=5.0)   # 30 tokens, 6 uncached
    short = req(1, list(range(10)), arrival=5.0)                          # 10 uncached
    old_long = req(2, list(range(40)), arrival=0.0)                       # 40 uncached, waited 5 s
    no_aging = CacheAwareAging(tokens_per_s=0.0)
    assert [r.rid for r in no_aging.order([old_long, short, long_cached], 5.0, cache)] == [0, 1, 2]
    assert [r.rid for r in no_aging.order([old_long, short, long_cached], 5.0, NoCache(4))] == [1, 0, 2]
    # 40 - 10 * 5 = -10 beats 6 and 10: the old request overtakes
    aging = CacheAwareAging(tokens_per_s=10.0)
    assert [r.rid for r in aging.order([short, long_cached, old_long], 5.0, cache)] == [2, 0, 1]


def test_selectable_by_module_path_and_runs_in_the_scheduler() -> None:
    path = "twinserve.experiments.examples.my_policy:CacheAwareAging"
    assert SCHEDULING.get(path) is CacheAwareAging is SCHEDULING.get("cache_aging")
    s = build_scheduler(SchedulerConfig(num_pages=64, page_size=4, max_running=2), path,
                        cache="radix", checked=True)
    for i in range(5):
        s.add(req(i, list(range(8 + 3 * i)), arrival=0.0))
    t, finished = 0.0, []
    while s.has_work:
        batch = s.schedule(t)
        assert batch is not None
        t += 0.01
        finished += s.complete(batch, [7] * len(batch), t)
        s.check_invariants()
    assert sorted(r.rid for r in finished) == list(range(5))
