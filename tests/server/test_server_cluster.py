"""Two tiny CPU engine replicas behind one API server: requests are routed over both, and a
killed replica is routed around (its in-flight request fails with a clear 503, `/health` says
degraded, the other keeps serving)."""

from __future__ import annotations

import os
import signal
import time

import httpx
import openai
import pytest


def _engine_config(model: str):
    from twinserve.engine.engine import EngineConfig

    return EngineConfig(model=model, device="cpu", max_model_len=256, cpu_kv_tokens=8192)


def _until(cond, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    pytest.fail("condition not met in time")


@pytest.fixture(scope="module")
def cluster(tiny_model: str):
    from twinserve.server.launch import start_server

    h = start_server(_engine_config(tiny_model), replicas=2, router="round_robin", debug=True,
                     request_timeout_s=60.0, env={"OMP_NUM_THREADS": "1"})
    yield h
    assert h.stop() == 0, h.log()


def test_a_replay_records_the_replica_that_served_each_request(cluster) -> None:
    from twinserve.core.workload import synthetic
    from twinserve.server.bench_client import BenchConfig, bench_workload

    wl = synthetic(num_requests=6, rate=20.0, prompt_len=12, output_len=3, seed=3, vocab_size=1024)
    res = bench_workload(BenchConfig(base_url=cluster.url, timeout_s=60), wl)
    assert res.errors == []
    assert sorted(res.requests.replica.tolist()) == [0, 0, 0, 1, 1, 1]  # round robin over the two


def test_requests_go_to_both_replicas_and_a_dead_one_is_routed_around(cluster) -> None:
    url = cluster.url
    assert {"engine0", "engine1"} <= set(cluster.children)
    c = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30)

    def complete(prompt: str) -> int:
        r = c.completions.create(model="tiny-llama", prompt=prompt, max_tokens=3, extra_body={"ignore_eos": True})
        return r.usage.completion_tokens

    assert [complete(f"warm {i}") for i in range(4)] == [3] * 4  # round robin: 0, 1, 0, 1

    def queried() -> dict | None:
        reps = httpx.get(f"{url}/debug/engine", timeout=5).json()["replicas"]
        ok = len(reps) == 2 and all(r.get("prefix_cache_queried_tokens", 0) > 0 for r in reps.values())
        return reps if ok else None

    _until(queried)  # both replicas admitted requests
    kw = dict(model="tiny-llama", prompt="long", max_tokens=200, stream=True, extra_body={"ignore_eos": True})
    on0, on1 = c.completions.create(**kw), c.completions.create(**kw)  # replicas 0 and 1
    it0, it1 = iter(on0), iter(on1)
    next(it0), next(it1)
    os.kill(cluster.children["engine1"], signal.SIGKILL)
    with pytest.raises(openai.APIError) as e:
        for _ in it1:
            pass
    assert "engine replica 1 died" in str(e.value)
    assert sum(1 for _ in it0) >= 1  # the other replica's stream runs to its end
    health = _until(lambda: (h := httpx.get(f"{url}/health", timeout=5)).json().get("status") == "degraded" and h)
    assert health.status_code == 200 and health.json()["replicas_down"] == [1]
    assert [complete(f"after {i}") for i in range(4)] == [3] * 4  # all served by replica 0


def test_prefix_affinity_sends_a_shared_prefix_where_it_was_sent_before(tiny_model: str) -> None:
    from twinserve.server.launch import start_server

    prefix = list(range(100, 164))  # 4 pages of 16 tokens (vocabulary: 1024)

    def generate(url: str, ids: list[int]) -> None:
        r = httpx.post(f"{url}/generate", json={"input_ids": ids, "max_tokens": 2, "ignore_eos": True}, timeout=30)
        assert r.status_code == 200, r.text

    with start_server(_engine_config(tiny_model), replicas=2, router="prefix_affinity", debug=True,
                      request_timeout_s=60.0, env={"OMP_NUM_THREADS": "1"}) as h:
        for i in range(4):  # the prefix every third request: round robin would alternate its replica
            generate(h.url, prefix + [7, 8, 9 + i])
            for j in range(2):
                generate(h.url, list(range(200 + 100 * (2 * i + j), 240 + 100 * (2 * i + j))))

        def hits() -> list | None:
            reps = httpx.get(f"{h.url}/debug/engine", timeout=5).json()["replicas"]
            got = [r.get("prefix_cache_hit_tokens", 0) for r in reps.values()]
            return got if len(got) == 2 and max(got) >= 3 * 64 else None

        _until(hits)  # the three later requests found the prefix on the replica the first went to
