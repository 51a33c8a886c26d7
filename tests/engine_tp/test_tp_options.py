"""The sampling options at TP=2 on CPU (gloo) against TP=1: the follower applies the same
processors and grammar masks from the step inputs, and computes the same prompt-position
logits, so tokens are identical and logprobs agree within the all-reduce's rounding."""

from __future__ import annotations

import json

import pytest

from twinserve.core.sampling import SamplingParams
from twinserve.engine.llm import LLM
from twinserve.engine.testing import random_prompts

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["k"],
          "properties": {"k": {"type": "integer", "minimum": 0, "maximum": 99}}}
PARAMS = [SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True, frequency_penalty=-2.0, logprobs=2),
          SamplingParams(temperature=0.9, seed=2**40 + 1, max_tokens=10, ignore_eos=True, min_p=0.05,
                         repetition_penalty=1.5, logit_bias={7: 5.0}),
          SamplingParams(temperature=1.0, seed=3, max_tokens=20, json_schema=json.dumps(SCHEMA)),
          SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, prompt_logprobs=1, min_tokens=2)]


def _run(d, tp: int):
    with LLM(str(d), device="cpu", cpu_kv_tokens=4096, tp_size=tp, overlap=True,
             scheduler={"chunk_size": 16}) as llm:
        return llm.generate(random_prompts([12, 30, 9, 40], vocab=1024, seed=5), PARAMS, use_tqdm=False)


def test_tp2_options_equal_tp1(tiny_dir) -> None:
    d = tiny_dir("tiny-llama")
    one, two = _run(d, 1), _run(d, 2)
    assert [o.token_ids for o in two] == [o.token_ids for o in one]
    assert [e[0] for e in two[0].logprobs] == pytest.approx([e[0] for e in one[0].logprobs], abs=1e-4)
    assert [e[0] for e in two[3].prompt_logprobs] == pytest.approx([e[0] for e in one[3].prompt_logprobs],
                                                                  abs=1e-4)
    assert len(one[3].prompt_logprobs) == 39 and one[2].finish_reason == "stop"
