"""The sampling options on CUDA in bf16 with FlashInfer, CUDA graphs (decode and token graphs)
and overlap scheduling (tests/engine/test_engine_options.py holds the CPU references).

- the processors on CUDA logits against the per-row reference of the CPU test;
- penalties and grammars need each step's tokens before the next launch: outputs with overlap
  on equal those with overlap off, token for token;
- logprobs and prompt logprobs against transformers' float32 log-softmax within bf16 error
  (GAP, as in test_engine_gpu.py); json_schema outputs validate; ``n`` outputs hit the cache.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="needs flashinfer"),
]

from twinserve.core.sampling import SamplingParams  # noqa: E402
from twinserve.engine.llm import LLM  # noqa: E402
from twinserve.engine.testing import GPU_SHAPES, random_prompts  # noqa: E402

SHAPE = GPU_SHAPES["llama"]
GAP = 0.5
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["id", "ok"],
          "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999}, "ok": {"type": "boolean"}}}


def _llm(d, overlap: bool) -> LLM:
    return LLM(str(d), device="cuda", dtype="bfloat16", num_pages=512, overlap=overlap, max_graph_bs=16,
               piecewise_max_tokens=256)


def test_gpu_processors_match_the_reference() -> None:
    from twinserve.core.request import Req
    from twinserve.engine.logits_processing import apply_processors
    from twinserve.engine.request_options import RequestOptions
    from twinserve.engine.testing import reference_processed_row

    torch.manual_seed(0)
    kw = [dict(presence_penalty=0.7, frequency_penalty=0.3), dict(repetition_penalty=1.8, logit_bias={3: 2.5}),
          dict(min_tokens=9, stop_token_ids=(30,), frequency_penalty=-0.5), dict()]
    reqs = []
    for i, k in enumerate(kw):
        r = Req(i, random_prompts([20], vocab=200, seed=i)[0], SamplingParams(max_tokens=32, **k))
        r.append_tokens(torch.randint(3, 200, (6,)).numpy().astype("int32"), 6)
        reqs.append(r)
    opts = RequestOptions(1024, [2], "")
    for r in reqs:
        opts.add(r)
    logits = torch.randn(len(reqs), 1024, device="cuda") * 3
    got = apply_processors(logits, opts.build(reqs, [6] * len(reqs)))
    for j, r in enumerate(reqs):
        want = reference_processed_row(logits[j], r.tokens[: r.prompt_len + 6].tolist(), r.prompt_len, 6,
                                       r.params, [2])
        assert torch.allclose(got[j], want, atol=1e-5), j


def _params() -> list[SamplingParams]:
    return [SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True, frequency_penalty=-2.0,
                           presence_penalty=-1.0),
            SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True, repetition_penalty=2.0,
                           logit_bias={100: 3.0}),
            SamplingParams(temperature=1.0, seed=2**40 + 3, max_tokens=24, ignore_eos=True, min_p=0.05,
                           presence_penalty=0.5),
            SamplingParams(temperature=1.0, seed=9, max_tokens=40, json_schema=json.dumps(SCHEMA)),
            SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)]


def test_gpu_overlap_gives_the_same_tokens(tiny_model_dir) -> None:
    d = tiny_model_dir(SHAPE)
    prompts = random_prompts([40, 9, 300, 17, 64], seed=4)
    got = {}
    for overlap in (False, True):
        with _llm(d, overlap) as llm:
            got[overlap] = [o.token_ids for o in llm.generate(prompts, _params(), use_tqdm=False)]
    assert got[True] == got[False]


def test_gpu_logprobs_json_and_n(tiny_model_dir, hf_model) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    d = tiny_model_dir(SHAPE)
    hf = hf_model(d, torch.float32, "cuda")
    prompt = random_prompts([70], seed=6)[0]
    with _llm(d, True) as llm:
        o = llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True, logprobs=3,
                                                  prompt_logprobs=1), use_tqdm=False)[0]
        with torch.no_grad():
            lsm = torch.log_softmax(hf(torch.tensor([prompt + o.token_ids], device="cuda")).logits[0].float(), -1)
        out_err = max(abs(lp - float(lsm[len(prompt) - 1 + i, t]))
                      for i, (t, (lp, _)) in enumerate(zip(o.token_ids, o.logprobs)))
        prompt_err = max(abs(lp - float(lsm[p - 1, prompt[p]])) for p, (lp, _) in enumerate(o.prompt_logprobs, 1))
        print(f"logprobs: max |ours_bf16 - hf_fp32| output {out_err:.4f}, prompt {prompt_err:.4f}")
        assert out_err <= GAP and prompt_err <= GAP
        outs = llm.generate(random_prompts([30, 50], seed=7), _params()[3], use_tqdm=False)
        for x in outs:
            jsonschema.validate(json.loads(llm.tokenizer.decode(x.token_ids, skip_special_tokens=True)), SCHEMA)
        while llm.engine.has_work():  # overlap leaves the last launched step in flight
            llm.engine.step()
        llm.engine.flush_cache()
        many = llm.generate([prompt], SamplingParams(temperature=1.0, seed=5, max_tokens=8, ignore_eos=True, n=4),
                            use_tqdm=False)
        assert [x.index for x in many] == [0, 1, 2, 3] and all(x.cached_tokens >= 64 for x in many[1:])
