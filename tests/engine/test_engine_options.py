"""Sampling options beyond temperature/top-k/top-p, checked against direct computations (CPU).

Penalties, logit_bias and min_tokens against a per-row torch computation on the same logits and
against a greedy loop over transformers' logits; logprobs against the model's log-softmax;
json_schema outputs parse and validate; 64-bit seeds; ``n`` outputs sharing the prompt's KV.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.engine.llm import LLM
from twinserve.engine.logits_processing import apply_min_p, apply_processors
from twinserve.engine.request_options import RequestOptions
from twinserve.engine.sampler import Sampler, SamplingBatch
from twinserve.engine.testing import random_prompts, reference_processed_row

EOS = 2
VOCAB = 64


def _req(rid: int, prompt: list[int], outputs: list[int], **kw) -> Req:
    r = Req(rid, prompt, SamplingParams(max_tokens=32, **kw))
    if outputs:
        r.append_tokens(np.asarray(outputs, np.int32), len(outputs))
    return r


def _reference_row(row: torch.Tensor, r: Req, pos: int) -> torch.Tensor:
    """The documented processing order, one token at a time."""
    return reference_processed_row(row, r.tokens[: r.prompt_len + pos].tolist(), r.prompt_len, pos, r.params,
                                   [EOS])


def test_processors_match_a_direct_computation() -> None:
    torch.manual_seed(0)
    reqs = [
        _req(0, [5, 6, 7], [9, 9, 10, 5], presence_penalty=0.7, frequency_penalty=0.3),
        _req(1, [3, 4], [], temperature=0.0),  # no option: the row is left alone
        _req(2, [8, 8, 11], [11, 12], repetition_penalty=1.8, logit_bias={3: 2.5, 40: -7.0}),
        _req(3, [1], [20, 21], min_tokens=4, stop_token_ids=(30,), frequency_penalty=-0.5,
             logit_bias={20: 1.0}),
        _req(4, [1], [20, 21, 22, 23], min_tokens=4),  # past min_tokens: no ban
    ]
    opts = RequestOptions(VOCAB, [EOS], "")
    for r in reqs:
        opts.add(r)
    pos = [r.num_output for r in reqs]
    ex = opts.build(reqs, pos)
    logits = torch.randn(len(reqs), VOCAB) * 3
    got = apply_processors(logits, ex)
    for j, r in enumerate(reqs):
        assert torch.equal(got[j], _reference_row(logits[j], r, pos[j])), j
    assert torch.isinf(got[3, EOS]) and torch.isinf(got[3, 30]) and torch.isfinite(got[4, EOS])


def test_plain_requests_build_no_extras() -> None:
    opts = RequestOptions(VOCAB, [EOS], "")
    r = _req(0, [5], [], temperature=0.5, top_k=3, seed=1)
    opts.add(r)
    assert not opts and opts.build([r], [0]) is None


def test_min_p_keeps_tokens_near_the_top() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.5, 0.3, 0.15, 0.05]]))
    out = apply_min_p(logits, np.array([0.5, 0.0], np.float32))
    assert torch.isfinite(out).tolist() == [[True, True, False, False], [True, True, True, True]]
    s = Sampler(torch.device("cpu"), seed=0)
    reqs = [_req(i, [1], [], min_p=0.7) for i in range(2000)]
    sb = SamplingBatch.from_params([r.params for r in reqs], [0] * len(reqs))
    opts = RequestOptions(4, [3], "")
    for r in reqs:
        opts.add(r)
    sb.extras = opts.build(reqs, [0] * len(reqs))
    drawn = s.sample(logits[:1].repeat(len(reqs), 1), sb)
    assert set(drawn.tolist()) == {0}  # 0.3 < 0.7 * 0.5: only the top token survives


def test_64_bit_seeds() -> None:
    logits = torch.zeros(1, 1000)
    s = Sampler(torch.device("cpu"))

    def draws(seed: int) -> list[int]:
        return [int(s.sample(logits, SamplingBatch.from_params([SamplingParams(seed=seed)], [c]))[0])
                for c in range(8)]

    assert draws(1) != draws(2**31 + 1) != draws(2**32 + 1)
    assert draws(-1) == draws(2**64 - 1)  # the same 64 bits
    assert draws(2**63 + 5) == draws(2**63 + 5)
    with pytest.raises(ValueError, match="64 bits"):
        SamplingParams(seed=2**64).validate()


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return tiny_model_dir("tiny-llama")


@pytest.fixture(scope="module")
def llm(model):
    with LLM(str(model), device="cpu", cpu_kv_tokens=4096) as m:
        yield m


def _hf_greedy_processed(hf, prompt: list[int], n: int, params: SamplingParams) -> list[int]:
    """Greedy decoding over transformers' logits with the processors applied in plain torch."""
    out: list[int] = []
    for pos in range(n):
        with torch.no_grad():
            logits = hf(torch.tensor([prompt + out])).logits[0, -1].float()
        r = _req(0, prompt, out, **{k: getattr(params, k) for k in (
            "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "min_tokens")})
        out.append(int(_reference_row(logits, r, pos).argmax()))
    return out


@pytest.mark.parametrize("overlap", [False, True])
def test_penalties_end_to_end_match_transformers(model, hf_model, overlap: bool) -> None:
    hf = hf_model(model)
    prompts = random_prompts([12, 7, 20], seed=3)
    params = [SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True, frequency_penalty=-2.0,
                             presence_penalty=-1.0),
              SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True, repetition_penalty=2.0,
                             logit_bias={100: 3.0, 101: -50.0}),
              SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)]
    with LLM(str(model), device="cpu", cpu_kv_tokens=4096, overlap=overlap) as llm:
        outs = llm.generate(prompts, params, use_tqdm=False)
    for o, p, sp in zip(outs, prompts, params):
        assert o.token_ids == _hf_greedy_processed(hf, p, 10, sp)
    assert outs[0].token_ids != _hf_greedy_processed(hf, prompts[0], 10, params[2])  # the penalty mattered


