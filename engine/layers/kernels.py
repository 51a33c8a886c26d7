"""Element-wise kernels the layers call (RMSNorm, SiLU-and-mul, RoPE), behind one interface.

``TorchKernels`` runs anywhere; ``FlashInferKernels`` (engine/layers/flashinfer_kernels.py) fuses
them on CUDA. A model receives one kernels object at construction; layers never choose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch
import torch.nn.functional as F

from twinserve.core.registry import Registry

if TYPE_CHECKING:
    from twinserve.engine.kv_pool import KVWrite


class Kernels(Protocol):
    """Contract: results equal the plain-torch formulas below up to floating-point rounding.

    ``add_rms_norm`` returns ``(rms_norm(x + residual), x + residual)`` and may reuse the input
    buffers. ``rms_norm_`` writes ``rms_norm(x)`` into ``x`` itself (which may be a strided view,
    e.g. the heads [T, H, D] of a fused QKV output) and returns it. ``rope`` rotates ``q``
    [T, Hq*D] and ``k`` [T, Hk*D] (NeoX layout: first half / second
    half of each head) at ``positions`` using ``cos_sin`` [max_pos, D] (float32; cos in the first
    half, sin in the second) in place (both may be strided views of a fused QKV output) and
    returns them. ``qk_norm_rope`` norms every head of ``q`` and ``k`` (``rms_norm_``) and then
    rotates them (``rope``). Given ``kv`` (a `KVWrite`), both also store the rotated ``k`` and
    ``kv.v`` at ``kv.slots``; ``stores_kv`` says whether they do it in the same launch, which is
    when the layers hand them the store instead of the attention backend.
    """

    name: str
    stores_kv: bool

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor: ...

    def rms_norm_(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor: ...

    def add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]: ...

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor: ...

    def rope(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_dim: int,
             cos_sin: torch.Tensor, kv: KVWrite | None = None) -> tuple[torch.Tensor, torch.Tensor]: ...

    def qk_norm_rope(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor,
                     k_weight: torch.Tensor, eps: float, head_dim: int, cos_sin: torch.Tensor,
                     kv: KVWrite | None = None) -> None: ...


def norm_then_rope(kernels: Kernels, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                   q_weight: torch.Tensor, k_weight: torch.Tensor, eps: float, head_dim: int,
                   cos_sin: torch.Tensor, kv: KVWrite | None = None) -> None:
    """``qk_norm_rope`` as separate calls of ``kernels``: the norms of q's and k's heads, RoPE,
    then the store, if any."""
    t = q.shape[0]
    kernels.rms_norm_(q.view(t, -1, head_dim), q_weight, eps)
    kernels.rms_norm_(k.view(t, -1, head_dim), k_weight, eps)
    kernels.rope(positions, q, k, head_dim, cos_sin, kv)


KERNELS: Registry[Kernels] = Registry("kernels")


@KERNELS.register("torch")
class TorchKernels:
    """Reference kernels in plain torch; match transformers' formulas (float32 inside)."""

    name = "torch"
    stores_kv = False

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return weight * xf.to(x.dtype)

    def rms_norm_(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return x.copy_(self.rms_norm(x, weight, eps))

    def add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        s = x + residual
        return self.rms_norm(s, weight, eps), s

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]

    def rope(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_dim: int,
             cos_sin: torch.Tensor, kv: KVWrite | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        cs = cos_sin.index_select(0, positions)
        half = cs.shape[-1] // 2
        cos = torch.cat([cs[:, :half], cs[:, :half]], dim=-1).unsqueeze(1).to(q.dtype)
        sin = torch.cat([cs[:, half:], cs[:, half:]], dim=-1).unsqueeze(1).to(q.dtype)
        q.copy_(self._rotate(q, cos, sin, head_dim))
        k.copy_(self._rotate(k, cos, sin, head_dim))
        if kv is not None:
            kv.write(k)
        return q, k

    def qk_norm_rope(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor,
                     k_weight: torch.Tensor, eps: float, head_dim: int, cos_sin: torch.Tensor,
                     kv: KVWrite | None = None) -> None:
        norm_then_rope(self, positions, q, k, q_weight, k_weight, eps, head_dim, cos_sin, kv)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_dim: int) -> torch.Tensor:
        t = x.shape[0]
        xh = x.view(t, -1, head_dim)
        x1, x2 = xh[..., : head_dim // 2], xh[..., head_dim // 2:]
        rot = torch.cat([-x2, x1], dim=-1)
        return (xh * cos + rot * sin).reshape(t, -1)


KERNELS.register("flashinfer")(lambda: _flashinfer_kernels(triton_rope=False))
KERNELS.register("flashinfer_triton")(lambda: _flashinfer_kernels(triton_rope=True))


def auto_kernels(attention: str, triton: bool) -> str:
    """The kernels ``kernels="auto"`` picks: FlashInfer's beside FlashInfer attention (with the
    Triton q/k norm, RoPE and KV store in one launch when the engine runs Triton kernels), else
    torch's."""
    if attention != "flashinfer":
        return "torch"
    return "flashinfer_triton" if triton else "flashinfer"


def _flashinfer_kernels(triton_rope: bool) -> Kernels:
    from twinserve.engine.layers.flashinfer_kernels import FlashInferKernels

    return FlashInferKernels(triton_rope=triton_rope)
