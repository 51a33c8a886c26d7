"""Per-head RMSNorm of q and k followed by NeoX RoPE, in one launch (Qwen3's attention input).

The same arithmetic as FlashInfer's two kernels run one after the other: each head row is
normalized in float32 and rounded to the tensor's dtype (what the norm kernel writes), then
rotated in float32 with the float32 cos/sin cache and rounded again. One program handles one
token's q and k heads, which lie side by side in the fused QKV output.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _qk_norm_rope_kernel(qkv_ptr, pos_ptr, cs_ptr, qw_ptr, kw_ptr, row_stride, cs_stride, eps,
                         NQ: tl.constexpr, NK: tl.constexpr, HB: tl.constexpr, HALF: tl.constexpr):
    t = tl.program_id(0)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    h = tl.arange(0, HB)[:, None]
    c = tl.arange(0, HALF)[None, :]
    live = h < NQ + NK
    base = qkv_ptr + t.to(tl.int64) * row_stride + h * (2 * HALF)
    x1 = tl.load(base + c, mask=live, other=0.0).to(tl.float32)
    x2 = tl.load(base + HALF + c, mask=live, other=0.0).to(tl.float32)
    r = tl.rsqrt((tl.sum(x1 * x1, axis=1) + tl.sum(x2 * x2, axis=1)) / (2 * HALF) + eps)[:, None]
    is_q = h < NQ
    w1 = tl.where(is_q, tl.load(qw_ptr + c).to(tl.float32), tl.load(kw_ptr + c).to(tl.float32))
    w2 = tl.where(is_q, tl.load(qw_ptr + HALF + c).to(tl.float32), tl.load(kw_ptr + HALF + c).to(tl.float32))
    dt = qkv_ptr.dtype.element_ty
    y1 = (x1 * r * w1).to(dt).to(tl.float32)
    y2 = (x2 * r * w2).to(dt).to(tl.float32)
    cos = tl.load(cs_ptr + pos * cs_stride + c)
    sin = tl.load(cs_ptr + pos * cs_stride + HALF + c)
    tl.store(base + c, (y1 * cos - y2 * sin).to(dt), mask=live)
    tl.store(base + HALF + c, (y2 * cos + y1 * sin).to(dt), mask=live)


def adjacent_heads(q: torch.Tensor, k: torch.Tensor, head_dim: int) -> bool:
    """``k`` [T, Hk*D] starts right after ``q`` [T, Hq*D] in every row (the q and k slices of one
    fused QKV output), both with unit column stride and the same row stride: what the kernel reads."""
    return (q.dim() == 2 and k.dim() == 2 and q.stride(1) == 1 and k.stride(1) == 1
            and q.stride(0) == k.stride(0) and q.shape[1] % head_dim == 0
            and k.data_ptr() == q.data_ptr() + q.shape[1] * q.element_size())


def qk_norm_rope(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor,
                 k_weight: torch.Tensor, eps: float, head_dim: int, cos_sin: torch.Tensor) -> None:
    """In place: every head of ``q`` and ``k`` RMS-normalized with its weight ([D]), then rotated
    at ``positions`` [T] with ``cos_sin`` [max_pos, D] (float32, cos then sin). ``q`` and ``k``
    must satisfy `adjacent_heads`; ``head_dim`` a power of two."""
    t = q.shape[0]
    if t == 0:
        return
    nq, nk = q.shape[1] // head_dim, k.shape[1] // head_dim
    _qk_norm_rope_kernel[(t,)](q, positions, cos_sin, q_weight, k_weight, q.stride(0), cos_sin.stride(0),
                               eps, NQ=nq, NK=nk, HB=triton.next_power_of_2(nq + nk), HALF=head_dim // 2,
                               num_warps=4)