def test_logprobs_are_the_models_log_softmax(llm, model, hf_model) -> None:
    hf = hf_model(model)
    prompt = random_prompts([9], seed=5)[0]
    o = llm.generate([prompt], SamplingParams(temperature=0.8, seed=11, max_tokens=6, ignore_eos=True,
                                              logprobs=4, frequency_penalty=0.5), use_tqdm=False)[0]
    assert len(o.logprobs) == len(o.token_ids) == 6
    with torch.no_grad():
        lsm = torch.log_softmax(hf(torch.tensor([prompt + o.token_ids])).logits[0].float(), -1)
    for i, (tok, (lp, top)) in enumerate(zip(o.token_ids, o.logprobs)):
        ref = lsm[len(prompt) - 1 + i]
        assert lp == pytest.approx(float(ref[tok]), abs=1e-4)
        ids = [t for t, _ in top]
        assert len(top) == 4 and ids == ref.topk(4).indices.tolist()
        assert [v for _, v in top] == pytest.approx(ref.topk(4).values.tolist(), abs=1e-4)
    plain = llm.generate([prompt], SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)[0]
    assert plain.logprobs is None


def test_min_tokens_masks_eos_and_stop_tokens(llm) -> None:
    prompt = random_prompts([8], seed=1)[0]
    eager = SamplingParams(temperature=0.0, max_tokens=12, logit_bias={EOS: 100.0})
    assert llm.generate([prompt], eager, use_tqdm=False)[0].token_ids == [EOS]
    held = SamplingParams(temperature=0.0, max_tokens=12, logit_bias={EOS: 100.0}, min_tokens=5)
    o = llm.generate([prompt], held, use_tqdm=False)[0]
    assert len(o.token_ids) == 6 and o.token_ids[-1] == EOS and EOS not in o.token_ids[:5]
    assert o.finish_reason == "stop"


