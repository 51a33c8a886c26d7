"""The OpenAI request fields over HTTP, streamed and not, checked against the offline `LLM`
(itself checked against direct computations in tests/engine/test_engine_options.py)."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

MAX_MODEL_LEN = 384  # the shared server's context (conftest.MAX_MODEL_LEN)
PROMPT = [1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58]
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["n", "c"],
          "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 50},
                         "c": {"enum": ["yes", "no"]}}}


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def offline(tiny_model: str):
    from twinserve.engine.llm import LLM

    with LLM(tiny_model, device="cpu", max_model_len=MAX_MODEL_LEN, cpu_kv_tokens=4096) as llm:
        yield llm


def _sp(**kw):
    from twinserve.core.sampling import SamplingParams

    return SamplingParams(**kw)


def test_completion_logprobs_match_the_offline_engine(client: openai.OpenAI, offline) -> None:
    r = client.completions.create(model="tiny-llama", prompt=PROMPT, max_tokens=6, temperature=0.7, seed=5,
                                  logprobs=3, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    ref = offline.generate([PROMPT], _sp(temperature=0.7, seed=5, max_tokens=6, ignore_eos=True, logprobs=3),
                           use_tqdm=False)[0]
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
    assert lp.token_logprobs == pytest.approx([e[0] for e in ref.logprobs], abs=1e-4)
    for top, (_, ref_top) in zip(lp.top_logprobs, ref.logprobs):
        # a dict by token text: alternatives that decode alike (byte pieces) share one key
        assert max(top.values()) == pytest.approx(ref_top[0][1], abs=1e-4)
        assert all(any(abs(v - w) < 1e-4 for _, w in ref_top) for v in top.values())
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0
    chunks = list(client.completions.create(model="tiny-llama", prompt=PROMPT, max_tokens=6, temperature=0.7,
                                            seed=5, logprobs=3, stream=True, extra_body={"ignore_eos": True}))
    streamed = [x for c in chunks if c.choices and c.choices[0].logprobs
                for x in c.choices[0].logprobs.token_logprobs]
    assert streamed == pytest.approx(lp.token_logprobs, abs=1e-6)


def test_chat_logprobs_and_top_logprobs(client: openai.OpenAI) -> None:
    msgs = [{"role": "user", "content": "hi"}]
    r = client.chat.completions.create(model="tiny-llama", messages=msgs, max_tokens=5, temperature=0,
                                       logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == 5
    for e in content:
        assert len(e.top_logprobs) == 2 and e.logprob <= 0
        assert e.logprob == pytest.approx(e.top_logprobs[0].logprob, abs=1e-6)  # greedy: the top token
        assert e.token == e.top_logprobs[0].token and e.bytes == list(e.token.encode())
    plain = client.chat.completions.create(model="tiny-llama", messages=msgs, max_tokens=2)
    assert plain.choices[0].logprobs is None
    stream = client.chat.completions.create(model="tiny-llama", messages=msgs, max_tokens=5, temperature=0,
                                            logprobs=True, stream=True, extra_body={"ignore_eos": True})
    got = [e.logprob for c in stream if c.choices and c.choices[0].logprobs
           for e in c.choices[0].logprobs.content]
    assert got == pytest.approx([e.logprob for e in content], abs=1e-6)


def test_n_choices_both_endpoints_and_streaming(client: openai.OpenAI) -> None:
    kw = dict(model="tiny-llama", max_tokens=6, temperature=1.0, seed=77, extra_body={"ignore_eos": True})
    r = client.completions.create(prompt=PROMPT * 2, n=3, **kw)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert len({c.text for c in r.choices}) == 3
    assert r.usage.completion_tokens == 18 and r.usage.prompt_tokens == 2 * len(PROMPT)
    assert r.usage.prompt_tokens_details.cached_tokens >= 32  # the others read the first's prompt pages
    one = client.completions.create(prompt=PROMPT * 2, **kw)
    assert one.choices[0].text == r.choices[0].text  # output 0 keeps the request's seed
    msgs = [{"role": "user", "content": "tell me"}]
    full = client.chat.completions.create(messages=msgs, n=2, **kw)
    parts: dict[int, str] = {0: "", 1: ""}
    reasons = {}
    for c in client.chat.completions.create(messages=msgs, n=2, stream=True, **kw):
        for ch in c.choices:
            parts[ch.index] += ch.delta.content or ""
            if ch.finish_reason:
                reasons[ch.index] = ch.finish_reason
    assert [parts[0], parts[1]] == [c.message.content for c in full.choices]
    assert reasons == {0: "length", 1: "length"}


def test_response_format_json_schema_and_json_object(client: openai.OpenAI) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    msgs = [{"role": "user", "content": "json please"}]
    rf = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True}}
    for seed in (1, 2):
        r = client.chat.completions.create(model="tiny-llama", messages=msgs, max_tokens=40, temperature=1.0,
                                           seed=seed, response_format=rf)
        assert r.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)
    text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="tiny-llama", messages=msgs, max_tokens=40, temperature=1.0, seed=1, response_format=rf,
        stream=True) if c.choices)
    jsonschema.validate(json.loads(text), SCHEMA)
    r = client.completions.create(model="tiny-llama", prompt="obj", max_tokens=60, temperature=0.5, seed=3,
                                  extra_body={"response_format": {"type": "json_object"},
                                              "logit_bias": {"97": 8}})  # "}" (id 97) ends it early
    assert r.choices[0].finish_reason == "stop", r.choices[0].text
    assert isinstance(json.loads(r.choices[0].text), dict)


def test_penalties_bias_and_min_tokens_match_the_offline_engine(server, offline) -> None:
    body = {"prompt": PROMPT, "max_tokens": 10, "temperature": 0, "frequency_penalty": -2.0,
            "presence_penalty": 0.5, "repetition_penalty": 1.3, "logit_bias": {"60": 4.0, "61": -100},
            "min_tokens": 3, "min_p": 0.1}
    r = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).json()
    eos = offline.engine.eos_token_ids
    ref = offline.generate([PROMPT], _sp(temperature=0.0, max_tokens=10, frequency_penalty=-2.0,
                                         presence_penalty=0.5, repetition_penalty=1.3,
                                         logit_bias={60: 4.0, 61: -100.0}, min_tokens=3, min_p=0.1),
                           use_tqdm=False)[0]
    gen = httpx.post(f"{server.url}/generate", json={"input_ids": PROMPT, **{k: v for k, v in body.items()
                                                                           if k != "prompt"}},
                     timeout=60).json()
    assert gen["output_ids"] == ref.token_ids
    assert r["usage"]["completion_tokens"] == len(ref.token_ids) - (ref.token_ids[-1] in eos)
    plain = httpx.post(f"{server.url}/generate", json={"input_ids": PROMPT, "max_tokens": 10, "temperature": 0},
                       timeout=60).json()
    assert plain["output_ids"] != gen["output_ids"]


def test_64_bit_seeds(server) -> None:
    def out(seed: int) -> list[int]:
        body = {"input_ids": PROMPT, "max_tokens": 8, "temperature": 1.0, "seed": seed, "ignore_eos": True}
        return httpx.post(f"{server.url}/generate", json=body, timeout=60).json()["output_ids"]

    assert out(1) != out(2**31 + 1)
    assert out(2**64 - 1) == out(-1)


def test_model_by_id(client: openai.OpenAI) -> None:
    m = client.models.retrieve("tiny-llama")
    assert m.id == "tiny-llama" and m.object == "model"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-17")


def test_schema_advertises_the_limits(server) -> None:
    comps = httpx.get(f"{server.url}/openapi.json", timeout=5).json()["components"]["schemas"]
    for name in ("CompletionRequest", "ChatCompletionRequest"):
        assert comps[name]["properties"]["n"]["maximum"] == 16, name
    assert comps["GenerateRequestBody"]["properties"]["n"]["maximum"] == 1
    chat = comps["ChatCompletionRequest"]["properties"]
    assert chat["tools"]["maxItems"] == 0 and chat["top_logprobs"]["anyOf"][0]["maximum"] == 20
    assert comps["CompletionRequest"]["additionalProperties"] is False


def test_echo_with_prompt_logprobs(client: openai.OpenAI, offline) -> None:
    prompt = "The quick brown fox"
    r = client.completions.create(model="tiny-llama", prompt=prompt, max_tokens=1, temperature=0, echo=True,
                                  logprobs=1, extra_body={"ignore_eos": True})
    c = r.choices[0]
    assert c.text.startswith(prompt)  # the one output token may be a partial UTF-8 piece (no text yet)
    ids = offline.tokenizer(prompt)["input_ids"]
    ref = offline.generate([ids], _sp(temperature=0.0, max_tokens=1, ignore_eos=True, prompt_logprobs=1,
                                      logprobs=1), use_tqdm=False)[0]
    lp = c.logprobs
    assert len(lp.tokens) == len(ids) + 1 and lp.token_logprobs[0] is None
    assert lp.token_logprobs[1:] == pytest.approx([e[0] for e in ref.prompt_logprobs + ref.logprobs], abs=1e-4)
    plain = client.completions.create(model="tiny-llama", prompt=prompt, max_tokens=2, echo=True)
    assert plain.choices[0].text.startswith(prompt) and plain.choices[0].logprobs is None
    chunks = list(client.completions.create(model="tiny-llama", prompt=prompt, max_tokens=1, temperature=0,
                                            echo=True, logprobs=1, stream=True, extra_body={"ignore_eos": True}))
    assert "".join(ch.choices[0].text for ch in chunks) == c.text
    streamed = [x for ch in chunks if ch.choices[0].logprobs for x in ch.choices[0].logprobs.token_logprobs]
    assert streamed[0] is None and streamed[1:] == pytest.approx(lp.token_logprobs[1:], abs=1e-6)


def test_openai_structured_outputs_parse(client: openai.OpenAI) -> None:
    from typing import Literal

    from pydantic import BaseModel

    class Verdict(BaseModel):
        answer: Literal["yes", "no", "maybe"]
        sure: bool

    parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
    r = parse(model="tiny-llama", messages=[{"role": "user", "content": "decide"}], response_format=Verdict,
              max_tokens=40, temperature=1.0, seed=4)
    v = r.choices[0].message.parsed
    assert isinstance(v, Verdict) and v.answer in ("yes", "no", "maybe")
