"""FlashInfer's fused CUDA kernels for RMSNorm, residual-add + RMSNorm, SiLU-and-mul and RoPE;
optionally the Triton kernel that norms q's and k's heads and rotates them in one launch."""

from __future__ import annotations

import torch

from twinserve.engine.layers.kernels import norm_then_rope


class FlashInferKernels:
    """CUDA-only implementation of the ``Kernels`` contract (see layers/kernels.py).

    ``add_rms_norm``, ``rms_norm_`` and ``rope`` work in place on their inputs (FlashInfer
    semantics), which the layers allow: the inputs are temporaries of the current forward.
    ``rms_norm_`` takes [T, H, D] head views with any row/head strides (FlashInfer's QK-norm
    kernel, one warp per head row), so a fused QKV output is normalized where it lies.
    ``fused_qk``: ``qk_norm_rope`` runs `engine.triton.qk_norm_rope` (one launch instead of three)
    where q and k are adjacent slices of one fused QKV output, else FlashInfer's three kernels.
    """

    def __init__(self, fused_qk: bool = False) -> None:
        import flashinfer  # noqa: F401  (lazy: only on GPU hosts)
        from flashinfer.activation import silu_and_mul
        from flashinfer.norm import fused_add_rmsnorm, rmsnorm
        from flashinfer.rope import apply_rope_with_cos_sin_cache_inplace

        self._rmsnorm = rmsnorm
        self._fused_add_rmsnorm = fused_add_rmsnorm
        self._silu_and_mul = silu_and_mul
        self._rope = apply_rope_with_cos_sin_cache_inplace
        self.name = "flashinfer_triton" if fused_qk else "flashinfer"
        self._fused_qk = None
        if fused_qk:
            from twinserve.engine.triton.qk_norm_rope import adjacent_heads, qk_norm_rope

            self._fused_qk, self._adjacent = qk_norm_rope, adjacent_heads

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        shape = x.shape
        return self._rmsnorm(x.reshape(-1, shape[-1]), weight, eps).view(shape)

    def rms_norm_(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        self._rmsnorm(x, weight, eps, out=x)
        return x

    def add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        self._fused_add_rmsnorm(x, residual, weight, eps)
        return x, residual

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        return self._silu_and_mul(x)

    def rope(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_dim: int,
             cos_sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self._rope(positions, q, k, head_dim, cos_sin, True)
        return q, k

    def qk_norm_rope(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor,
                     k_weight: torch.Tensor, eps: float, head_dim: int, cos_sin: torch.Tensor) -> None:
        if self._fused_qk is not None and self._adjacent(q, k, head_dim):
            self._fused_qk(positions, q, k, q_weight, k_weight, eps, head_dim, cos_sin)
        else:
            norm_then_rope(self, positions, q, k, q_weight, k_weight, eps, head_dim, cos_sin)