SCHEMA = {"type": "object", "additionalProperties": False, "required": ["id", "tag", "ok"],
          "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999},
                         "tag": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"}}}


def test_json_schema_outputs_parse_and_validate(llm) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    prompts = random_prompts([6, 10, 14, 8], seed=2)
    sp = SamplingParams(temperature=1.0, seed=4, max_tokens=48, json_schema=json.dumps(SCHEMA))
    outs = llm.generate(prompts, sp, use_tqdm=False)
    for o in outs:
        assert o.finish_reason == "stop", o
        value = json.loads(llm.tokenizer.decode(o.token_ids, skip_special_tokens=True))
        jsonschema.validate(value, SCHEMA)
    free = llm.generate(prompts, SamplingParams(temperature=1.0, seed=4, max_tokens=48), use_tqdm=False)
    texts = [llm.tokenizer.decode(o.token_ids, skip_special_tokens=True) for o in free]
    assert not any(t.startswith("{") for t in texts), texts  # the model alone writes no JSON


def test_bad_options_are_refused(llm) -> None:
    eng = llm.engine
    cases = [(SamplingParams(logit_bias={10**6: 1.0}), "outside the vocabulary"),
             (SamplingParams(json_schema='{"type": "nonsense"}'), "JSON schema"),
             (SamplingParams(json_schema="{not json"), "JSON schema"),
             (SamplingParams(json_schema='{"type": "object"}', ignore_eos=True), "ignore_eos"),
             (SamplingParams(json_schema='{"type": "object"}', min_tokens=2), "min_tokens"),
             (SamplingParams(n=2), "n=1"),
             (SamplingParams(min_tokens=20, max_tokens=4), "min_tokens"),
             (SamplingParams(presence_penalty=3.0), "presence_penalty")]
    for i, (sp, msg) in enumerate(cases):
        with pytest.raises(ValueError, match=msg):
            eng.add(Req(10_000 + i, [1, 2, 3], sp))
    assert not eng.has_work() and not eng.options


def test_n_outputs_share_the_prompt_through_the_prefix_cache(llm) -> None:
    llm.engine.flush_cache()
    prompt = random_prompts([40], seed=9)[0]
    sp = SamplingParams(temperature=1.0, seed=123, max_tokens=8, ignore_eos=True, n=3)
    outs = llm.generate([prompt, prompt[:20]], [sp, SamplingParams(max_tokens=2, ignore_eos=True)],
                        use_tqdm=False)
    assert [o.index for o in outs] == [0, 1, 2, 0]
    first, *rest = outs[:3]
    assert len({tuple(o.token_ids) for o in outs[:3]}) == 3
    assert all(o.cached_tokens >= 32 for o in rest)  # two full pages of 16 from the first output
    again = llm.generate([prompt], sp, use_tqdm=False)
    assert [o.token_ids for o in again] == [o.token_ids for o in outs[:3]]


def test_prompt_logprobs_are_the_models_log_softmax(model, hf_model) -> None:
    hf = hf_model(model)
    prompt = random_prompts([45], seed=8)[0]
    with torch.no_grad():
        lsm = torch.log_softmax(hf(torch.tensor([prompt])).logits[0].float(), -1)
    # chunks of 16 split the prompt over three steps; the same prompt cached first must not be skipped
    with LLM(str(model), device="cpu", cpu_kv_tokens=4096, scheduler={"chunk_size": 16}) as llm:
        llm.generate([prompt], SamplingParams(max_tokens=1), use_tqdm=False)
        o = llm.generate([prompt], SamplingParams(max_tokens=2, ignore_eos=True, prompt_logprobs=2),
                         use_tqdm=False)[0]
    assert o.cached_tokens == 0 and len(o.prompt_logprobs) == len(prompt) - 1
    for p, (lp, top) in enumerate(o.prompt_logprobs, start=1):
        ref = lsm[p - 1]
        assert lp == pytest.approx(float(ref[prompt[p]]), abs=1e-4), p
        assert [t for t, _ in top] == ref.topk(2).indices.tolist()


def test_plain_requests_never_build_extras(llm, monkeypatch) -> None:
    def fail(*a, **k):
        raise AssertionError("a step of plain requests built SamplingExtras")

    monkeypatch.setattr(llm.engine.options, "build", fail)
    monkeypatch.setattr(llm.engine.options, "prompt_spec", fail)
    outs = llm.generate(random_prompts([5, 9], seed=4), SamplingParams(temperature=0.7, seed=1, top_k=5, max_tokens=4,
                                                                      ignore_eos=True), use_tqdm=False)
    assert [len(o.token_ids) for o in outs] == [4, 4] and not llm.engine.options.live
