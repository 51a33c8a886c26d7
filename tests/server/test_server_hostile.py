"""Hostile input against the shared server: text that cannot be encoded, bodies and prompts too
large, and the bookkeeping after each failure (the in-flight gauge returns to 0)."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from helpers_server import metric

MAX_MODEL_LEN = 384  # conftest.MAX_MODEL_LEN
JSON = {"content-type": "application/json"}

SURROGATES = [
    ("/v1/completions", '{"prompt": "ab\\ud800cd", "max_tokens": 2}', "prompt"),
    ("/v1/completions", '{"prompt": ["\\udfff"], "max_tokens": 2}', "prompt"),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "x\\ud800"}], "max_tokens": 2}',
     "messages"),
    ("/v1/chat/completions",
     '{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\udbff"}]}], "max_tokens": 2}',
     "messages"),
    ("/v1/chat/completions",
     '{"messages": [{"role": "user", "content": "x", "name": "n\\ud800"}], "max_tokens": 2}', "messages"),
    ("/v1/completions", '{"prompt": "x", "model": "tiny\\ud800", "max_tokens": 2}', "model"),
    ("/v1/completions", '{"prompt": "x", "stop": ["\\ud800"], "max_tokens": 2}', "stop"),
    ("/v1/completions", '{"prompt": "x", "user": "\\ud800", "max_tokens": 2}', "user"),
    ("/v1/completions", '{"prompt": "x", "model": "tiny\\u0000", "max_tokens": 2}', "model"),
    ("/generate", '{"input_ids": [1, 2], "model": "\\udc00", "max_tokens": 2}', "model"),
]


def assert_in_flight_zero(url: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (v := metric(url, "twinserve_http_requests_in_flight")) != 0.0:
        assert time.monotonic() < deadline, f"in-flight gauge stuck at {v}"
        time.sleep(0.05)


@pytest.mark.parametrize("case", SURROGATES, ids=[c[1][:48] for c in SURROGATES])
def test_unencodable_text_is_a_400_and_leaks_nothing(server, case: tuple) -> None:
    ep, raw, param = case
    for stream in (False, True):
        body = raw if not stream else raw[:-1] + ', "stream": true}'
        r = httpx.post(f"{server.url}{ep}", content=body.encode(), headers=JSON, timeout=10)
        assert r.status_code == 400, (stream, r.text)
        err = r.json()["error"]
        assert err["param"] == param and err["message"], err
        assert set(err) == {"message", "type", "param", "code"}
    assert_in_flight_zero(server.url)


def test_in_flight_returns_to_zero_after_each_failure_kind(server) -> None:
    url = server.url
    long_ids = [5] * (MAX_MODEL_LEN + 1)
    failures = [  # (body, expected status): tokenizer refusal, validation, unknown model
        ({"prompt": long_ids, "max_tokens": 2}, 400),
        ({"prompt": "x", "max_tokens": MAX_MODEL_LEN}, 400),
        ({"prompt": "x", "temperature": -1}, 400),
        ({"prompt": "x", "model": "nope"}, 404),
    ]
    for body, status in failures:
        for stream in (False, True):
            r = httpx.post(f"{url}/v1/completions", json={**body, "stream": stream}, timeout=10)
            assert r.status_code == status, r.text
            assert_in_flight_zero(url)
    # the client leaves while its request waits for tokens
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 300, "ignore_eos": True},
                   timeout=httpx.Timeout(10, read=0.3))
    assert_in_flight_zero(url)
    with httpx.stream("POST", f"{url}/v1/completions", timeout=10,
                      json={"prompt": "y", "max_tokens": 300, "ignore_eos": True, "stream": True}) as s:
        next(s.iter_lines())
    assert_in_flight_zero(url)
    assert metric(url, "twinserve_request_aborted_total", reason="client") >= 2


def test_body_over_the_limit_is_a_413(server) -> None:
    from twinserve.server.config import ServerConfig

    limit = ServerConfig().max_body_bytes  # the shared server runs with the default
    body = json.dumps({"prompt": "a" * limit, "max_tokens": 1}).encode()
    r = httpx.post(f"{server.url}/v1/completions", content=body, headers=JSON, timeout=30)
    assert r.status_code == 413 and "max_body_bytes" in r.json()["error"]["message"]

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(limit // 65536 + 2):
            yield b" " * 65536

    r = httpx.post(f"{server.url}/v1/completions", content=chunks(), headers=JSON, timeout=30)
    assert r.status_code == 413, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert_in_flight_zero(server.url)
    assert metric(server.url, "twinserve_http_requests_total", status="413") >= 2


def _one_token_latency(url: str) -> float:
    t0 = time.perf_counter()
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "hi", "max_tokens": 1}, timeout=60)
    assert r.status_code == 200, r.text
    return time.perf_counter() - t0


def test_huge_prompt_is_refused_without_stalling_others(server) -> None:
    url = server.url
    idle = min(_one_token_latency(url) for _ in range(3))
    huge = json.dumps({"prompt": "lorem ipsum " * 600000, "max_tokens": 1}).encode()  # 7.2 MB
    out: dict = {}

    def send_huge() -> None:
        t0 = time.perf_counter()
        r = httpx.post(f"{url}/v1/completions", content=huge, headers=JSON, timeout=60)
        out["status"], out["s"], out["err"] = r.status_code, time.perf_counter() - t0, r.json()["error"]

    t = threading.Thread(target=send_huge)
    t.start()
    time.sleep(0.05)
    during = _one_token_latency(url)
    t.join(60)
    assert out["status"] == 400 and out["err"]["code"] == "context_length_exceeded", out
    assert out["s"] < 10.0, out
    assert during < idle + 2.0, (idle, during)
    assert_in_flight_zero(url)


def test_models_hide_paths_and_metrics_carry_model_name(server, tiny_model: str) -> None:
    r = httpx.get(f"{server.url}/v1/models", timeout=5)
    assert tiny_model not in r.text and "root" not in r.json()["data"][0]
    httpx.get(f"{server.url}/v1/nothing", timeout=5)
    httpx.post(f"{server.url}/v1/completions", content=b"{", headers=JSON, timeout=5)
    text = httpx.get(f"{server.url}/metrics", timeout=5).text
    for name in ("twinserve_num_preemptions_total", "twinserve_prefix_cache_queries_total",
                 "twinserve_prefix_cache_hits_total", "twinserve_request_queue_time_seconds_bucket",
                 "twinserve_request_prefill_time_seconds_bucket", "twinserve_request_decode_time_seconds_bucket",
                 "twinserve_request_aborted_total", "twinserve_http_requests_total"):
        assert name in text, name
    series = [ln for ln in text.splitlines() if ln.startswith("twinserve_")]
    assert series and all('model_name="tiny-llama"' in ln for ln in series)
    assert metric(server.url, "twinserve_http_requests_total", status="404") >= 1
    assert metric(server.url, "twinserve_http_requests_total", status="400") >= 1
    r = httpx.post(f"{server.url}/v1/completions", json={"prompt": list(range(100, 180)), "max_tokens": 2},
                   timeout=30)
    assert r.status_code == 200
    httpx.post(f"{server.url}/v1/completions", json={"prompt": list(range(100, 180)), "max_tokens": 2}, timeout=30)
    time.sleep(0.3)  # engine counters arrive with the next stats message
    assert metric(server.url, "twinserve_prefix_cache_hits_total") >= 64
    assert metric(server.url, "twinserve_prefix_cache_queries_total") >= 160
    assert metric(server.url, "twinserve_request_queue_time_seconds_count") >= 2
