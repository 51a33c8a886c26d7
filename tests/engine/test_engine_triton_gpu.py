"""The Triton kernels of `engine.triton` against the torch ops they replace (CUDA only)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton"),
]

from twinserve.engine.testing import GPU_SHAPES  # noqa: E402

# a tiny Qwen3 (q/k norms, GQA group 2, head_dim 128): the path the Triton kernels serve
QWEN3 = GPU_SHAPES["qwen3"]


def test_triton_kv_store_writes_what_index_copy_writes():
    from twinserve.engine.kv_pool import KVGeometry, KVPool

    geom = KVGeometry(num_layers=2, num_pages=40, page_size=16, num_kv_heads=8, head_dim=128, dtype=torch.bfloat16)
    plain, fused = KVPool(geom, "cuda"), KVPool(geom, "cuda", fused_store=True)
    for t in (1, 7, 256):
        qkv = torch.randn(t, (16 + 2 * 8) * 128, device="cuda", dtype=torch.bfloat16)
        _, k, v = qkv.split([16 * 128, 8 * 128, 8 * 128], dim=-1)
        k, v = k.view(t, 8, 128), v.view(t, 8, 128)
        slots = torch.randperm(40 * 16, device="cuda")[:t]
        plain.write(1, slots, k, v)
        fused.write(1, slots, k, v)
        assert torch.equal(plain.buffer, fused.buffer)
        assert fused.buffer[0].abs().sum() == 0 or t == 1  # layer 0 only ever saw the warm-up row


def test_gumbel_argmax_samples_softmax_and_greedy_rows_take_the_argmax():
    from twinserve.engine.triton.gumbel_argmax import gumbel_argmax, row_params

    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, 0.3, 1.7, -0.2], device="cuda")
    n = 100_000
    temp = np.full(n, 0.7, dtype=np.float32)
    temp[:1000] = 0.0
    params = torch.from_numpy(row_params(temp)).cuda()
    ids = gumbel_argmax(logits.expand(n, -1).contiguous().to(torch.bfloat16), params, seed=3)
    assert (ids[:1000] == 0).all()
    counts = torch.bincount(ids[1000:], minlength=8).double().cpu()
    expect = torch.softmax(logits.double().cpu() / 0.7, 0) * counts.sum()
    chi2 = float(((counts - expect) ** 2 / expect).sum())
    assert chi2 < 24.3  # chi-square, 7 degrees of freedom, p = 0.001
    # a biased sampler (temperature ignored) fails the same check
    wrong = torch.softmax(logits.double().cpu(), 0) * counts.sum()
    assert float(((counts - wrong) ** 2 / wrong).sum()) > 100
    again = gumbel_argmax(logits.expand(n, -1).contiguous().to(torch.bfloat16), params, seed=3)
    other = gumbel_argmax(logits.expand(n, -1).contiguous().to(torch.bfloat16), params, seed=4)
    assert torch.equal(ids, again) and not torch.equal(ids, other)


def test_engine_greedy_tokens_are_the_same_with_and_without_triton_kernels(tiny_model_dir):
    from twinserve.core.sampling import SamplingParams
    from twinserve.engine.llm import LLM
    from twinserve.engine.testing import random_prompts

    greedy = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)
    d = tiny_model_dir(QWEN3)
    prompts = random_prompts((5, 17, 40, 63, 100, 300), seed=4)
    outs = {}
    for fused in (False, True):
        # the store and the sampler are exact; the q/k norm-and-RoPE kernel rounds a few
        # elements differently (checked above, and against transformers in test_engine_gpu.py
        # where ``kernels="auto"`` picks it), which may flip a near tie, so it stays out here
        llm = LLM(str(d), device="cuda", dtype="bfloat16", num_pages=512, max_graph_bs=16, triton_kernels=fused,
                  kernels="flashinfer", scheduler={"chunk_size": 64, "max_num_batched_tokens": 96})
        assert (llm.engine.pool._store is not None) == fused
        outs[fused] = [o.token_ids for o in llm.generate(prompts, greedy, use_tqdm=False)]
    assert outs[True] == outs[False]


def _assert_a_rounding_step_apart(fused, reference, before):
    """``fused`` and ``reference`` (the QKV rows after the Triton kernel and after FlashInfer's
    kernels) are a bf16 rounding step or two apart at most (the norm's rounding carried through
    the rotation), and only where float sums round differently; ``reference`` changed ``before``."""
    assert not torch.equal(reference, before)
    diff = (fused.float() - reference.float()).abs()
    tol = reference.float().abs().clamp_min(1.0) * 2.0 ** -6
    assert bool((diff <= tol).all()), float((diff / tol).max())
    assert float((diff > 0).float().mean()) < 0.01


@pytest.mark.parametrize("heads", [(16, 8), (32, 8), (8, 4)])
@pytest.mark.parametrize("t", [1, 5, 320])
def test_fused_qk_norm_rope_matches_flashinfers_three_kernels(heads, t):
    pytest.importorskip("flashinfer")
    from twinserve.engine.layers.flashinfer_kernels import FlashInferKernels
    from twinserve.engine.layers.rotary import cos_sin_cache

    nq, nk, d = heads[0], heads[1], 128
    cos_sin = cos_sin_cache(1_000_000.0, d, 4096, None).cuda()
    qw = (1 + 0.1 * torch.randn(d, device="cuda")).to(torch.bfloat16)
    kw = (1 + 0.1 * torch.randn(d, device="cuda")).to(torch.bfloat16)
    positions = torch.randint(0, 4096, (t,), device="cuda", dtype=torch.int32)
    qkv = 3 * torch.randn(t, (nq + 2 * nk) * d, device="cuda", dtype=torch.bfloat16)
    out = {}
    for fused in (False, True):
        x = qkv.clone()
        q, k, v = x.split([nq * d, nk * d, nk * d], dim=-1)
        FlashInferKernels(triton_rope=fused).qk_norm_rope(positions, q, k, qw, kw, 1e-6, d, cos_sin)
        assert torch.equal(v, qkv[:, (nq + nk) * d:])  # v untouched
        out[fused] = x
    _assert_a_rounding_step_apart(out[True], out[False], qkv)


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("t", [1, 5, 320])
def test_rope_with_the_kv_store_in_one_launch_stores_what_the_pool_write_stores(norm, t):
    pytest.importorskip("flashinfer")
    from twinserve.engine.kv_pool import KVGeometry, KVPool, KVWrite
    from twinserve.engine.layers.flashinfer_kernels import FlashInferKernels
    from twinserve.engine.layers.rotary import cos_sin_cache

    class _NoFallback(KVWrite):
        def write(self, k):
            raise AssertionError("the fused kernel should have stored k and v")

    nq, nk, d = (16, 8, 128) if norm else (32, 8, 128)  # qwen3-0.6b's and llama3-8b's heads
    cos_sin = cos_sin_cache(1_000_000.0, d, 4096, None).cuda()
    w = (1 + 0.1 * torch.randn(d, device="cuda")).to(torch.bfloat16)
    positions = torch.randint(0, 4096, (t,), device="cuda")
    slots = torch.randperm(40 * 16, device="cuda")[:t]
    qkv = 3 * torch.randn(t, (nq + 2 * nk) * d, device="cuda", dtype=torch.bfloat16)
    geom = KVGeometry(num_layers=2, num_pages=40, page_size=16, num_kv_heads=nk, head_dim=d, dtype=torch.bfloat16)
    out = {}
    for fused in (False, True):
        pool, x = KVPool(geom, "cuda"), qkv.clone()
        q, k, v = x.split([nq * d, nk * d, nk * d], dim=-1)
        kv = (_NoFallback if fused else KVWrite)(pool, 1, slots, v)
        kernels = FlashInferKernels(triton_rope=fused)
        if norm:
            kernels.qk_norm_rope(positions, q, k, w, w, 1e-6, d, cos_sin, kv)
        else:
            kernels.rope(positions, q, k, d, cos_sin, kv)
        kc, vc = pool.flat(1)
        assert torch.equal(kc[slots], k.view(t, nk, d)) and torch.equal(vc[slots], v.view(t, nk, d))
        assert torch.equal(v, qkv[:, (nq + nk) * d:])
        assert pool.buffer[0].abs().sum() == 0  # the other layer untouched
        out[fused] = x
    _assert_a_rounding_step_apart(out[True], out[False], qkv)


def test_fused_qk_norm_rope_falls_back_where_q_and_k_are_not_adjacent():
    pytest.importorskip("flashinfer")
    from twinserve.engine.layers.flashinfer_kernels import FlashInferKernels
    from twinserve.engine.layers.rotary import cos_sin_cache
    from twinserve.engine.triton.rope_store import adjacent_heads

    d, t = 128, 4
    cos_sin = cos_sin_cache(10_000.0, d, 64, None).cuda()
    w = torch.ones(d, device="cuda", dtype=torch.bfloat16)
    q = torch.randn(t, 2 * d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(t, d, device="cuda", dtype=torch.bfloat16)
    assert not adjacent_heads(q, k, d)
    pos = torch.arange(t, device="cuda")
    a, b = (q.clone(), k.clone()), (q.clone(), k.clone())
    FlashInferKernels(triton_rope=True).qk_norm_rope(pos, *a, w, w, 1e-6, d, cos_sin)
    FlashInferKernels(triton_rope=False).qk_norm_rope(pos, *b, w, w, 1e-6, d, cos_sin)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_auto_kernels_on_cuda_run_the_fused_qk_kernel(tiny_model_dir):
    from twinserve.engine.llm import LLM

    d = tiny_model_dir(QWEN3)
    for triton_on, name in ((True, "flashinfer_triton"), (False, "flashinfer")):
        llm = LLM(str(d), device="cuda", dtype="bfloat16", num_pages=64, cuda_graphs=False, triton_kernels=triton_on)
        assert llm.engine.model.model.layers[0].self_attn.kernels.name == name
