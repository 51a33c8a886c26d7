"""Router contract tests: each router over stub views, and `SchedulerView` over a live scheduler."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers_core import drain, make_req, make_sched, step

from twinserve.core.errors import UserError
from twinserve.policies import ROUTING
from twinserve.policies.routing import ReplicaView, Router, SchedulerView


@dataclass
class StubView:
    """A `ReplicaView` with fixed numbers; ``cached`` is the prefix length it holds of any prompt."""

    outstanding_tokens: int = 0
    cached: int = 0
    kv_usage: float = 0.0
    num_waiting: int = 0
    num_running: int = 0

    def match_len(self, tokens: np.ndarray) -> int:
        return min(self.cached, len(tokens))


def choose(name: str, views: list[Any], prompt_len: int = 100, **kw: Any) -> int:
    return ROUTING.create(name, **kw).choose(make_req(0, prompt_len), views, 0.0)


def test_the_registry_holds_the_four_routers() -> None:
    assert ROUTING.names() == ["cache_aware", "least_loaded", "prefix_affinity", "round_robin"]
    with pytest.raises(UserError):
        ROUTING.create("nope")


@pytest.mark.parametrize("name", ["round_robin", "least_loaded", "prefix_affinity", "cache_aware"])
def test_every_router_returns_an_index_and_leaves_the_views_alone(name: str) -> None:
    views = [StubView(outstanding_tokens=o, cached=c, kv_usage=u)
             for o, c, u in [(50, 0, 0.1), (10, 64, 0.5), (300, 96, 0.9)]]
    before = [dict(vars(v)) for v in views]
    router = ROUTING.create(name)
    picks = [router.choose(make_req(i, 100), views, float(i)) for i in range(7)]
    assert all(0 <= p < 3 for p in picks)
    assert [vars(v) for v in views] == before
    again = ROUTING.create(name)
    assert [again.choose(make_req(i, 100), views, float(i)) for i in range(7)] == picks  # deterministic


def test_round_robin_cycles() -> None:
    r = ROUTING.create("round_robin")
    views = [StubView(), StubView(), StubView()]
    assert [r.choose(make_req(i, 8), views, 0.0) for i in range(5)] == [0, 1, 2, 0, 1]


def test_least_loaded_takes_the_smallest_backlog_ties_to_the_lowest_index() -> None:
    assert choose("least_loaded", [StubView(30), StubView(10), StubView(20)]) == 1
    assert choose("least_loaded", [StubView(10), StubView(5), StubView(5)]) == 1


def test_prefix_affinity_prefers_the_longest_match_whatever_the_load() -> None:
    assert choose("prefix_affinity", [StubView(0, 0), StubView(10**6, 64), StubView(0, 32)]) == 1
    # no match anywhere (or below min_match): least loaded
    assert choose("prefix_affinity", [StubView(30, 0), StubView(10, 3)], min_match=4) == 1


def test_cache_aware_takes_the_replica_holding_the_prefix() -> None:
    views = [StubView(outstanding_tokens=40), StubView(outstanding_tokens=60, cached=96), StubView(40)]
    assert choose("cache_aware", views, prompt_len=100) == 1  # 4 + 60 beats 100 + 40


def test_cache_aware_leaves_an_overloaded_prefix_holder() -> None:
    busy = [StubView(outstanding_tokens=40), StubView(outstanding_tokens=500, cached=96)]
    assert choose("cache_aware", busy, prompt_len=100) == 0  # 100 + 40 beats 4 + 500
    assert choose("prefix_affinity", busy, prompt_len=100) == 1
    # load_weight scales the backlog against the prefix saved
    assert choose("cache_aware", busy, prompt_len=100, load_weight=0.1) == 1  # 4 + 50 < 100 + 4
    full = [StubView(outstanding_tokens=40), StubView(outstanding_tokens=0, cached=96, kv_usage=0.99)]
    assert choose("cache_aware", full, prompt_len=100) == 0
    all_full = [StubView(40, kv_usage=0.99), StubView(0, cached=96, kv_usage=0.99)]
    assert choose("cache_aware", all_full, prompt_len=100) == 1


def test_cache_aware_refuses_bad_knobs() -> None:
    with pytest.raises(ValueError, match="load_weight"):
        ROUTING.create("cache_aware", load_weight=-1)
    with pytest.raises(ValueError, match="max_kv_usage"):
        ROUTING.create("cache_aware", max_kv_usage=0)


def test_scheduler_view_reads_a_live_scheduler() -> None:
    s = make_sched(num_pages=64, page_size=4)
    v: ReplicaView = SchedulerView(s)
    assert (v.num_waiting, v.num_running, v.outstanding_tokens, v.kv_usage) == (0, 0, 0, 0.0)
    prompt = np.arange(500, 532)
    s.add(make_req(1, prompt, max_tokens=4))
    assert (v.num_waiting, v.outstanding_tokens) == (1, 36)
    step(s, 0.0)
    assert v.num_running == 1 and v.num_waiting == 0 and 0.0 < v.kv_usage <= 1.0
    assert v.outstanding_tokens == 36 - 32  # the prompt has KV now
    drain(s, 1.0)
    assert v.kv_usage == 0.0 and v.match_len(prompt) >= 28  # full pages of the prompt are cached
    assert v.match_len(np.arange(9000, 9032)) == 0


USER_ROUTER = '''
from twinserve.policies.routing import Router

class LastReplica(Router):
    """Always the last replica."""

    def choose(self, req, replicas, now):
        return len(replicas) - 1
'''


def test_a_user_router_is_one_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_router.py").write_text(USER_ROUTER)
    monkeypatch.syspath_prepend(str(tmp_path))
    router = ROUTING.create("my_router:LastReplica")
    assert isinstance(router, Router)
    assert router.choose(make_req(0, 8), [StubView(), StubView(), StubView()], 0.0) == 2
