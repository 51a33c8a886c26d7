"""The piecewise-graph decomposition of the forward (engine/piecewise_graph.py), on CPU without
graphs: the pieces over their fixed buffers, padded, compute what the model's forward computes,
and the engine's runner drives them to transformers' greedy tokens. The graph capture itself is
checked on the GPU (test_engine_gpu.py)."""

from __future__ import annotations

import pytest
import torch

from twinserve.core.batch import padded_token_count
from twinserve.core.sampling import SamplingParams
from twinserve.engine.attention.base import AttentionSpec
from twinserve.engine.attention.torch_backend import TorchAttention
from twinserve.engine.kv_pool import KVGeometry, KVPool
from twinserve.engine.layers.kernels import TorchKernels
from twinserve.engine.llm import LLM
from twinserve.engine.loader import load_weights
from twinserve.engine.model_config import ModelConfig
from twinserve.engine.models import build_model
from twinserve.engine.models.decoder import ForwardContext
from twinserve.engine.piecewise_graph import PiecewiseGraphs, piece_token_counts
from twinserve.engine.testing import TINY_FAMILIES, hf_greedy, plan_sequences, random_prompts

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


def _setup(d):
    mc = ModelConfig.from_dir(d)
    model = build_model(mc, TorchKernels(), torch.float32, torch.device("cpu"))
    load_weights(model, d)
    pools = [KVPool(KVGeometry(mc.num_layers, 64, PAGE, mc.num_kv_heads, mc.head_dim, torch.float32), "cpu")
             for _ in range(2)]
    attns = [TorchAttention(AttentionSpec(mc.num_heads, mc.num_kv_heads, mc.head_dim, torch.float32, p, 8, 64))
             for p in pools]
    return model, pools, attns


@pytest.mark.parametrize("shape", TINY_FAMILIES)
def test_pieces_over_padded_buffers_equal_the_forward(shape, tiny_model_dir):
    model, pools, (attn_ref, attn_pw) = _setup(tiny_model_dir(shape))
    pieces = PiecewiseGraphs(model, attn_pw, max_tokens=64, capture=False)
    a, b = random_prompts([37, 11], seed=3)
    pages_a = [5, 2, 9, 7, 30, 31, 12, 13, 14, 15]
    pages_b = [40, 41, 42]
    # a long first step leaves its rows in the buffers; the second, shorter one is padded over them
    steps = [[(a[:30], 0, pages_a)], [(a[30:], 30, pages_a), (b, 0, pages_b)]]
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
    runner.pieces = PiecewiseGraphs(runner.model, runner.attn, max_tokens=32, capture=False)
    runner.use_graphs = True  # no decode graphs on CPU: every step of <= 32 tokens takes the pieces
    prompts = random_prompts([5, 17, 40, 63], seed=1)
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    outs = llm.generate(prompts, params, use_tqdm=False)
    for p, o in zip(prompts, outs):
        assert o.token_ids == hf_greedy(hf_model(d), p, 12)
    padded = [r.extra["graph_tokens"] for r in llm.engine.steps]
    tokens = [r.features.new_tokens for r in llm.engine.steps]
    assert any(p > 0 for p in padded) and any(p == 0 for p in padded)  # 40-token steps ran eagerly
    assert all(p == padded_token_count(n, 32) for p, n in zip(padded, tokens))


def test_switching_graphs_off_makes_the_features_say_eager(tiny_model_dir):
    llm = LLM(str(tiny_model_dir("tiny-llama")), device="cpu", cpu_kv_tokens=2048)
    eng = llm.engine
    eng.runner.pieces = PiecewiseGraphs(eng.runner.model, eng.runner.attn, max_tokens=64, capture=False)
    eng.scheduler.config.piecewise_max_tokens = 64  # as an engine that captured them sets it
    params = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)
    eng.runner.use_graphs = True
    llm.generate(random_prompts([20], seed=2), params, use_tqdm=False)
    on = eng.steps[-2]  # the prefill (then one decode)
    eng.set_mode(cuda_graphs=False)
    llm.generate(random_prompts([20], seed=3), params, use_tqdm=False)
    off = eng.steps[-2]
    assert (on.features.padded_tokens, on.features.eager_step, on.extra["graph_tokens"]) == (32, 0, 32)
    assert (off.features.padded_tokens, off.features.eager_step, off.extra["graph_tokens"]) == (20, 1, 0)
    assert eng.scheduler.config.piecewise_max_tokens == 0
