"""`UrlRouter` and the bench client's retries, with fake transports: a URL that refuses the
connection is routed around, a 429 is retried once on each other live URL, and the views'
counts return to 0."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator

import numpy as np
import pytest

from helpers_server import free_port
from twinserve.core.workload import RequestSpec
from twinserve.server.bench_client import BenchConfig, _Replayer
from twinserve.server.bench_transport import TRANSPORTS, ConnectError, HTTPStatusError
from twinserve.server.url_router import UrlRouter

_TOKEN = b'data: {"choices":[{"index":0,"text":"x","finish_reason":null}]}\n\n'
_LAST = b'data: {"choices":[{"index":0,"text":"x","finish_reason":"length"}]}\n\ndata: [DONE]\n\n'


class FakeClient:
    """A transport whose ``stream`` refuses (``ConnectError``), answers 429, or streams tokens."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.calls = 0

    @contextlib.asynccontextmanager
    async def stream(self, path: str, body: dict[str, Any]) -> AsyncIterator[AsyncIterator[bytes]]:
        self.calls += 1
        if self.mode == "refuse":
            raise ConnectError("ConnectError: connection refused")
        if self.mode == "429":
            raise HTTPStatusError("HTTP 429: queue full", 429)

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(body["max_tokens"] - 1):
                yield _TOKEN
            yield _LAST

        yield chunks()


def _send(clients: list[FakeClient], routing: UrlRouter, rid: int = 1) -> Any:
    spec = RequestSpec(rid=rid, arrival=0.0, prompt_len=20, output_len=3)
    prompt = list(range(20))
    rep = _Replayer(BenchConfig(replica_urls=["a", "b", "c"]), "m", clients, routing)
    return asyncio.run(rep.one(spec, prompt, np.asarray(prompt, dtype=np.int32)))


def test_a_refused_url_is_taken_out_and_the_request_served_elsewhere() -> None:
    clients = [FakeClient("refuse"), FakeClient("ok"), FakeClient("ok")]
    routing = UrlRouter(["a", "b", "c"], "round_robin")
    row = _send(clients, routing)
    assert row.error is None and row.replica in (1, 2) and row.output_tokens == 3
    assert routing.alive == [False, True, True]
    row = _send(clients, routing, rid=2)
    assert row.replica in (1, 2) and clients[0].calls == 1  # never tried again
    assert all(v.in_flight == 0 and v.tokens == 0 for v in routing.views)


def test_a_429_is_retried_once_on_each_other_live_url() -> None:
    clients = [FakeClient("429"), FakeClient("429"), FakeClient("ok")]
    routing = UrlRouter(["a", "b", "c"], "least_loaded")  # all idle: tries 0, then 1, then 2
    row = _send(clients, routing)
    assert row.error is None and row.replica == 2 and row.finish_reason == "length"
    assert [c.calls for c in clients] == [1, 1, 1]
    assert routing.alive == [True, True, True]  # a full queue is not a dead server
    assert all(v.in_flight == 0 and v.tokens == 0 for v in routing.views)


def test_429_everywhere_fails_once_per_url_with_the_429() -> None:
    clients = [FakeClient("429"), FakeClient("refuse"), FakeClient("429")]
    routing = UrlRouter(["a", "b", "c"], "least_loaded")
    row = _send(clients, routing)
    assert row.finish_reason == "abort" and [c.calls for c in clients] == [1, 1, 1]
    assert "HTTP 429" in row.error and "every live server" in row.error


def test_no_url_left_names_every_url_and_why() -> None:
    clients = [FakeClient("refuse"), FakeClient("refuse"), FakeClient("refuse")]
    routing = UrlRouter(["http://a:1", "http://b:2", "http://c:3"], "least_loaded")
    row = _send(clients, routing)
    assert row.finish_reason == "abort" and np.isnan(row.finish_s)
    assert row.error.startswith("NoReplica: no server left")
    assert all(u in row.error for u in ("http://a:1", "http://b:2", "http://c:3"))
    assert "connection refused" in row.error


