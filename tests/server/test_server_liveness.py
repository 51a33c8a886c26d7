"""A server with an API key (from TWINSERVE_API_KEY), debug routes off, a 3 s request timeout
and a 1 s engine stall limit: access control, the timeout's bookkeeping (a stopped tokenizer
holds a request past its deadline), and a stopped (SIGSTOP) engine turning /health to 503 and
failing its in-flight requests, then recovering."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import openai
import pytest
from helpers_server import metric

KEY = "sk-test-0123"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def guarded(tiny_model: str):
    from twinserve.engine.engine import EngineConfig
    from twinserve.server.launch import start_server

    cfg = EngineConfig(model=tiny_model, device="cpu", max_model_len=384, cpu_kv_tokens=16384, seed=0)
    h = start_server(cfg, request_timeout_s=3.0, engine_stall_s=1.0,
                     env={"OMP_NUM_THREADS": "1", "TWINSERVE_API_KEY": KEY})
    yield h
    h.stop()


def _in_flight(url: str) -> float:
    return metric(url, "twinserve_http_requests_in_flight")


def test_api_key_is_required_on_v1_and_generate(guarded) -> None:
    url = guarded.url
    calls = [("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1}),
             ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1}),
             ("POST", "/generate", {"input_ids": [1, 2], "max_tokens": 1}),
             ("GET", "/v1/models", None)]
    for method, path, body in calls:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
            r = httpx.request(method, f"{url}{path}", json=body, headers=headers, timeout=10)
            assert r.status_code == 401, (path, headers, r.text)
            assert r.json()["error"]["code"] == "invalid_api_key" and r.headers["www-authenticate"] == "Bearer"
        r = httpx.request(method, f"{url}{path}", json=body, headers=AUTH, timeout=30)
        assert r.status_code == 200, (path, r.text)
    for path in ("/health", "/metrics"):
        assert httpx.get(f"{url}{path}", timeout=5).status_code == 200
    assert metric(url, "twinserve_http_requests_total", status="401") == 12
    c = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=30)
    assert c.completions.create(model="tiny-llama", prompt="k", max_tokens=2).usage.completion_tokens >= 1
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{url}/v1", api_key="nope", max_retries=0).models.list()


def test_debug_routes_are_off_by_default(guarded) -> None:
    assert httpx.get(f"{guarded.url}/debug/engine", headers=AUTH, timeout=5).status_code == 404
    paths = httpx.get(f"{guarded.url}/openapi.json", timeout=5).json()["paths"]
    assert not any(p.startswith("/debug") for p in paths)


def test_request_timeout_unregisters_the_request(guarded) -> None:
    tok = guarded.children["tokenizer0"]
    os.kill(tok, signal.SIGSTOP)  # not on the heartbeat's path: only the request's deadline ends it
    try:
        r = httpx.post(f"{guarded.url}/v1/completions", headers=AUTH, timeout=30,
                       json={"prompt": "slow", "max_tokens": 3})
    finally:
        os.kill(tok, signal.SIGCONT)
    assert r.status_code == 504 and "did not finish" in r.json()["error"]["message"], r.text
    assert _in_flight(guarded.url) == 0.0
    assert httpx.get(f"{guarded.url}/health", timeout=5).status_code == 200
    assert metric(guarded.url, "twinserve_request_aborted_total", reason="timeout") == 1


def test_stopped_engine_turns_health_503_and_fails_in_flight(guarded) -> None:
    url, engine = guarded.url, guarded.children["engine0"]
    outcome: dict = {}

    def stream() -> None:
        body = {"prompt": "x", "max_tokens": 300, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{url}/v1/completions", json=body, headers=AUTH, timeout=30) as s:
            lines = []
            for ln in s.iter_lines():
                lines.append(ln)
                if len(lines) == 2:
                    outcome["streaming"] = time.monotonic()
            outcome["last"] = [x for x in lines if x.startswith("data: {")][-1]
            outcome["end"] = time.monotonic()

    t = threading.Thread(target=stream)
    t.start()
    deadline = time.monotonic() + 20
    while "streaming" not in outcome and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(engine, signal.SIGSTOP)
    t_stop = time.monotonic()
    try:
        t.join(15)
        assert not t.is_alive(), "the stream did not end while the engine was stopped"
        assert '"error"' in outcome["last"] and "heartbeat" in outcome["last"], outcome
        assert 0.7 < outcome["end"] - t_stop < 2.8, outcome["end"] - t_stop  # stall limit 1 s, deadline 3 s
        h = httpx.get(f"{url}/health", timeout=5)
        assert h.status_code == 503 and "stalled" in h.json()["error"]["message"]
        r = httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 1}, headers=AUTH, timeout=5)
        assert r.status_code == 503 and "heartbeat" in r.json()["error"]["message"]
        assert _in_flight(url) == 0.0
        assert metric(url, "twinserve_num_requests_running") == 0.0
    finally:
        os.kill(engine, signal.SIGCONT)
    deadline = time.monotonic() + 10
    while httpx.get(f"{url}/health", timeout=5).status_code != 200:
        assert time.monotonic() < deadline, "no recovery after SIGCONT"
        time.sleep(0.05)
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "again", "max_tokens": 2, "ignore_eos": True},
                   headers=AUTH, timeout=30)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2
