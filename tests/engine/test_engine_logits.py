"""Prefill logits of every family match transformers on the same weights (float32, CPU).

Tolerance: max |Δlogit| <= 1e-4 (logits have std ~0.3; float32 with different op order).
The sequence is run in two chunks (the second attends to the first through the paged pool) and
together with a second sequence in the same batch, so paging, offsets and batching are covered.
"""

from __future__ import annotations

import pytest
import torch

from twinserve.engine.attention.base import AttentionSpec
from twinserve.engine.attention.torch_backend import TorchAttention
from twinserve.engine.kv_pool import KVGeometry, KVPool
from twinserve.engine.layers.kernels import TorchKernels
from twinserve.engine.loader import load_weights
from twinserve.engine.model_config import ModelConfig
from twinserve.engine.models import build_model
from twinserve.engine.models.decoder import ForwardContext
from twinserve.engine.testing import TINY_FAMILIES as FAMILIES, plan_sequences, random_prompts

ATOL = 1e-4
PAGE = 4


def _run_step(model, attn, seqs):
    """seqs: list of (token ids [n], start, pages) → logits of every new token, concatenated."""
    ids, pos, slots = plan_sequences(attn, seqs, PAGE)
    return model.compute_logits(model(ids, ForwardContext(pos, slots, attn)))


@pytest.mark.parametrize("shape", FAMILIES)
def test_prefill_logits_match_transformers(shape, tiny_model_dir, hf_model):
    d = tiny_model_dir(shape)
    mc = ModelConfig.from_dir(d)
    model = build_model(mc, TorchKernels(), torch.float32, torch.device("cpu"))
    load_weights(model, d)
    pool = KVPool(KVGeometry(mc.num_layers, 64, PAGE, mc.num_kv_heads, mc.head_dim, torch.float32), "cpu")
    attn = TorchAttention(AttentionSpec(mc.num_heads, mc.num_kv_heads, mc.head_dim, torch.float32, pool, 64))
    a, b = random_prompts([37, 11], seed=hash(shape) % 1000)
    pages_a = [5, 2, 9, 7, 30, 31, 12, 13, 14, 15]  # deliberately out of order
    pages_b = [40, 41, 42]
    with torch.inference_mode():
        first = _run_step(model, attn, [(a[:20], 0, pages_a)])
        both = _run_step(model, attn, [(a[20:], 20, pages_a), (b, 0, pages_b)])
        ours_a = torch.cat([first, both[:17]])
        ours_b = both[17:]
        hf = hf_model(d)
        ref_a = hf(torch.tensor([a])).logits[0]
        ref_b = hf(torch.tensor([b])).logits[0]
    assert ours_a.shape == ref_a.shape
    err = max((ours_a - ref_a).abs().max().item(), (ours_b - ref_b).abs().max().item())
    assert err <= ATOL, f"{shape}: max |Δlogit| = {err:.2e}"
    assert ref_a.std().item() > 0.05  # the comparison is not between two near-zero tensors


def test_auto_kernels_pick_the_triton_qk_kernel_only_beside_flashinfer_with_triton_on():
    from twinserve.engine.layers.kernels import KERNELS, auto_kernels

    assert auto_kernels("flashinfer", triton=True) == "flashinfer_triton"
    assert auto_kernels("flashinfer", triton=False) == "flashinfer"
    assert auto_kernels("torch", triton=True) == "torch"
    assert {"torch", "flashinfer", "flashinfer_triton"} <= set(KERNELS.names())


class _StoringKernels(TorchKernels):
    """The torch kernels, declared to store k and v in their RoPE call (as the Triton one does)."""

    stores_kv = True


class _NoStoreAttention(TorchAttention):
    """Fails if the layers still hand it the store."""

    def forward(self, layer, q, k, v, slots, out=None):
        assert slots is None
        return super().forward(layer, q, k, v, slots, out)


@pytest.mark.parametrize("shape", FAMILIES)
def test_kernels_that_store_kv_in_rope_give_the_backend_store_s_logits_and_pool(shape, tiny_model_dir):
    d = tiny_model_dir(shape)
    mc = ModelConfig.from_dir(d)
    a, b = random_prompts([37, 11], seed=7)
    results = []
    for kernels, backend in ((TorchKernels(), TorchAttention), (_StoringKernels(), _NoStoreAttention)):
        model = build_model(mc, kernels, torch.float32, torch.device("cpu"))
        load_weights(model, d)
        pool = KVPool(KVGeometry(mc.num_layers, 64, PAGE, mc.num_kv_heads, mc.head_dim, torch.float32), "cpu")
        attn = backend(AttentionSpec(mc.num_heads, mc.num_kv_heads, mc.head_dim, torch.float32, pool, 64))
        with torch.inference_mode():
            first = _run_step(model, attn, [(a[:20], 0, [5, 2, 9, 7, 30, 31, 12, 13, 14, 15])])
            both = _run_step(model, attn, [(a[20:], 20, [5, 2, 9, 7, 30, 31, 12, 13, 14, 15]), (b, 0, [40, 41, 42])])
        results.append((torch.cat([first, both]), pool.buffer.clone()))
    (logits, buf), (logits_fused, buf_fused) = results
    assert buf.abs().sum() > 0
    assert torch.equal(buf, buf_fused)
    assert torch.equal(logits, logits_fused)
