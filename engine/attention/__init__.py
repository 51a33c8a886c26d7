"""Attention backends over the paged KV pool, selected by name.

``torch`` runs anywhere; ``flashinfer`` needs CUDA and the flashinfer package, imported lazily.
"""

from __future__ import annotations

from typing import Any

from twinserve.core.registry import Registry
from twinserve.engine.attention.base import AttentionBackend, AttentionInputs, AttentionSpec

ATTENTION: Registry[AttentionBackend] = Registry("attention backend")


@ATTENTION.register("torch")
def _torch(spec: AttentionSpec, **kw: Any) -> AttentionBackend:
    from twinserve.engine.attention.torch_backend import TorchAttention

    return TorchAttention(spec)


@ATTENTION.register("flashinfer")
def _flashinfer(spec: AttentionSpec, **kw: Any) -> AttentionBackend:
    from twinserve.engine.attention.flashinfer_backend import FlashInferAttention

    return FlashInferAttention(spec, **kw)


__all__ = ["ATTENTION", "AttentionBackend", "AttentionInputs", "AttentionSpec"]
