"""Sampling from softmax(logits / T) as one pass over the logits: argmax(logits / T + Gumbel).

The Gumbel-max trick: with G_i = -log(-log U_i), U_i uniform, argmax_i(s_i + G_i) is distributed
as softmax(s); it equals the sampler's exponential race argmax(p_i / E_i) with E_i = -log U_i.
Rows with T = 0 take the plain argmax. The kernel reads the logits once in their own dtype and
writes one id per row; the uniforms come from Philox keyed by (seed, row, token id). A row is
split into stretches of ids, one program each (enough programs for the GPU at any batch size);
a second launch picks each row's best stretch.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def _segment_max_kernel(logits_ptr, row_stride, inv_temp_ptr, noise_ptr, val_ptr, idx_ptr, seed, vocab,
                        segments, counters_per_row, SEG: tl.constexpr, BLOCK: tl.constexpr):
    """Program (row, s): the largest score of the row's s-th stretch of ``SEG`` ids, and where
    (the first such id). Each lane keeps its own running maximum (strictly larger wins, so it
    holds its first maximum); one reduction at the end. Each Philox counter gives four
    uniforms, for four ids ``BLOCK`` apart."""
    row = tl.program_id(0)
    seg = tl.program_id(1)
    inv_t = tl.load(inv_temp_ptr + row)
    noise = tl.load(noise_ptr + row)
    base = logits_ptr + row.to(tl.int64) * row_stride
    lanes = tl.arange(0, BLOCK)
    best = tl.full((BLOCK,), float("-inf"), tl.float32)
    best_i = tl.zeros((BLOCK,), tl.int32)
    for step in tl.static_range(0, SEG, 4 * BLOCK):
        first = seg * SEG + step
        u0, u1, u2, u3 = tl.rand4x(seed, row * counters_per_row + first // 4 + lanes)
        best, best_i = _fold(base, first + lanes, u0, inv_t, noise, vocab, best, best_i)
        best, best_i = _fold(base, first + BLOCK + lanes, u1, inv_t, noise, vocab, best, best_i)
        best, best_i = _fold(base, first + 2 * BLOCK + lanes, u2, inv_t, noise, vocab, best, best_i)
        best, best_i = _fold(base, first + 3 * BLOCK + lanes, u3, inv_t, noise, vocab, best, best_i)
    m = tl.max(best, axis=0)
    at = tl.min(tl.where(best == m, best_i, 2147483647), axis=0)
    tl.store(val_ptr + row * segments + seg, m)
    tl.store(idx_ptr + row * segments + seg, at)


@triton.jit
def _fold(base, cols, u, inv_t, noise, vocab, best, best_i):
    mask = cols < vocab
    x = tl.load(base + cols, mask=mask, other=float("-inf")).to(tl.float32)
    g = -tl.log(-tl.log(tl.maximum(u, 1e-20)))
    s = tl.where(mask, x * inv_t + g * noise, float("-inf"))
    better = s > best
    return tl.where(better, s, best), tl.where(better, cols, best_i)


@triton.jit
def _pick_kernel(val_ptr, idx_ptr, out_ptr, segments, SEGS: tl.constexpr):
    """Program row: the id of the row's largest segment maximum (the first on ties)."""
    row = tl.program_id(0)
    k = tl.arange(0, SEGS)
    mask = k < segments
    v = tl.load(val_ptr + row * segments + k, mask=mask, other=float("-inf"))
    i = tl.load(idx_ptr + row * segments + k, mask=mask, other=0)
    _, at = tl.max(v, axis=0, return_indices=True)
    tl.store(out_ptr + row, tl.sum(tl.where(k == at, i, 0), axis=0).to(tl.int64))


_BLOCK = 512  # ids per lane group; four groups share one Philox call
_SEG = 16 * _BLOCK  # ids per program: 19 programs a row at a vocabulary of 151,936


def row_params(temperature: np.ndarray) -> np.ndarray:
    """float32 ``[2, N]``: each row's 1/T (1 where T = 0) and its noise weight (0 where T = 0)."""
    sampled = temperature > 0
    out = np.empty((2, len(temperature)), dtype=np.float32)
    out[0] = np.where(sampled, 1.0 / np.where(sampled, temperature, 1.0), 1.0)
    out[1] = sampled
    return out


def gumbel_argmax(logits: torch.Tensor, params: torch.Tensor, seed: int) -> torch.Tensor:
    """One token id per row of ``logits`` [N, V] (any float dtype, unit stride along V):
    argmax for rows with temperature 0, a draw from softmax(logits / T) otherwise.
    ``params``: `row_params` of the rows' temperatures, float32 on the logits' device;
    ``seed``: the step's Philox key (use a fresh one per step: the same seed and row give the
    same uniforms)."""
    n, vocab = logits.shape
    out = torch.empty(n, dtype=torch.int64, device=logits.device)
    if n == 0:
        return out
    segments = triton.cdiv(vocab, _SEG)
    vals = torch.empty((n, segments), dtype=torch.float32, device=logits.device)
    idx = torch.empty((n, segments), dtype=torch.int32, device=logits.device)
    _segment_max_kernel[(n, segments)](logits, logits.stride(0), params[0], params[1], vals, idx, seed, vocab,
                                       segments, segments * _SEG // 4, SEG=_SEG, BLOCK=_BLOCK, num_warps=4)
    _pick_kernel[(n,)](vals, idx, out, segments, SEGS=triton.next_power_of_2(segments), num_warps=1)
    return out
