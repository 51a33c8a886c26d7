"""The bench client routing over two real tiny twinserve servers given as URLs
(``server.replica_urls``): both serve, ``prefix_affinity`` keeps each shared prefix on one URL,
a URL where nothing listens is routed around, and only when no URL is left does the replay fail,
naming them."""

from __future__ import annotations

import pytest

from conftest import SERVER_ENV, engine_config
from helpers_server import free_port
from twinserve.core.errors import UserError
from twinserve.core.workload import RequestSpec, Workload
from twinserve.server.bench_client import BenchConfig, bench_workload, run_bench


def _dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def _two_prefixes(n: int = 12) -> Workload:
    """Requests alternating between two groups; each group's prompts share 64 tokens (4 pages).
    The first two arrive together, so the second sees the first still running."""
    specs = [RequestSpec(rid=i, arrival=0.0 if i < 2 else 0.03 * i, prompt_len=72, output_len=3,
                         hash_ids=tuple(range(4 * (i % 2), 4 * (i % 2) + 4)), tenant=f"g{i % 2}")
             for i in range(n)]
    return Workload(specs, name="two-prefixes", vocab_size=1024, block_size=16)


def test_round_robin_over_two_urls_and_a_dead_one(two_servers: list[str]) -> None:
    urls = [two_servers[0], _dead_url(), two_servers[1]]
    res = bench_workload(BenchConfig(replica_urls=urls, router="round_robin", timeout_s=60), _two_prefixes(8))
    df = res.requests.sort_values("rid")
    assert res.errors == [] and (df.output_tokens == 3).all()
    assert df.replica.tolist() == [0, 2] * 4  # the dead URL (index 1) is never used


def test_prefix_affinity_keeps_each_shared_prefix_on_one_url(two_servers: list[str], tiny_model: str) -> None:
    cfg = {"backend": {"name": "server", "timeout_s": 60}, "model": {"path": tiny_model},
           "server": {"base_url": None, "replica_urls": list(two_servers)}, "router": "prefix_affinity"}
    reqs, _, meta = run_bench(cfg, _two_prefixes())
    assert meta["bench_client"]["errors"] == 0 and meta["bench_client"]["router"] == "prefix_affinity"
    assert (meta["replicas"], meta["router"]) == (2, "prefix_affinity")  # summary.json's run facts
    by_group = reqs.groupby("tenant").replica.unique()
    assert sorted(len(v) for v in by_group) == [1, 1]  # each prefix stayed where it was first sent
    assert sorted(int(v[0]) for v in by_group) == [0, 1]  # and both servers served
    assert (reqs.groupby("replica").cached_tokens.sum() > 0).all()  # the prefix was cached there


def test_no_live_url_is_a_clear_error() -> None:
    dead = [_dead_url(), _dead_url()]
    with pytest.raises(UserError) as e:
        bench_workload(BenchConfig(replica_urls=dead, timeout_s=10), _two_prefixes(2))
    assert str(e.value).startswith("no server left to send the request to")
    assert all(u in str(e.value) for u in dead)


def test_a_server_stopped_mid_replay_is_routed_around(two_servers: list[str], tiny_model: str) -> None:
    import threading
    import time

    from twinserve.core.workload import synthetic
    from twinserve.server.launch import start_server

    victim = start_server(engine_config(tiny_model), request_timeout_s=60.0, env=SERVER_ENV)
    wl = synthetic(num_requests=40, rate=10.0, prompt_len=20, output_len=3, seed=4,
                   vocab_size=1024)
    stopped: list[float] = []

    def stop_soon() -> None:
        time.sleep(1.0)
        victim.stop()
        stopped.append(time.perf_counter())

    killer = threading.Thread(target=stop_soon)
    start = time.perf_counter()
    killer.start()
    try:
        res = bench_workload(BenchConfig(replica_urls=[two_servers[0], victim.url], router="round_robin",
                                         timeout_s=60), wl)
    finally:
        killer.join()
    df = res.requests
    after = df[start + df.arrival_s > stopped[0]]  # sent once the victim was gone
    assert len(after) >= 5 and (after.replica == 0).all() and (after.finish_reason == "length").all()
    assert ((df.replica == 1) & (df.finish_reason == "length")).any()  # it served before it stopped
    assert (df[df.finish_reason == "abort"].replica == 1).all()  # only its in-flight requests failed


def test_each_servers_metrics_feed_its_view(two_servers: list[str]) -> None:
    import asyncio
    import contextlib

    from twinserve.server.bench_client import _scrape
    from twinserve.server.bench_transport import TRANSPORTS
    from twinserve.server.url_router import UrlRouter

    urls = [two_servers[0], _dead_url(), two_servers[1]]
    routing = UrlRouter(urls, "least_loaded")

    async def go() -> None:
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(TRANSPORTS.create(
                "httpx", base_url=u, timeout_s=5, max_connections=4, headers={})) for u in urls]
            task = asyncio.create_task(_scrape(clients, routing, 0.05))
            await asyncio.sleep(0.5)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(go())
    for k in (0, 2):  # idle servers: their gauges were read, and are 0
        assert routing.views[k].scraped == {"waiting": 0.0, "kv_usage": 0.0}
    assert routing.views[1].scraped == {} and routing.alive == [True, True, True]
