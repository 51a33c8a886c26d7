"""Process-free units of serving several engine replicas: the tokenizer's `ReplicaRouter` and
its loop's dispatch, and the merged engine gauges."""

from __future__ import annotations

import pytest

from twinserve.server.messages import (AbortRequest, EngineStats, ErrorReply, GenerateRequest, ReplicaDown,
                                       TokenizeRequest, decode)
from twinserve.server.replica_router import ReplicaRouter
from twinserve.server.replica_stats import merge_stats
from twinserve.server.tokenization import TextTokenizer
from twinserve.server.tokenizer_worker import TokenizerLoop, TokenizerWorkerConfig


class _Sink:
    def __init__(self) -> None:
        self.msgs: list[object] = []

    def send(self, data: object, copy: bool = True) -> None:
        self.msgs.append(decode(bytes(data)))


def test_the_router_follows_the_prefixes_it_routed() -> None:
    r = ReplicaRouter(2, "prefix_affinity", page_size=4)
    a, b = list(range(100, 116)), list(range(200, 216))
    assert r.choose(1, a, 8, 0.0) == 0
    assert r.choose(2, b, 8, 0.0) == 1  # no match anywhere: the least loaded (0 holds request 1)
    assert r.choose(3, a + [7, 8], 8, 0.0) == 0 and r.choose(4, b + [9], 8, 0.0) == 1
    r.on_stats(0, {"waiting": 0, "running": 0, "outstanding_tokens": 0, "num_pages": 64})
    assert r.views[0].outstanding_tokens == 0 and r.views[1].outstanding_tokens == 2 * 8 + 16 + 17
    assert r.views[0].match_len(list(a) + [1]) == 16  # the index outlives the stats


def test_the_prefix_index_holds_at_most_the_pool() -> None:
    r = ReplicaRouter(2, "prefix_affinity", page_size=4, capacity_pages=4)
    r.choose(1, list(range(100, 116)), 1, 0.0)  # 4 pages on replica 0
    r.choose(2, list(range(300, 308)), 1, 0.0)  # least loaded: replica 1
    r.choose(3, list(range(500, 516)), 1, 0.0)  # replica 1 again (less outstanding), 6 pages > 4
    assert r.views[1].prefixes.index.num_pages <= 4 and r.views[0].prefixes.index.num_pages == 4


def test_a_replica_down_is_never_chosen_and_none_left_gives_none() -> None:
    r = ReplicaRouter(3, "round_robin")
    assert [r.choose(i, [1, 2, 3], 4, 0.0) for i in range(3)] == [0, 1, 2]
    r.down(1)
    assert [r.choose(i, [1, 2, 3], 4, 0.0) for i in range(4)] == [2, 0, 2, 0]  # the cursor over the live two
    r.down(0)
    r.down(2)
    assert r.choose(9, [1], 1, 0.0) is None


@pytest.fixture(scope="module")
def tok(tiny_model: str) -> TextTokenizer:
    return TextTokenizer(tiny_model)


def test_the_tokenizer_loop_routes_aborts_everywhere_and_503s_when_no_replica_is_left(tok: TextTokenizer) -> None:
    cfg = TokenizerWorkerConfig("", max_model_len=1000, vocab_size=tok.vocab_size, replicas=2)
    engines, api = [_Sink(), _Sink()], _Sink()
    loop = TokenizerLoop(tok, cfg, engines, api)
    for rid in (1, 2, 3):
        loop.handle(TokenizeRequest(rid, "text", f"hello {rid}", None, None, {}, None, 8, {}, 0.0))
    assert [[m.rid for m in e.msgs] for e in engines] == [[1, 3], [2]]
    loop.handle(EngineStats({"waiting": 5}, 0.0, 1))
    assert loop.routing.views[1].num_waiting == 5
    loop.handle(AbortRequest(2))
    assert all(isinstance(e.msgs[-1], AbortRequest) and e.msgs[-1].rid == 2 for e in engines)
    loop.handle(ReplicaDown(0, "gone"))
    loop.handle(TokenizeRequest(4, "text", "four", None, None, {}, None, 8, {}, 0.0))
    loop.handle(AbortRequest(4))
    assert [type(m).__name__ for m in engines[0].msgs] == ["GenerateRequest", "GenerateRequest", "AbortRequest"]
    assert [m.rid for m in engines[1].msgs if isinstance(m, GenerateRequest)] == [2, 4]
    loop.handle(ReplicaDown(1, "gone"))
    loop.handle(TokenizeRequest(5, "text", "five", None, None, {}, None, 8, {}, 0.0))
    assert isinstance(api.msgs[-1], ErrorReply) and api.msgs[-1].status == 503 and api.msgs[-1].rid == 5


def test_merged_gauges() -> None:
    one = {"running": 2, "waiting": 1, "kv_usage": 0.5, "num_pages": 100, "tp_size": 1}
    assert merge_stats({0: one}) == one
    two = {"running": 1, "waiting": 0, "kv_usage": 0.2, "num_pages": 300, "tp_size": 1,
           "prefix_cache_queried_tokens": 10.0, "prefix_cache_hit_tokens": 5.0, "cache_hit_rate": 0.5}
    m = merge_stats({0: {**one, "prefix_cache_queried_tokens": 30.0, "prefix_cache_hit_tokens": 0.0,
                         "cache_hit_rate": 0.0}, 1: two})
    assert (m["running"], m["waiting"], m["num_pages"], m["tp_size"]) == (3, 1, 400, 1)
    assert m["kv_usage"] == pytest.approx((0.5 * 100 + 0.2 * 300) / 400)
    assert m["cache_hit_rate"] == pytest.approx(5 / 40)
