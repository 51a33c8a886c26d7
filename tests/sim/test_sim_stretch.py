"""`DecodeStretch` on a bare scheduler: k steps applied at once leave it as k steps one by one."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import twinserve

from twinserve.core.config import SchedulerConfig
from twinserve.core.graph_plan import DEFAULT_PLAN
from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.core.scheduler import Scheduler
from twinserve.policies.factory import build_scheduler
from twinserve.simulator.cost.base import FeatureColumns
from twinserve.simulator.replica import batch_tokens
from twinserve.simulator.stretch import DecodeStretch, StretchScheduler


def _sched(policy: str, cache: str, num_pages: int) -> Scheduler:
    s = build_scheduler(SchedulerConfig(num_pages=num_pages, page_size=4, max_num_batched_tokens=256,
                                        chunk_size=256, max_running=16),
                        policy, "on_demand", cache, memory_kwargs={"watermark": 0.0}, checked=True)
    rng = np.random.default_rng(3)
    shared = np.arange(500, 512)  # three pages every request shares
    for i in range(6):
        prompt = np.concatenate([shared, np.arange(1000 + 50 * i, 1000 + 50 * i + 5 + 3 * i)])
        hint = rng.integers(1, 90, size=40).astype(np.int32)
        s.add(Req(i, prompt.astype(np.int32), SamplingParams(max_tokens=30, ignore_eos=True),
                  arrival=0.0, output_hint=hint))
    return s


def _one_by_one(s: Scheduler, t: float, k: int, decodes: bool = True) -> float:
    for _ in range(k):
        b = s.schedule(t)
        assert b is not None and (all(b.is_decode) or not decodes)
        t += 1.0
        s.complete(b, batch_tokens(b), t)
    return t


def _state(s: Scheduler) -> list:
    reqs = sorted(s.running, key=lambda r: r.rid)
    return [s.step, s.page_counts(), s.allocator.free_pages(), sorted(s.cache.all_pages()),
            [(r.rid, r.num_computed, list(r.pages), r.tokens[: r.num_tokens].tolist(), r.token_times.tolist()) for r in reqs]]


@pytest.mark.parametrize("policy,cache,num_pages", [("fcfs", "radix", 60), ("vtc", "radix", 40),
                                                     ("fcfs", "none", 200)])
def test_applied_stretch_equals_stepping(policy: str, cache: str, num_pages: int) -> None:
    a, b = _sched(policy, cache, num_pages), _sched(policy, cache, num_pages)
    ta = _one_by_one(a, 0.0, 2, decodes=False)  # admit and prefill, then one decode step
    tb = _one_by_one(b, 0.0, 2, decodes=False)
    st = DecodeStretch.find(b, 20)
    assert st is not None and st.k >= 8
    k = st.k
    feats = st.features(k, DEFAULT_PLAN)
    cols = st.apply(tb + np.arange(1.0, k + 1))
    _one_by_one(a, ta, k)
    assert _state(a) == _state(b)
    b.check_invariants()
    assert cols.first_step == 3 and cols.k == k
    assert (int(cols.free_pages[-1]), int(cols.used_pages[-1]), int(cols.cached_pages[-1])) == a.page_counts()
    assert [f.decode_ctx for f in feats] == [feats[0].decode_ctx + 6 * j for j in range(k)]
    if policy == "vtc":
        assert a.policy.counters == b.policy.counters


def test_a_stretch_is_applied_once_and_only_for_its_length() -> None:
    s = _sched("fcfs", "radix", 60)
    _one_by_one(s, 0.0, 2, decodes=False)
    st = DecodeStretch.find(s, 5)
    assert st is not None and st.k == 5
    with pytest.raises(RuntimeError):
        st.apply(np.arange(1.0, 7.0))
    st.apply(np.arange(1.0, 4.0))
    with pytest.raises(RuntimeError):
        st.apply(np.arange(1.0, 2.0))


def test_no_stretch_while_a_batch_is_in_flight_or_a_request_prefills() -> None:
    s = _sched("fcfs", "radix", 60)
    assert DecodeStretch.find(s, 10) is None  # everything still waits
    b = s.schedule(0.0)
    assert DecodeStretch.find(s, 10) is None  # in flight
    s.complete(b, batch_tokens(b), 1.0)
    assert DecodeStretch.find(s, 10) is not None


@pytest.mark.parametrize("before", [1, 2])
def test_a_stretch_has_the_features_of_its_steps_first_decodes_included(before: int) -> None:
    a, b = _sched("fcfs", "radix", 60), _sched("fcfs", "radix", 60)
    ta = _one_by_one(a, 0.0, before, decodes=False)
    _one_by_one(b, 0.0, before, decodes=False)
    st = DecodeStretch.find(b, 6)
    assert st is not None and st.k == 6
    mine = st.features(6, DEFAULT_PLAN)
    theirs = []
    for _ in range(6):
        batch = a.schedule(ta)
        theirs.append(batch.features(DEFAULT_PLAN))
        ta += 1.0
        a.complete(batch, batch_tokens(batch), ta)
    assert mine == theirs
    assert [f.first_decodes for f in mine] == ([6, 0, 0, 0, 0, 0] if before == 1 else [0] * 6)
    cols = FeatureColumns.arithmetic(mine[0], mine[1], 0, 6)
    assert np.array_equal(np.broadcast_to(cols.first_decodes, (6,)), [f.first_decodes for f in mine])
    later = FeatureColumns.arithmetic(mine[0], mine[1], 2, 4)
    assert np.array_equal(np.broadcast_to(later.first_decodes, (4,)), [0] * 4)
    assert np.array_equal(later.decode_ctx, [f.decode_ctx for f in mine[2:]])


def test_a_stretch_stops_where_the_pages_run_out() -> None:
    s = _sched("fcfs", "none", 50)
    _one_by_one(s, 0.0, 2, decodes=False)
    free = s.page_counts()[0]
    st = DecodeStretch.find(s, 25)
    assert st is not None
    pages = [-(-(r.num_computed + st.k) // 4) - len(r.pages) for r in s.running]
    over = [-(-(r.num_computed + st.k + 1) // 4) - len(r.pages) for r in s.running]
    assert sum(max(0, p) for p in pages) <= free < sum(max(0, p) for p in over)


def _surface() -> set[str]:
    return {n for n in vars(StretchScheduler) if not n.startswith("_")} | set(StretchScheduler.__annotations__)


def test_the_scheduler_offers_the_declared_surface() -> None:
    s = _sched("fcfs", "radix", 60)
    missing = [m for m in _surface() if not hasattr(s, m)]
    assert not missing and {"step", "count_steps", "take_pages"} <= _surface()


@pytest.mark.parametrize("module", ["stretch.py", "fast_forward.py"])
def test_fast_forward_uses_only_the_declared_surface(module: str) -> None:
    """Every ``sched.<name>`` / ``self.sched.<name>`` in the module is a member of the Protocol."""
    tree = ast.parse((Path(twinserve.__file__).parent / "simulator" / module).read_text())
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            v = node.value
            if (isinstance(v, ast.Name) and v.id == "sched") or (isinstance(v, ast.Attribute) and v.attr == "sched"):
                used.add(node.attr)
    assert used and used <= _surface(), sorted(used - _surface())
