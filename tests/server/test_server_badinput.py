"""Every kind of bad input gets a 4xx with an OpenAI-style error body: never a 5xx, never a hang."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

MAX_MODEL_LEN = 384  # the shared server's context (conftest.MAX_MODEL_LEN; checked below)

CHAT = {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
COMP = {"model": "tiny-llama", "prompt": "hi", "max_tokens": 2}
GEN = {"input_ids": [1, 2, 3], "max_tokens": 2}

LONG_IDS = [5] * (MAX_MODEL_LEN + 10)

# (endpoint, raw body or JSON object, expected status, expected param or None)
CASES = [
    ("/v1/completions", b'{"prompt": "x",', 400, None),                    # malformed JSON
    ("/v1/completions", b"not json at all", 400, None),
    ("/v1/completions", b"[1, 2, 3]", 400, None),                           # non-object JSON
    ("/v1/chat/completions", b'"a string"', 400, None),
    ("/generate", b"42", 400, None),
    ("/v1/completions", b"null", 400, None),
    ("/v1/completions", b"", 400, None),                                    # empty body
    ("/v1/completions", {"max_tokens": 2}, 400, "prompt"),                  # missing field
    ("/v1/chat/completions", {"model": "tiny-llama"}, 400, "messages"),
    ("/v1/completions", {**COMP, "prompt": 123}, 400, "prompt"),            # wrong types
    ("/v1/completions", {**COMP, "max_tokens": "5"}, 400, "max_tokens"),
    ("/v1/completions", {**COMP, "max_tokens": 2.5}, 400, "max_tokens"),
    ("/v1/completions", {**COMP, "temperature": "hot"}, 400, "temperature"),
    ("/v1/completions", {**COMP, "stream": "yes"}, 400, "stream"),
    ("/v1/completions", {**COMP, "stop": 5}, 400, "stop"),
    ("/v1/completions", {**COMP, "ignore_eos": 1}, 400, "ignore_eos"),
    ("/v1/chat/completions", {**CHAT, "messages": "hi"}, 400, "messages"),
    ("/v1/chat/completions", {**CHAT, "messages": []}, 400, "messages"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": 5}]}, 400, None),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "wizard", "content": "x"}]}, 400, None),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x"}}]}]}, 400, None),
    ("/generate", {"input_ids": "1 2 3"}, 400, "input_ids"),
    ("/generate", {"input_ids": []}, 400, "input_ids"),
    ("/generate", {"input_ids": [-1, 2]}, 400, None),
    ("/generate", {"input_ids": [10**6]}, 400, "input_ids"),                # outside the vocabulary
    ("/generate", {"input_ids": [2**40]}, 400, None),
    ("/v1/completions", {**COMP, "prompt": []}, 400, "prompt"),             # empty prompt
    ("/v1/completions", {**COMP, "prompt": LONG_IDS}, 400, "prompt"),       # longer than the context
    ("/v1/completions", {**COMP, "prompt": "word " * (MAX_MODEL_LEN * 2)}, 400, "prompt"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": "w " * MAX_MODEL_LEN}]},
     400, "messages"),
    ("/v1/completions", {**COMP, "max_tokens": 0}, 400, "max_tokens"),      # max_tokens out of range
    ("/v1/completions", {**COMP, "max_tokens": -3}, 400, "max_tokens"),
    ("/v1/completions", {**COMP, "max_tokens": MAX_MODEL_LEN}, 400, "max_tokens"),
    ("/v1/completions", {**COMP, "max_tokens": 10**30}, 400, "max_tokens"),
    ("/v1/chat/completions", {**CHAT, "max_completion_tokens": 0}, 400, "max_completion_tokens"),
    ("/v1/completions", {**COMP, "temperature": -0.5}, 400, "temperature"),  # bad sampling values
    ("/v1/completions", {**COMP, "temperature": 7}, 400, "temperature"),
    ("/v1/completions", b'{"prompt": "x", "temperature": NaN}', 400, None),
    ("/v1/completions", b'{"prompt": "x", "top_p": Infinity}', 400, None),
    ("/v1/completions", {**COMP, "top_p": 0}, 400, "top_p"),
    ("/v1/completions", {**COMP, "top_p": 1.5}, 400, "top_p"),
    ("/v1/completions", {**COMP, "top_k": -2}, 400, "top_k"),
    ("/v1/completions", {**COMP, "seed": 2**70}, 400, "seed"),
    ("/v1/completions", {**COMP, "seed": 2**64}, 400, "seed"),
    ("/v1/completions", {**COMP, "n": 17}, 400, "n"),                       # above server.max_n (16)
    ("/v1/completions", {**COMP, "n": 0}, 400, "n"),
    ("/generate", {**GEN, "n": 2}, 400, "n"),
    ("/v1/completions", {**COMP, "logprobs": 21}, 400, "logprobs"),
    ("/v1/completions", {**COMP, "logprobs": -1}, 400, "logprobs"),
    ("/v1/completions", {**COMP, "best_of": 2}, 400, "best_of"),
    ("/v1/completions", {**COMP, "suffix": "x"}, 400, "suffix"),
    ("/v1/chat/completions", {**CHAT, "top_logprobs": 3}, 400, "top_logprobs"),  # without logprobs
    ("/v1/chat/completions", {**CHAT, "logprobs": True, "top_logprobs": 21}, 400, "top_logprobs"),
    ("/v1/completions", {**COMP, "presence_penalty": 2.5}, 400, "presence_penalty"),
    ("/v1/completions", {**COMP, "frequency_penalty": -3}, 400, "frequency_penalty"),
    ("/v1/completions", {**COMP, "repetition_penalty": 0}, 400, "repetition_penalty"),
    ("/v1/completions", {**COMP, "min_p": 1.5}, 400, "min_p"),
    ("/v1/completions", {**COMP, "min_tokens": -1}, 400, "min_tokens"),
    ("/v1/completions", {**COMP, "min_tokens": 5}, 400, None),               # more than max_tokens
    ("/v1/completions", {**COMP, "logit_bias": {"abc": 1}}, 400, "logit_bias"),
    ("/v1/completions", {**COMP, "logit_bias": {"5": 101}}, 400, "logit_bias"),
    ("/v1/completions", {**COMP, "logit_bias": {"1000000": 1}}, 400, None),  # outside the vocabulary
    ("/v1/completions", {**COMP, "response_format": {"type": "xml"}}, 400, "response_format"),
    ("/v1/completions", {**COMP, "response_format": {"type": "json_schema"}}, 400, "response_format"),
    ("/v1/chat/completions", {**CHAT, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "no-such-type"}}}}, 400, None),      # the grammar engine refuses it
    ("/v1/chat/completions", {**CHAT, "tools": [{"type": "function", "function": {"name": "f"}}]},
     400, "tools"),
    ("/v1/chat/completions", {**CHAT, "tool_choice": "auto"}, 400, "tool_choice"),
    ("/v1/chat/completions", {**CHAT, "functions": [{"name": "f"}]}, 400, "functions"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "assistant", "content": None,
                                                    "tool_calls": [{"id": "1"}]}]}, 400, None),
    ("/v1/completions", {**COMP, "frobnicate": 1}, 400, "frobnicate"),       # not an OpenAI field
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": "x", "colour": "red"}]},
     400, None),
    ("/v1/completions", {**COMP, "stop_token_ids": [-4]}, 400, None),
    ("/v1/completions", {**COMP, "prompt": ["a", "b"]}, 400, "prompt"),
    ("/v1/completions", {**COMP, "stream_options": {"include_usage": True}}, 400, "stream_options"),
    ("/generate", {**GEN, "stop": ["x"]}, 400, "stop"),
    ("/v1/completions", {**COMP, "model": "gpt-17"}, 404, "model"),         # unknown model
]


def _id(case: tuple) -> str:
    ep, body, status, param = case
    raw = body if isinstance(body, bytes) else json.dumps(body)
    return f"{ep}:{raw[:40]!r}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_bad_input_gets_an_openai_error(server, case: tuple) -> None:
    ep, body, status, param = case
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    for stream in (False, True):
        if stream and not isinstance(body, dict):
            continue
        data = raw if not stream else json.dumps({**body, "stream": True}).encode()
        if stream and ("stream_options" in body or "stream" in body):
            continue  # the body's own stream field is the point of the case
        r = httpx.post(f"{server.url}{ep}", content=data, headers={"content-type": "application/json"},
                       timeout=10)
        assert r.status_code == status, (stream, r.text)
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"], err
        if param is not None:
            assert err["param"] == param, err


def test_context_matches_the_server(server) -> None:
    m = httpx.get(f"{server.url}/v1/models", timeout=5).json()["data"][0]
    assert m["max_model_len"] == MAX_MODEL_LEN


def test_unknown_route_and_method(server) -> None:
    r = httpx.get(f"{server.url}/v1/nothing", timeout=5)
    assert r.status_code == 404 and "error" in r.json()
    r = httpx.get(f"{server.url}/v1/completions", timeout=5)
    assert r.status_code == 405 and "error" in r.json()


def test_openai_client_raises_bad_request(server) -> None:
    c = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=10)
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model="tiny-llama", prompt=LONG_IDS, max_tokens=4)
    assert e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": "x"}],
                                  temperature=-1, stream=True)
    with pytest.raises(openai.NotFoundError):
        c.completions.create(model="nope", prompt="x", max_tokens=1)


def test_server_still_healthy_after_bad_input(server) -> None:
    assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200
    r = httpx.post(f"{server.url}/v1/completions", json=COMP, timeout=30)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
