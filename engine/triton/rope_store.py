"""q/k RoPE, optionally after per-head RMSNorm (Qwen3), and the layer's KV store, in one launch.

The same arithmetic as FlashInfer's kernels run one after the other: with ``NORM`` each head row
is normalized in float32 and rounded to the tensor's dtype (what the norm kernel writes), then
rotated in float32 with the float32 cos/sin cache and rounded again. One program handles one
token's q and k heads, which lie side by side in the fused QKV output; with ``STORE`` it also
copies the token's rotated k heads and its v heads (right after k) to the token's slot of the
layer's paged KV cache, as `engine.triton.kv_store` would.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from twinserve.engine.triton.pdl import dependent_start, pdl_on


@triton.jit
def _rope_store_kernel(qkv_ptr, pos_ptr, cs_ptr, qw_ptr, kw_ptr, slot_ptr, kc_ptr, vc_ptr, row_stride,
                       cs_stride, eps, NQ: tl.constexpr, NK: tl.constexpr, HB: tl.constexpr,
                       KB: tl.constexpr, HALF: tl.constexpr, NORM: tl.constexpr, STORE: tl.constexpr,
                       PDL: tl.constexpr):
    dependent_start(PDL)
    t = tl.program_id(0)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    h = tl.arange(0, HB)[:, None]
    c = tl.arange(0, HALF)[None, :]
    live = h < NQ + NK
    row = qkv_ptr + t.to(tl.int64) * row_stride
    base = row + h * (2 * HALF)
    dt = qkv_ptr.dtype.element_ty
    x1 = tl.load(base + c, mask=live, other=0.0).to(tl.float32)
    x2 = tl.load(base + HALF + c, mask=live, other=0.0).to(tl.float32)
    if NORM:
        r = tl.rsqrt((tl.sum(x1 * x1, axis=1) + tl.sum(x2 * x2, axis=1)) / (2 * HALF) + eps)[:, None]
        is_q = h < NQ
        w1 = tl.where(is_q, tl.load(qw_ptr + c).to(tl.float32), tl.load(kw_ptr + c).to(tl.float32))
        w2 = tl.where(is_q, tl.load(qw_ptr + HALF + c).to(tl.float32), tl.load(kw_ptr + HALF + c).to(tl.float32))
        x1 = (x1 * r * w1).to(dt).to(tl.float32)
        x2 = (x2 * r * w2).to(dt).to(tl.float32)
    cos = tl.load(cs_ptr + pos * cs_stride + c)
    sin = tl.load(cs_ptr + pos * cs_stride + HALF + c)
    y1 = (x1 * cos - x2 * sin).to(dt)
    y2 = (x2 * cos + x1 * sin).to(dt)
    tl.store(base + c, y1, mask=live)
    tl.store(base + HALF + c, y2, mask=live)
    if STORE:
        slot = tl.load(slot_ptr + t).to(tl.int64)
        is_k = (h >= NQ) & live
        kdst = kc_ptr + slot * (NK * 2 * HALF) + (h - NQ) * (2 * HALF)
        tl.store(kdst + c, y1, mask=is_k)
        tl.store(kdst + HALF + c, y2, mask=is_k)
        vh = tl.arange(0, KB)[:, None]
        d = tl.arange(0, 2 * HALF)[None, :]
        vmask = vh < NK
        v = tl.load(row + (NQ + NK) * (2 * HALF) + vh * (2 * HALF) + d, mask=vmask)
        tl.store(vc_ptr + slot * (NK * 2 * HALF) + vh * (2 * HALF) + d, v, mask=vmask)


def adjacent_heads(q: torch.Tensor, k: torch.Tensor, head_dim: int) -> bool:
    """``k`` [T, Hk*D] starts right after ``q`` [T, Hq*D] in every row (the q and k slices of one
    fused QKV output), both with unit column stride and the same row stride: what the kernel reads.
    The same test tells whether ``v`` lies right after ``k``."""
    return (q.dim() == 2 and k.dim() == 2 and q.stride(1) == 1 and k.stride(1) == 1
            and q.stride(0) == k.stride(0) and q.shape[1] % head_dim == 0
            and k.data_ptr() == q.data_ptr() + q.shape[1] * q.element_size())


def rope_store(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_dim: int,
               cos_sin: torch.Tensor, norm: tuple[torch.Tensor, torch.Tensor, float] | None = None,
               store: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None) -> None:
    """In place: every head of ``q`` and ``k`` RMS-normalized when ``norm`` = ``(q_weight,
    k_weight, eps)`` (weights [D]), then rotated at ``positions`` [T] with ``cos_sin`` [max_pos, D]
    (float32, cos then sin). With ``store`` = ``(k_cache, v_cache, slots)`` (contiguous
    [num_slots, Hk, D] of the qkv dtype; slots [T] on the device) the rotated k heads and the v
    heads that follow k in each row go to ``k_cache[slots[i]]`` and ``v_cache[slots[i]]``.
    ``q`` and ``k`` (and with ``store`` ``k`` and ``v``) must satisfy `adjacent_heads`;
    ``head_dim`` a power of two."""
    t = q.shape[0]
    if t == 0:
        return
    nq, nk = q.shape[1] // head_dim, k.shape[1] // head_dim
    qw, kw, eps = norm if norm is not None else (cos_sin, cos_sin, 0.0)
    kc, vc, slots = store if store is not None else (q, q, positions)
    pdl = pdl_on(q)
    _rope_store_kernel[(t,)](q, positions, cos_sin, qw, kw, slots, kc, vc, q.stride(0), cos_sin.stride(0),
                             eps, NQ=nq, NK=nk, HB=triton.next_power_of_2(nq + nk),
                             KB=triton.next_power_of_2(nk), HALF=head_dim // 2, NORM=norm is not None,
                             STORE=store is not None, PDL=pdl, num_warps=4, launch_pdl=pdl)
