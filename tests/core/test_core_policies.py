"""Each scheduling policy orders the queue as it claims."""

from __future__ import annotations

from helpers_core import make_req, make_sched, step

from twinserve.policies import SCHEDULING
from twinserve.policies.cache import NoCache, RadixCache


def rids(reqs) -> list[int]:
    return [r.rid for r in reqs]


def test_fcfs_orders_by_arrival() -> None:
    reqs = [make_req(0, 4, arrival=3.0), make_req(1, 4, arrival=1.0), make_req(2, 4, arrival=2.0)]
    assert rids(SCHEDULING.create("fcfs").order(reqs, 5.0, NoCache(4))) == [1, 2, 0]


def test_sjf_uses_uncached_length() -> None:
    cache = RadixCache(4)
    shared = list(range(500, 524))
    cache.insert(__import__("numpy").array(shared, dtype="int32"), list(range(6)))
    reqs = [make_req(0, 20, arrival=0), make_req(1, 10, arrival=1), make_req(2, shared + [1, 2, 3, 4, 5, 6], arrival=2)]
    # uncached: 20, 10, 30 - 24 = 6
    assert rids(SCHEDULING.create("sjf").order(reqs, 3.0, cache)) == [2, 1, 0]
    assert rids(SCHEDULING.create("sjf").order(reqs, 3.0, NoCache(4))) == [1, 0, 2]


def test_lpm_prefers_longest_cached_prefix_and_falls_back_to_fcfs() -> None:
    import numpy as np

    cache = RadixCache(4)
    cache.insert(np.arange(0, 16, dtype=np.int32), [0, 1, 2, 3])
    reqs = [make_req(0, 12, arrival=0),
            make_req(1, list(range(0, 8)) + [99] * 8, arrival=1),
            make_req(2, list(range(0, 16)) + [99], arrival=2)]
    assert rids(SCHEDULING.create("lpm").order(reqs, 3.0, cache)) == [2, 1, 0]
    assert rids(SCHEDULING.create("lpm", max_queue=2).order(reqs, 3.0, cache)) == [0, 1, 2]


def test_priority_with_aging() -> None:
    old_low = make_req(0, 4, arrival=0.0, priority=5)
    new_high = make_req(1, 4, arrival=9.0, priority=0)
    # effective = priority - aging * waited: at t=10, aging 1 -> -5 vs -1; aging 0.1 -> 4 vs -0.1
    assert rids(SCHEDULING.create("priority", aging=1.0).order([new_high, old_low], 10.0, NoCache(4))) == [0, 1]
    assert rids(SCHEDULING.create("priority", aging=0.1).order([old_low, new_high], 10.0, NoCache(4))) == [1, 0]
    pol = SCHEDULING.create("priority", aging=0.0)
    assert pol.victim([new_high, old_low], 10.0) is old_low


def test_priority_aging_prevents_starvation_end_to_end() -> None:
    from twinserve.core.config import SchedulerConfig
    from twinserve.policies import build_scheduler

    s = build_scheduler(SchedulerConfig(num_pages=64, page_size=4, max_running=1), "priority",
                        scheduling_kwargs={"aging": 0.5}, cache="none")
    s.add(make_req(0, 4, max_tokens=1, arrival=0.0, priority=3))
    t = 0.0
    served = []
    for i in range(1, 12):  # a high-priority request arrives every step
        s.add(make_req(i, 4, max_tokens=1, arrival=t, priority=0))
        b = s.schedule(t)
        served.extend(r.rid for r in b.reqs)
        s.complete(b, [1] * len(b), t + 1)
        t += 1.0
    assert 0 in served  # waited 3 / 0.5 = 6 s at most before overtaking newcomers
    assert served.index(0) <= 8


def test_vtc_serves_the_least_served_tenant_and_lifts_returning_ones() -> None:
    pol = SCHEDULING.create("vtc", input_weight=1.0, output_weight=2.0)
    a1, a2, a3 = (make_req(i, 10, arrival=i, tenant="a") for i in range(3))
    b1 = make_req(3, 10, arrival=3, tenant="b")
    for r in (a1, a2, a3, b1):
        pol.on_add(r, r.arrival)
    # equal counters: a1 first (tenant name tie-break), then b's head, then the rest of a
    assert rids(pol.order([a1, a2, a3, b1], 4.0, NoCache(4))) == [0, 3, 1, 2]
    pol.on_compute(a1, 100, 0)  # tenant a got 100 units of service
    assert rids(pol.order([a2, a3, b1], 4.0, NoCache(4)))[0] == 3
    assert pol.victim([a2, b1], 4.0) is a2
    # tenant c arrives after being idle: lifted to the smallest active counter (b: 0), not kept at 0 credit
    pol.on_compute(b1, 50, 0)
    for r in (a1, a2, a3):
        pol.on_exit(r)
    c1 = make_req(4, 10, arrival=5, tenant="c")
    pol.on_add(c1, 5.0)
    assert pol.counters["c"] == 50.0


def test_vtc_fair_share_end_to_end() -> None:
    """Two tenants, one floods the queue: served tokens stay balanced."""
    from twinserve.core.config import SchedulerConfig
    from twinserve.policies import build_scheduler

    s = build_scheduler(SchedulerConfig(num_pages=256, page_size=4, max_running=2,
                                        max_num_batched_tokens=64), "vtc", cache="none")
    rid = 0
    for i in range(20):
        s.add(make_req(rid, 8, max_tokens=2, arrival=0.0, tenant="heavy")); rid += 1
    for i in range(4):
        s.add(make_req(rid, 8, max_tokens=2, arrival=0.1, tenant="light")); rid += 1
    order: list[str] = []
    t = 0.0
    while len(order) < 8:
        b = s.schedule(t)
        order.extend(r.tenant for r, d in zip(b.reqs, b.is_decode) if not d)
        s.complete(b, [1] * len(b), t + 1)
        t += 1
    assert order[:8].count("light") == 4  # light requests are interleaved, not queued behind 20


def test_registry_accepts_module_paths_and_reports_unknown() -> None:
    import pytest

    assert type(SCHEDULING.create("twinserve.policies.scheduling.fcfs:FCFS")).__name__ == "FCFS"
    with pytest.raises(KeyError, match="known: .*fcfs"):
        SCHEDULING.create("nope")
