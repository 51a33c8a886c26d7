"""One kernel launch that stores a step's new keys and values into a layer's paged KV cache."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from twinserve.engine.triton.pdl import dependent_start, pdl_on


@triton.jit
def _store_kv_kernel(k_ptr, v_ptr, slot_ptr, k_cache_ptr, v_cache_ptr, k_row_stride, v_row_stride,
                     ROW: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    dependent_start(PDL)
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    src = t.to(tl.int64)
    for start in tl.static_range(0, ROW, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < ROW
        k = tl.load(k_ptr + src * k_row_stride + cols, mask=mask)
        tl.store(k_cache_ptr + slot * ROW + cols, k, mask=mask)
        v = tl.load(v_ptr + src * v_row_stride + cols, mask=mask)
        tl.store(v_cache_ptr + slot * ROW + cols, v, mask=mask)


def rows_are_contiguous(x: torch.Tensor) -> bool:
    """Each token's ``[heads, dim]`` block is contiguous (any row stride): what the kernel reads."""
    return x.dim() == 3 and x.stride(2) == 1 and x.stride(1) == x.shape[2]


def store_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor, k: torch.Tensor,
             v: torch.Tensor) -> None:
    """``k_cache[slots[i]] = k[i]`` and the same for v, in one launch.

    ``k_cache``/``v_cache``: contiguous ``[num_slots, heads, dim]``; ``k``/``v``: ``[T, heads,
    dim]`` of the cache's dtype whose rows are contiguous (`rows_are_contiguous`; the q/k/v
    views of a fused QKV output qualify); ``slots``: ``[T]`` integer slot ids on the device.
    """
    t, heads, dim = k.shape
    if t == 0:
        return
    row = heads * dim
    block = min(triton.next_power_of_2(row), 4096)
    pdl = pdl_on(k)
    _store_kv_kernel[(t,)](k, v, slots, k_cache, v_cache, k.stride(0), v.stride(0),
                           ROW=row, BLOCK=block, PDL=pdl, num_warps=4, launch_pdl=pdl)
