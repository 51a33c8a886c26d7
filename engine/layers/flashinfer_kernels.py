"""FlashInfer's fused CUDA kernels for RMSNorm, residual-add + RMSNorm, SiLU-and-mul and RoPE."""

from __future__ import annotations

import torch


class FlashInferKernels:
    """CUDA-only implementation of the ``Kernels`` contract (see layers/kernels.py).

    ``add_rms_norm``, ``rms_norm_`` and ``rope`` work in place on their inputs (FlashInfer
    semantics), which the layers allow: the inputs are temporaries of the current forward.
    ``rms_norm_`` takes [T, H, D] head views with any row/head strides (FlashInfer's QK-norm
    kernel, one warp per head row), so a fused QKV output is normalized where it lies.
    """

    name = "flashinfer"

    def __init__(self) -> None:
        import flashinfer  # noqa: F401  (lazy: only on GPU hosts)
        from flashinfer.activation import silu_and_mul
        from flashinfer.norm import fused_add_rmsnorm, rmsnorm
        from flashinfer.rope import apply_rope_with_cos_sin_cache_inplace

        self._rmsnorm = rmsnorm
        self._fused_add_rmsnorm = fused_add_rmsnorm
        self._silu_and_mul = silu_and_mul
        self._rope = apply_rope_with_cos_sin_cache_inplace

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
