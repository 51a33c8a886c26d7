"""The real server (4 processes, CPU, tiny model) driven by the official openai client."""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=60)


def _idle_stats(server, timeout_s: float = 10.0) -> dict:
    """Wait until the engine reports no running/waiting request and no KV held by requests."""
    deadline = time.monotonic() + timeout_s
    while True:
        d = httpx.get(f"{server.url}/debug/engine", timeout=5).json()
        s = d["stats"]
        if (d["in_flight"] == 0 and s.get("running") == 0 and s.get("waiting") == 0
                and s.get("kv_usage") == 0.0):
            return d
        if time.monotonic() > deadline:
            raise AssertionError(f"engine not idle after {timeout_s} s: {d}")
        time.sleep(0.05)


def test_debug_names_the_event_loop_and_http_parser(server) -> None:
    import importlib.util

    want = {"loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
            "http": "httptools" if importlib.util.find_spec("httptools") else "h11"}
    assert httpx.get(f"{server.url}/debug/engine", timeout=5).json()["http_stack"] == want


def test_models(client: openai.OpenAI) -> None:
    models = client.models.list().data
    assert [m.id for m in models] == ["tiny-llama"]


def test_completion(client: openai.OpenAI, tiny_model: str) -> None:
    from twinserve.server.tokenization import TextTokenizer

    n_prompt = len(TextTokenizer(tiny_model).encode("Hello there"))
    r = client.completions.create(model="tiny-llama", prompt="Hello there", max_tokens=6,
                                  temperature=0, extra_body={"ignore_eos": True})
    assert r.object == "text_completion" and r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 6 and r.usage.prompt_tokens == n_prompt
    assert r.usage.total_tokens == n_prompt + 6
    assert r.usage.prompt_tokens_details.cached_tokens >= 0


def test_completion_with_extra_body(client: openai.OpenAI) -> None:
    r = client.completions.create(model="tiny-llama", prompt=[1, 40, 41, 42], max_tokens=5,
                                  temperature=0.8, top_p=0.9, seed=3,
                                  extra_body={"top_k": 20, "ignore_eos": True})
    assert r.usage.completion_tokens == 5 and r.usage.prompt_tokens == 4


def test_streamed_completion_matches_the_full_one(client: openai.OpenAI) -> None:
    kw = dict(model="tiny-llama", prompt="Streams of text", max_tokens=10, temperature=0,
              extra_body={"ignore_eos": True})
    full = client.completions.create(**kw).choices[0].text
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 10
    assert chunks[-1].choices == []
    assert chunks[-2].choices[0].finish_reason == "length"
    assert "".join(c.choices[0].text for c in chunks[:-1]) == full


