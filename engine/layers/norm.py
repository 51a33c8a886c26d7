"""RMSNorm with an optional fused residual add."""

from __future__ import annotations

import torch
from torch import nn

from twinserve.engine.layers.kernels import Kernels


class RMSNorm(nn.Module):
    """``y = x / rms(x) * weight`` over the last dimension (replicated on every TP rank).

    ``forward(x)`` returns the normalized tensor; ``forward(x, residual)`` first adds ``x`` to the
    residual stream and returns ``(norm(x + residual), x + residual)``. Its ``weight`` and ``eps``
    also serve `Kernels.qk_norm_rope` (Qwen3's per-head norms, done in place with RoPE).
    """

    def __init__(self, dim: int, eps: float, kernels: Kernels, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.eps = eps
        self.kernels = kernels
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype), requires_grad=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is None:
            return self.kernels.rms_norm(x, self.weight, self.eps)
        return self.kernels.add_rms_norm(x, residual, self.weight, self.eps)