def test_views_count_what_was_sent_and_prefix_affinity_follows_it() -> None:
    routing = UrlRouter(["a", "b"], "prefix_affinity")
    shared = np.arange(100, 164, dtype=np.int32)
    first = routing.choose(1, np.concatenate([shared, [1, 2]]).astype(np.int32), 4, 0.0)
    other = routing.choose(2, np.arange(500, 540, dtype=np.int32), 4, 0.0)  # no match: least loaded
    assert other != first
    assert routing.views[first].num_running == 1 and routing.views[first].outstanding_tokens == 66 + 4
    routing.on_tokens(first, 2)
    assert routing.views[first].outstanding_tokens == 68
    for rid in range(3, 8):
        assert routing.choose(rid, np.concatenate([shared, [rid]]).astype(np.int32), 4, 0.0) == first
    assert routing.choose(9, shared, 4, 0.0, exclude=frozenset({first})) == other


@pytest.mark.parametrize("name", ["httpx", "aiohttp"])
def test_transports_raise_connect_error_where_nothing_listens(name: str) -> None:
    if name == "aiohttp":
        pytest.importorskip("aiohttp")
    url = f"http://127.0.0.1:{free_port()}"

    async def go() -> list[str]:
        got = []
        async with TRANSPORTS.create(name, base_url=url, timeout_s=5, max_connections=4, headers={}) as t:
            for call in (lambda: t.get_json("/v1/models"), None):
                try:
                    if call is not None:
                        await call()
                    else:
                        async with t.stream("/v1/completions", {"prompt": [1]}) as chunks:
                            async for _ in chunks:
                                pass
                except ConnectError as e:
                    got.append(type(e).__name__)
        return got

    assert asyncio.run(go()) == ["ConnectError", "ConnectError"]


def test_scraped_gauges_reads_twinserve_and_vllm_names() -> None:
    from twinserve.server.scraped_gauges import scraped_gauges

    text = "\n".join([
        "# HELP twinserve_num_requests_waiting Requests waiting",
        '# TYPE twinserve_num_requests_waiting gauge',
        'twinserve_num_requests_waiting{model_name="a"} 3.0',
        'twinserve_kv_cache_usage_perc{model_name="a"} 0.25 1700000000000',
        "twinserve_num_requests_running 7",
        'vllm:num_requests_waiting{model_name="b",engine="0"} 2',
        "vllm:kv_cache_usage_perc not-a-number",
    ])
    assert scraped_gauges(text) == {"waiting": 5.0, "kv_usage": 0.25}
    assert scraped_gauges("") == {}


def test_scraped_gauges_feed_the_views() -> None:
    routing = UrlRouter(["a", "b"], "cache_aware", {"max_kv_usage": 0.5})
    routing.on_scraped(0, {"waiting": 4.0, "kv_usage": 0.9})
    assert (routing.views[0].num_waiting, routing.views[0].kv_usage) == (4, 0.9)
    assert (routing.views[1].num_waiting, routing.views[1].kv_usage) == (0, 0.0)
    prompt = np.arange(32, dtype=np.int32)
    assert routing.choose(1, prompt, 4, 0.0) == 1  # replica 0 is over cache_aware's KV limit


def test_a_down_url_is_probed_with_a_doubling_back_off_and_comes_back() -> None:
    r = UrlRouter(["http://a", "http://b"], "round_robin", probe_first_s=1.0, probe_max_s=3.0)
    r.down(1, "refused", now=10.0)
    r.down(1, "refused again", now=10.5)  # already down: the first reason and schedule stay
    assert r.why_down[1] == "refused" and r.due(10.9) == [] and r.due(11.0) == [1]
    r.probe_failed(1, 11.0)
    assert r.due(12.9) == [] and r.due(13.0) == [1]  # waited 2 s
    r.probe_failed(1, 13.0)
    r.probe_failed(1, 16.0, "still refused")
    assert r.due(18.9) == [] and r.due(19.0) == [1] and r.why_down[1] == "still refused"  # capped at 3 s
    k = r.choose(1, np.arange(32), 4, 19.0)
    assert k == 0  # still out of rotation
    r.on_end(k, 36)
    r.views[1].prefixes.add(np.arange(64))
    r.up(1)
    assert r.alive == [True, True] and r.due(1e9) == [] and 1 not in r.why_down and r.returns == [0, 1]
    assert r.views[1].match_len(np.arange(64)) == 0  # a returned server's cache is not assumed
    assert {r.choose(i, np.arange(8), 2, 20.0) for i in range(2)} == {0, 1}


def test_a_url_marked_down_without_a_time_is_never_probed() -> None:
    r = UrlRouter(["http://a", "http://b"])
    r.down(0, "refused")
    assert r.due(1e12) == []