def test_chat(client: openai.OpenAI) -> None:
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    r = client.chat.completions.create(model="tiny-llama", messages=msgs, max_tokens=7, temperature=0,
                                       extra_body={"ignore_eos": True})
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant" and r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 7
    stream = client.chat.completions.create(model="tiny-llama", messages=msgs, max_tokens=7, temperature=0,
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == r.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == 7 and chunks[-1].usage.prompt_tokens == r.usage.prompt_tokens


def test_chat_max_completion_tokens_and_default_length(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": "x"}],
                                       max_completion_tokens=3, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 3


def test_seed_and_greedy_are_reproducible(client: openai.OpenAI) -> None:
    kw = dict(model="tiny-llama", prompt="seeded", max_tokens=8, extra_body={"ignore_eos": True})
    a = client.completions.create(temperature=1.0, seed=42, **kw).choices[0].text
    b = client.completions.create(temperature=1.0, seed=42, **kw).choices[0].text
    assert a == b
    g1 = client.completions.create(temperature=0, **kw).choices[0].text
    g2 = client.completions.create(temperature=0, **kw).choices[0].text
    assert g1 == g2


def test_stop_strings(client: openai.OpenAI) -> None:
    kw = dict(model="tiny-llama", prompt="Stop me", max_tokens=16, temperature=0,
              extra_body={"ignore_eos": True})
    full = client.completions.create(**kw).choices[0].text
    # a stop string from the middle of the greedy answer, not occurring earlier
    i = next(k for k in range(2, len(full) - 2) if full.find(full[k:k + 2]) == k)
    stop = full[i:i + 2]
    r = client.completions.create(stop=[stop, "never-seen-stop"], **kw)
    assert r.choices[0].text == full[:i] and r.choices[0].finish_reason == "stop"
    streamed = list(client.completions.create(stop=stop, stream=True, **kw))
    assert "".join(c.choices[0].text for c in streamed) == full[:i]
    assert streamed[-1].choices[0].finish_reason == "stop"


def test_stop_token_ids_and_generate(server) -> None:
    body = {"input_ids": [1, 60, 61, 62], "max_tokens": 12, "temperature": 1.0, "seed": 5, "ignore_eos": True}
    r = httpx.post(f"{server.url}/generate", json=body, timeout=30).json()
    ids = r["output_ids"]
    assert len(ids) == 12 and r["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 12
    k = next(j for j in range(2, 12) if ids[j] not in ids[:j])
    r2 = httpx.post(f"{server.url}/generate", json={**body, "stop_token_ids": [ids[k]]}, timeout=30).json()
    assert r2["output_ids"] == ids[: k + 1] and r2["finish_reason"] == "stop"
    # streamed /generate gives the same ids
    with httpx.stream("POST", f"{server.url}/generate", json={**body, "stream": True}, timeout=30) as s:
        lines = [ln for ln in s.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    import json
    got = [t for ln in lines[:-1] for t in json.loads(ln[6:])["output_ids"]]
    assert got == ids


def test_prefix_cache_hits_are_reported(client: openai.OpenAI) -> None:
    prompt = list(range(100, 180))  # 80 tokens = 5 full pages of 16
    kw = dict(model="tiny-llama", prompt=prompt, max_tokens=2, extra_body={"ignore_eos": True})
    client.completions.create(**kw)
    r = client.completions.create(**kw)
    assert r.usage.prompt_tokens_details.cached_tokens >= 64


def test_concurrent_requests(server) -> None:
    async def run() -> list:
        c = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=60)
        async def one(i: int):
            if i % 2:
                return await c.completions.create(model="tiny-llama", prompt=f"request {i}", max_tokens=8 + i,
                                                  extra_body={"ignore_eos": True})
            stream = await c.chat.completions.create(
                model="tiny-llama", messages=[{"role": "user", "content": f"chat {i}"}], max_tokens=8 + i,
                stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
            return [ch async for ch in stream]
        try:
            return await asyncio.gather(*(one(i) for i in range(10)))
        finally:
            await c.close()

    results = asyncio.run(run())
    for i, r in enumerate(results):
        usage = r.usage if i % 2 else r[-1].usage
        assert usage.completion_tokens == 8 + i
    _idle_stats(server)


def test_disconnect_mid_stream_frees_pages(server) -> None:
    _idle_stats(server)
    body = {"model": "tiny-llama", "prompt": "a long answer please", "max_tokens": 360, "ignore_eos": True,
            "stream": True}
    t0 = time.monotonic()
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=30) as s:
        assert s.status_code == 200
        n = 0
        for line in s.iter_lines():
            n += line.startswith("data: ")
            if n == 3:
                for _ in range(20):  # engine gauges are published every 0.1 s
                    busy = httpx.get(f"{server.url}/debug/engine", timeout=5).json()
                    if busy["stats"]["kv_usage"] > 0:
                        break
                    time.sleep(0.05)
                break  # closing the line iterator closes the connection mid-stream
    assert busy["in_flight"] == 1 and busy["stats"]["kv_usage"] > 0 and busy["stats"]["running"] == 1
    d = _idle_stats(server, timeout_s=5.0)
    # 360 tokens would take several seconds on CPU: reaching idle this fast means it was aborted
    assert time.monotonic() - t0 < 5.0, d
    m = httpx.get(f"{server.url}/metrics", timeout=5).text
    assert 'twinserve_kv_cache_usage_perc{model_name="tiny-llama"} 0.0' in m
    assert 'twinserve_num_requests_running{model_name="tiny-llama"} 0.0' in m


def test_disconnect_while_non_streaming_aborts(server) -> None:
    body = {"model": "tiny-llama", "prompt": "wait for me", "max_tokens": 360, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.url}/v1/completions", json=body, timeout=httpx.Timeout(30, read=0.5))
    _idle_stats(server, timeout_s=5.0)


def test_metrics(server, client: openai.OpenAI) -> None:
    client.completions.create(model="tiny-llama", prompt="metrics", max_tokens=3, extra_body={"ignore_eos": True})
    m = httpx.get(f"{server.url}/metrics", timeout=5)
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    text = m.text
    for name in ("twinserve_num_requests_running", "twinserve_num_requests_waiting",
                 "twinserve_kv_cache_usage_perc", "twinserve_prefix_cache_hit_rate",
                 "twinserve_time_to_first_token_seconds_bucket", "twinserve_inter_token_latency_seconds_bucket",
                 "twinserve_e2e_request_latency_seconds_bucket", "twinserve_prompt_tokens_total",
                 "twinserve_generation_tokens_total"):
        assert name in text, name
    gen = float(next(ln.split()[-1] for ln in text.splitlines() if ln.startswith("twinserve_generation_tokens_total{")))
    assert gen >= 3
    ttft = float(next(ln.split()[-1] for ln in text.splitlines()
                      if ln.startswith("twinserve_time_to_first_token_seconds_count")))
    assert ttft >= 1


def test_health(server) -> None:
    r = httpx.get(f"{server.url}/health", timeout=5)
    assert r.status_code == 200 and r.json() == {"status": "ok"}
