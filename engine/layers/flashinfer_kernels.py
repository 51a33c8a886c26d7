"""FlashInfer's fused CUDA kernels for RMSNorm, residual-add + RMSNorm, SiLU-and-mul and RoPE;
optionally the Triton kernel that norms q's and k's heads, rotates them and stores k and v in one
launch."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from twinserve.engine.layers.kernels import norm_then_rope

if TYPE_CHECKING:
    from twinserve.engine.kv_pool import KVWrite


class FlashInferKernels:
    """CUDA-only implementation of the ``Kernels`` contract (see layers/kernels.py).

    ``add_rms_norm``, ``rms_norm_`` and ``rope`` work in place on their inputs (FlashInfer
    semantics), which the layers allow: the inputs are temporaries of the current forward.
    ``rms_norm_`` takes [T, H, D] head views with any row/head strides (FlashInfer's QK-norm
    kernel, one warp per head row), so a fused QKV output is normalized where it lies.
    ``triton_rope``: `engine.triton.rope_store` runs ``qk_norm_rope`` (one launch instead of
    three) and ``rope`` given a store (``stores_kv``; one launch instead of two) where q, k and v
    are adjacent slices of one fused QKV output of the cache's dtype, else FlashInfer's kernels and
    the pool's write.
    """

    def __init__(self, triton_rope: bool = False) -> None:
        import flashinfer  # noqa: F401  (lazy: only on GPU hosts)
        from flashinfer.activation import silu_and_mul
        from flashinfer.norm import fused_add_rmsnorm, rmsnorm
        from flashinfer.rope import apply_rope_with_cos_sin_cache_inplace

        self._rmsnorm = rmsnorm
        self._fused_add_rmsnorm = fused_add_rmsnorm
        self._silu_and_mul = silu_and_mul
        self._rope = apply_rope_with_cos_sin_cache_inplace
        self.name = "flashinfer_triton" if triton_rope else "flashinfer"
        self.stores_kv = triton_rope
        self._fused = None
        if triton_rope:
            from twinserve.engine.triton.rope_store import adjacent_heads, rope_store

            self._fused, self._adjacent = rope_store, adjacent_heads

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
             cos_sin: torch.Tensor, kv: KVWrite | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if kv is None or not self._one_launch(positions, q, k, head_dim, cos_sin, None, kv):
            self._rope(positions, q, k, head_dim, cos_sin, True)
            if kv is not None:
                kv.write(k)
        return q, k

    def qk_norm_rope(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor,
                     k_weight: torch.Tensor, eps: float, head_dim: int, cos_sin: torch.Tensor,
                     kv: KVWrite | None = None) -> None:
        if not self._one_launch(positions, q, k, head_dim, cos_sin, (q_weight, k_weight, eps), kv):
            norm_then_rope(self, positions, q, k, q_weight, k_weight, eps, head_dim, cos_sin, kv)

    def _one_launch(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_dim: int,
                    cos_sin: torch.Tensor, norm: tuple[torch.Tensor, torch.Tensor, float] | None,
                    kv: KVWrite | None) -> bool:
        """Run the Triton kernel if it can serve these tensors; False (nothing done) if not."""
        if self._fused is None or not self._adjacent(q, k, head_dim):
            return False
        store = None
        if kv is not None:
            kc, vc = kv.caches()
            if (kc.dtype != k.dtype or kc.shape[1] * kc.shape[2] != k.shape[1] or kv.v.shape != k.shape
                    or not self._adjacent(k, kv.v, head_dim)):
                return False
            store = (kc, vc, kv.slots)
        self._fused(positions, q, k, head_dim, cos_sin, norm=norm, store=store)
        return True
