"""The piecewise-graph decomposition of the forward (engine/piecewise_graph.py), on CPU without
graphs: the pieces over their fixed buffers, padded, compute what the model's forward computes,
and the engine's runner drives them to transformers' greedy tokens. The graph capture itself is
checked on the GPU (test_engine_gpu.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from twinserve.core.graph_plan import padded_token_count
from twinserve.core.sampling import SamplingParams
from twinserve.engine.llm import LLM
from twinserve.engine.models.decoder import ForwardContext
from twinserve.engine.piecewise_graph import PiecewiseGraphs, piece_token_counts
from twinserve.engine.testing import (TINY_FAMILIES, cpu_model_and_pools, greedy_mismatches, padded_step_plan,
                                      plan_sequences, random_prompts)

PAGE = 4


def test_padded_token_counts_round_up_by_less_than_an_eighth_above_128():
    sizes = piece_token_counts(2048)
    assert sizes[:3] == [16, 32, 48] and sizes[-1] == 2048 and len(sizes) == 40
    for n in range(1, 2049):
        p = padded_token_count(n, 2048)
        assert p >= n and p in sizes
        assert p - n < max(16, n / 8)  # the step, next_pow2(n)/16, is below n/8
    assert padded_token_count(2049, 2048) == 0 and padded_token_count(0, 2048) == 0
    assert padded_token_count(7, 0) == 0
    assert piece_token_counts(100)[-1] == 112  # a size above the cap when the cap is no size
    # above 2,048 tokens the sizes are 128 apart (`core.graph_plan.PAD_STEP_MAX`): 48 more up to 8,192
    wide = piece_token_counts(8192)
    assert wide[:40] == sizes and len(wide) == 88 and set(np.diff(wide[39:])) == {128}
    assert padded_token_count(2049, 8192) == 2176 and padded_token_count(8192, 8192) == 8192
    assert all(0 <= padded_token_count(n, 8192) - n < 128 for n in range(2049, 8193))


@pytest.mark.parametrize("shape", TINY_FAMILIES)
def test_pieces_over_padded_buffers_equal_the_forward(shape, tiny_model_dir):
    model, pools, (attn_ref, attn_pw) = cpu_model_and_pools(tiny_model_dir(shape), PAGE)
    pieces = PiecewiseGraphs(model, attn_pw, max_tokens=64, capture=False)
    # a long first step leaves its rows in the buffers; the second, shorter one is padded over them
    steps = padded_step_plan()
    with torch.inference_mode():
        for seqs in steps:
            ids, pos, slots = plan_sequences(attn_ref, seqs, PAGE)
            want = model(ids, ForwardContext(pos, slots, attn_ref))
            plan_sequences(attn_pw, seqs, PAGE)
            t = pieces.size_for(len(ids))
            assert t > len(ids)  # 30 -> 32, 18 -> 32: padding rows are present
            got = pieces.forward(t, ids, pos, slots)
            assert got.shape == want.shape
            assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (got - want).abs().max()
    # both runs wrote the same KV for the real rows (nothing for the padding rows)
    assert torch.allclose(pools[0].buffer, pools[1].buffer, atol=1e-5)
    assert pieces.size_for(65) == 0


def test_the_runner_drives_the_pieces_to_transformers_tokens(tiny_model_dir, hf_model):
    d = tiny_model_dir("tiny-qwen3")
    llm = LLM(str(d), device="cpu", cpu_kv_tokens=4096, overlap=True,
              scheduler={"chunk_size": 16, "max_num_batched_tokens": 40})
    runner = llm.engine.runner
    runner.token_graphs = PiecewiseGraphs(runner.model, runner.attn, max_tokens=32, capture=False)
    runner.use_graphs = True  # no decode graphs on CPU: every step of <= 32 tokens takes the pieces
    assert not greedy_mismatches(llm, hf_model(d), random_prompts([5, 17, 40, 63], seed=1), 12)
    padded = [r.extra["graph_tokens"] for r in llm.engine.steps]
    tokens = [r.features.new_tokens for r in llm.engine.steps]
    assert any(p > 0 for p in padded) and any(p == 0 for p in padded)  # 40-token steps ran eagerly
    assert all(p == padded_token_count(n, 32) for p, n in zip(padded, tokens))


def test_switching_graphs_off_makes_the_features_say_eager(tiny_model_dir):
    llm = LLM(str(tiny_model_dir("tiny-llama")), device="cpu", cpu_kv_tokens=2048)
    eng = llm.engine
    eng.runner.token_graphs = PiecewiseGraphs(eng.runner.model, eng.runner.attn, max_tokens=64, capture=False)
    eng.plan = replace(eng.plan, piecewise_max_tokens=64)  # as an engine that captured them builds it
    params = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)
    eng.runner.use_graphs = True
    llm.generate(random_prompts([20], seed=2), params, use_tqdm=False)
    on = eng.steps[-2]  # the prefill (then one decode)
    eng.set_mode(cuda_graphs=False)
    llm.generate(random_prompts([20], seed=3), params, use_tqdm=False)
    off = eng.steps[-2]
    assert (on.features.padded_tokens, on.features.eager_step, on.extra["graph_tokens"]) == (32, 0, 32)
    assert (off.features.padded_tokens, off.features.eager_step, off.extra["graph_tokens"]) == (20, 1, 0)
    assert eng.plan.piecewise_max_tokens == 0
