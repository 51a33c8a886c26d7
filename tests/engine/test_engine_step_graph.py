"""The whole-step token graphs (engine/step_graph.py) on CPU without graphs: a step padded in
tokens and in sequences computes what the model's forward computes, writes the same KV (the
padding only touches the scratch page), and the runner drives them to transformers' greedy
tokens. The capture with FlashInfer's CUDA-graph prefill wrapper is checked on the GPU
(test_engine_gpu.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from twinserve.core.graph_plan import padded_token_count
from twinserve.engine.attention.flashinfer_backend import split_kv_workspace_bytes
from twinserve.engine.llm import LLM
from twinserve.engine.models.decoder import ForwardContext
from twinserve.engine.step_graph import StepGraphs, capture_inputs
from twinserve.engine.testing import (TINY_FAMILIES, cpu_model_and_pools, greedy_mismatches, padded_step_plan,
                                      random_prompts, sequence_step)
from twinserve.engine.token_graphs import TOKEN_GRAPHS

PAGE = 4


def test_pad_rows_appends_empty_rows_on_the_scratch_page():
    inputs, *_ = sequence_step([([5, 6, 7], 2, [3, 4]), ([8], 0, [9])], PAGE)
    p = inputs.pad_rows(5, scratch_page=63)
    assert p.batch_size == 5 and p.num_tokens == inputs.num_tokens and not p.decode_only
    assert p.qo_lens.tolist() == [3, 1, 0, 0, 0] and p.kv_lens.tolist() == [5, 1, 1, 1, 1]
    assert p.page_indptr.tolist() == [0, 2, 3, 4, 5, 6] and p.page_indices[-3:].tolist() == [63] * 3
    assert p.last_page_len.tolist()[2:] == [1, 1, 1]
    assert inputs.pad_rows(2, 63) is inputs
    with pytest.raises(ValueError):
        inputs.pad_rows(1, 63)


@pytest.mark.parametrize("tokens,rows", [(16, 16), (48, 8), (2048, 256), (5, 1)])
def test_capture_inputs_have_exactly_the_graph_size(tokens, rows):
    c = capture_inputs(tokens, rows, PAGE, scratch_page=7)
    assert c.num_tokens == tokens and c.batch_size == rows
    assert (c.kv_lens == c.qo_lens).all() and set(c.page_indices.tolist()) == {7}
    npg = np.diff(c.page_indptr)
    assert ((npg - 1) * PAGE + c.last_page_len == c.kv_lens).all() and (c.last_page_len >= 1).all()


def test_split_kv_workspace_follows_flashinfers_graph_plan():
    # qwen3-0.6b (16 q / 8 kv heads, dim 128), 2048 tokens over 256 rows, 132 SMs: the packed
    # rows (2048-256+1)*2 > 64 take 128-row tiles; 4096/128 + 255 = 287 tiles > 2*132/8 = 33
    assert split_kv_workspace_bytes(2048, 256, 16, 8, 128, 132) == 16 * 287 * 128 * 129 * 4 + (1 << 20)
    # 16 tokens over 16 rows (llama3-8b, 32/8 heads): one token a row, packed 4 -> 16-row tiles;
    # 64/16 + 15 = 19 tiles < 2*132/8 = 33, the split grid's floor
    assert split_kv_workspace_bytes(16, 16, 32, 8, 128, 132) == 32 * 33 * 16 * 129 * 4 + (1 << 20)
    # llama3-8b's largest plan is above the backend's ordinary 256 MiB workspace
    assert split_kv_workspace_bytes(2048, 256, 32, 8, 128, 132) > 256 * 2**20


@pytest.mark.parametrize("shape", TINY_FAMILIES)
def test_padded_step_equals_the_forward_and_keeps_the_kv(shape, tiny_model_dir):
    model, pools, (attn_ref, attn_g) = cpu_model_and_pools(tiny_model_dir(shape), PAGE)
    graphs = StepGraphs(model, attn_g, pools[1], max_tokens=64, max_rows=8, capture=False)
    # a long first step leaves its slots in the buffer; the second, shorter one (two rows,
    # padded to 8) must not write over them
    steps = padded_step_plan()
    with torch.inference_mode():
        for seqs in steps:
            inputs, ids, pos, slots = sequence_step(seqs, PAGE)
            attn_ref.plan(inputs)
            want = model(ids, ForwardContext(pos, slots, attn_ref))
            t = graphs.size_for(len(ids))
            assert t > len(ids)  # 30 -> 32, 18 -> 32: padding tokens are present
            graphs.plan(t, inputs)
            got = graphs.forward(t, ids, pos, slots)
            assert got.shape == want.shape
            assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (got - want).abs().max()
    # the same KV in every page a request owns; the padding wrote only the scratch page
    real = slice(0, pools[0].scratch_page)
    assert torch.allclose(pools[0].buffer[:, :, real], pools[1].buffer[:, :, real], atol=1e-5)
    assert (pools[1].buffer[:, :, pools[1].scratch_page] != 0).any()  # (NaN too: padding rows hold garbage)
    assert graphs.size_for(65) == 0 and graphs.rows[16] == 8 and graphs.rows[64] == 8


def test_the_runner_drives_step_graphs_to_transformers_tokens(tiny_model_dir, hf_model):
    d = tiny_model_dir("tiny-llama")
    llm = LLM(str(d), device="cpu", cpu_kv_tokens=4096, overlap=True,
              scheduler={"chunk_size": 16, "max_num_batched_tokens": 40, "max_running": 4})
    runner = llm.engine.runner
    runner.token_graphs = StepGraphs(runner.model, runner.attn, runner.pool, max_tokens=32, max_rows=4,
                                     capture=False)
    runner.use_graphs = True  # no decode graphs on CPU: every step of <= 32 tokens takes the graphs
    assert not greedy_mismatches(llm, hf_model(d), random_prompts([5, 17, 40, 63], seed=1), 12)
    padded = [r.extra["graph_tokens"] for r in llm.engine.steps]
    tokens = [r.features.new_tokens for r in llm.engine.steps]
    rows = [r.features.num_seqs for r in llm.engine.steps]
    assert any(p > 0 and s > 1 for p, s in zip(padded, rows))  # mixed steps of several rows
    assert all(p == padded_token_count(n, 32) for p, n in zip(padded, tokens))


def test_token_graph_modes_are_named_and_an_unknown_one_fails_early(tiny_model_dir):
    assert TOKEN_GRAPHS.names() == ["full", "hybrid", "piecewise"]
    with pytest.raises(KeyError, match="token graph mode 'whole'"):
        LLM(str(tiny_model_dir("tiny-llama")), device="cpu", cpu_kv_tokens=1024, token_graph_mode="whole")


@pytest.mark.parametrize("decode_heavy", [False, True])
def test_the_hybrid_mode_runs_small_steps_whole_and_large_ones_in_pieces(tiny_model_dir, hf_model, decode_heavy):
    from twinserve.core.graph_plan import decode_heavy_whole
    from twinserve.engine.piecewise_graph import PiecewiseGraphs
    from twinserve.engine.token_graphs import HybridGraphs

    d = tiny_model_dir("tiny-qwen3")
    llm = LLM(str(d), device="cpu", cpu_kv_tokens=4096, overlap=True,
              scheduler={"chunk_size": 16, "max_num_batched_tokens": 40, "max_running": 4})
    r = llm.engine.runner
    hy = HybridGraphs(StepGraphs(r.model, r.attn, r.pool, max_tokens=32, max_rows=4, capture=False),
                      PiecewiseGraphs(r.model, r.attn, max_tokens=32, capture=False), max_full_seqs=2,
                      max_rows=16, decode_heavy=decode_heavy)
    chosen = []
    for name, g in (("full", hy.full), ("pieces", hy.pieces)):
        plan = g.plan
        g.plan = lambda t, inputs, plan=plan, name=name: chosen.append(
            (name, inputs.batch_size, inputs.num_tokens, t)) or plan(t, inputs)
    r.token_graphs, r.use_graphs = hy, True
    assert not greedy_mismatches(llm, hf_model(d), random_prompts([5, 17, 40, 63], seed=4), 10)
    assert {n for n, *_ in chosen} == {"full", "pieces"}
    assert all((n == "full") == (rows <= 2 or decode_heavy_whole(rows, tokens, t, 16, decode_heavy))
               for n, rows, tokens, t in chosen)
    # steps of 3-4 decodes (padded to 16 tokens) are decode-heavy: whole only with the rule
    assert any(n == "full" and rows > 2 for n, rows, *_ in chosen) is decode_heavy


def test_the_hybrid_mode_sends_steps_above_its_full_cap_to_the_pieces(tiny_model_dir, hf_model, monkeypatch):
    """`core.graph_plan.HYBRID_FULL_MAX_TOKENS` (2,048; 16 here) caps the full graphs: a step of few
    sequences padded above it takes the pieces, and the full set holds only the sizes up to it."""
    import twinserve.core.graph_plan as graph_plan
    import twinserve.engine.token_graphs as token_graphs
    from twinserve.engine.piecewise_graph import PiecewiseGraphs
    from twinserve.engine.token_graphs import HybridGraphs

    d = tiny_model_dir("tiny-qwen3")
    llm = LLM(str(d), device="cpu", cpu_kv_tokens=4096, overlap=True,
              scheduler={"chunk_size": 16, "max_num_batched_tokens": 40, "max_running": 4})
    r = llm.engine.runner
    pieces = PiecewiseGraphs(r.model, r.attn, max_tokens=48, capture=False)
    monkeypatch.setattr(token_graphs, "HYBRID_FULL_MAX_TOKENS", 32)
    with pytest.raises(ValueError, match="full set captured"):  # the 32-token size would be missing
        HybridGraphs(StepGraphs(r.model, r.attn, r.pool, max_tokens=16, max_rows=4, capture=False), pieces)
    monkeypatch.setattr(graph_plan, "HYBRID_FULL_MAX_TOKENS", 16)
    monkeypatch.setattr(token_graphs, "HYBRID_FULL_MAX_TOKENS", 16)
    hy = HybridGraphs(StepGraphs(r.model, r.attn, r.pool, max_tokens=16, max_rows=4, capture=False), pieces,
                      max_full_seqs=4, max_rows=16, decode_heavy=False)
    assert hy.sizes == pieces.sizes and hy.max_tokens == 48 and hy.full.sizes == [16]
    chosen = []
    for name, g in (("full", hy.full), ("pieces", hy.pieces)):
        plan = g.plan
        g.plan = lambda t, inputs, plan=plan, name=name: chosen.append((name, t)) or plan(t, inputs)
    r.token_graphs, r.use_graphs = hy, True
    assert not greedy_mismatches(llm, hf_model(d), random_prompts([5, 17, 40, 63], seed=4), 10)
    assert {n for n, _ in chosen} == {"full", "pieces"}
    assert all((n == "full") == (t <= 16) for n, t in chosen)
