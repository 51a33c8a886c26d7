"""The KV pool's single-copy write of a fused QKV output's adjacent k and v, and the in-place
RMSNorm of head views (what keeps q, k and v views of that output), on CPU."""

from __future__ import annotations

import torch

from twinserve.engine.kv_pool import KVGeometry, KVPool, _adjacent_pair
from twinserve.engine.layers.kernels import TorchKernels


def _qkv(t: int = 6, hq: int = 4, hk: int = 2, d: int = 8) -> tuple[torch.Tensor, ...]:
    qkv = torch.randn(t, (hq + 2 * hk) * d, generator=torch.Generator().manual_seed(0))
    q, k, v = qkv.split([hq * d, hk * d, hk * d], dim=-1)
    return qkv, q.view(t, hq, d), k.view(t, hk, d), v.view(t, hk, d)


def test_adjacent_k_and_v_are_written_with_one_copy_and_land_where_two_would():
    _, _, k, v = _qkv()
    pair = _adjacent_pair(k, v)
    assert pair is not None and pair.shape == (2, 6, 2, 8)
    assert torch.equal(pair[0], k) and torch.equal(pair[1], v)
    geom = KVGeometry(num_layers=2, num_pages=4, page_size=4, num_kv_heads=2, head_dim=8, dtype=torch.float32)
    fused, split = KVPool(geom, "cpu"), KVPool(geom, "cpu")
    slots = torch.tensor([3, 7, 0, 9, 12, 16])  # 16: the scratch page's first slot
    fused.write(1, slots, k, v)
    split.write(1, slots, k.contiguous(), v.contiguous())  # separate tensors: two copies
    assert torch.equal(fused.buffer, split.buffer)
    assert torch.equal(fused.k(1).reshape(-1, 2, 8)[slots], k)
    assert torch.equal(fused.v(1).reshape(-1, 2, 8)[slots], v)
    assert fused.buffer[0].abs().sum() == 0  # other layers untouched


def test_pairs_that_are_not_adjacent_are_refused():
    _, q, k, v = _qkv()
    assert _adjacent_pair(v, k) is None  # wrong order
    assert _adjacent_pair(k.contiguous(), v.contiguous()) is None  # separate buffers
    assert _adjacent_pair(q[:, :2], k) is None  # q's first heads end 2 heads before k


def test_in_place_rms_norm_of_head_views_matches_the_plain_norm():
    qkv, q, k, v = _qkv()
    before = qkv.clone()
    kern = TorchKernels()
    w = torch.linspace(0.5, 1.5, 8)
    want = kern.rms_norm(k.clone(), w, 1e-6)
    out = kern.rms_norm_(k, w, 1e-6)
    assert out.data_ptr() == k.data_ptr() and torch.allclose(k, want)
    # only k's columns of the fused output changed
    assert torch.equal(qkv[:, :32], before[:, :32]) and torch.equal(qkv[:, 48:], before[:, 48:])
