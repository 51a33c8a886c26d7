"""Several tiny engines on the CPU behind a router (`replay_cluster`), and where replicas go
(`place_replicas`, `replica_configs`)."""

from __future__ import annotations

import pytest

from twinserve.core.request import ReqState
from twinserve.core.workload import shared_prefix
from twinserve.core.errors import UserError
from twinserve.engine.cluster import place_replicas, replay_cluster, replica_configs, replica_devices
from twinserve.engine.config import EngineConfig
from twinserve.engine.engine import Engine
from twinserve.policies import ROUTING


@pytest.fixture
def two_engines(tiny_model_dir):
    cfg = EngineConfig(model=str(tiny_model_dir("tiny-llama")), device="cpu", cpu_kv_tokens=2048)
    engines = [Engine(cfg), Engine(cfg)]
    yield engines
    for e in engines:
        e.shutdown()


def _groups(n: int = 8):
    # two groups of a 64-token prefix; at 4 req/s each request ends long before the next arrives
    return shared_prefix(num_groups=2, prefix_len=64, suffix_len=8, output_len=4, num_requests=n, rate=4.0,
                         seed=0, vocab_size=1000)


def test_round_robin_alternates_and_every_replica_records_its_steps(two_engines) -> None:
    w = _groups()
    out = replay_cluster(two_engines, ROUTING.create("round_robin"), w, progress=False, warmup=False)
    assert [r.rid for r in out.requests] == [s.rid for s in w]
    assert out.replicas == [0, 1] * 4
    assert all(r.state is ReqState.FINISHED and r.num_output == 4 for r in out.requests)
    assert {st.replica for st in out.steps} == {0, 1}
    for k, e in enumerate(two_engines):
        mine = [r for r, p in zip(out.requests, out.replicas) if p == k]
        new = sum(st.features.new_tokens for st in out.steps if st.replica == k)
        assert new == sum(r.prompt_len + 4 - 1 - r.max_cached for r in mine)  # its requests' work only
        assert not e.has_work() and e.scheduler.cache.num_pages == 0  # left idle, cache flushed


def test_prefix_affinity_keeps_each_group_on_the_replica_that_caches_it(two_engines) -> None:
    w = _groups()
    out = replay_cluster(two_engines, ROUTING.create("prefix_affinity"), w, progress=False, warmup=False)
    by_group: dict[int, set[int]] = {}
    for spec, k in zip(w, out.replicas):
        by_group.setdefault(spec.hash_ids[0], set()).add(k)
    assert len(by_group) == 2 and all(len(ks) == 1 for ks in by_group.values())
    firsts = {min(s.rid for s in w if s.hash_ids[0] == g) for g in by_group}
    assert all(r.max_cached >= 48 for r in out.requests if r.rid not in firsts)


def test_replica_devices_on_the_cpu() -> None:
    assert replica_devices("cpu", 3) == ["cpu", "cpu", "cpu"]


def test_replicas_take_a_gpu_each_or_share_one_where_allowed() -> None:
    assert place_replicas("cuda", 2, gpu_count=2).devices == ["cuda:0", "cuda:1"]
    assert place_replicas("cuda:1", 2, tp_size=2, gpu_count=5).devices == ["cuda:1", "cuda:3"]
    with pytest.raises(UserError, match="needs 2 GPUs, this host has 1"):
        place_replicas("cuda", 2, gpu_count=1)
    shared = place_replicas("cuda", 3, gpu_count=1, shared_ok=True)
    assert shared.devices == ["cuda:0"] * 3 and shared.shared
    with pytest.raises(UserError, match="only at tp=1"):
        place_replicas("cuda", 2, tp_size=2, gpu_count=2, shared_ok=True)


def test_replicas_sharing_a_gpu_split_its_kv_memory() -> None:
    base = EngineConfig(model="m", device="cuda", mem_fraction=0.9)
    shared = place_replicas("cuda", 3, gpu_count=1, shared_ok=True)
    (first,) = replica_configs(base, shared)
    assert (first.device, first.mem_fraction, first.num_pages) == ("cuda:0", pytest.approx(0.3), None)
    cfgs = replica_configs(base, shared, first_num_pages=1234)
    assert [c.num_pages for c in cfgs] == [None, 1234, 1234] and cfgs[0] == first
    fixed = replica_configs(EngineConfig(model="m", device="cuda", num_pages=500), shared)
    assert [(c.num_pages, c.mem_fraction) for c in fixed] == [(500, 0.9)] * 3
    own = replica_configs(base, place_replicas("cuda", 2, gpu_count=2))
    assert [(c.device, c.mem_fraction) for c in own] == [("cuda:0", 0.9), ("cuda:1", 0.9)]
