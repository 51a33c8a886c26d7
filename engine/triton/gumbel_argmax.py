"""Sampling from softmax(logits / T) as one pass over the logits: argmax(logits / T + Gumbel).

The Gumbel-max trick: with G_i = -log(-log U_i), U_i uniform, argmax_i(s_i + G_i) is distributed
as softmax(s); it equals the sampler's exponential race argmax(p_i / E_i) with E_i = -log U_i.
Rows with T = 0 take the plain argmax. The kernel reads the logits once in their own dtype and
writes one id per row; the uniforms come from Philox keyed by (seed, row, token id).
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def _gumbel_argmax_kernel(logits_ptr, row_stride, inv_temp_ptr, noise_ptr, out_ptr, seed, vocab,
                          BLOCK: tl.constexpr):
    row = tl.program_id(0)
    inv_t = tl.load(inv_temp_ptr + row)
    noise = tl.load(noise_ptr + row)
    base = logits_ptr + row.to(tl.int64) * row_stride
    best = tl.full((), float("-inf"), tl.float32)
    best_i = tl.full((), 0, tl.int64)
    for start in range(0, vocab, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < vocab
        x = tl.load(base + cols, mask=mask, other=float("-inf")).to(tl.float32)
        u = tl.rand(seed, row * vocab + cols)
        u = tl.maximum(u, 1e-20)
        g = -tl.log(-tl.log(u))
        s = tl.where(mask, x * inv_t + g * noise, float("-inf"))
        m, i = tl.max(s, axis=0, return_indices=True)
        better = m > best
        best = tl.where(better, m, best)
        best_i = tl.where(better, (start + i).to(tl.int64), best_i)
    tl.store(out_ptr + row, best_i)


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
    _gumbel_argmax_kernel[(n,)](logits, logits.stride(0), params[0], params[1], out, seed, vocab,
                                BLOCK=2048, num_warps=8)
    return out
