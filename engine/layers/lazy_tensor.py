"""`LazySlice`: a checkpoint tensor that is read only when (and as far as) a layer needs it.

Tensor-parallel weight loaders narrow each full checkpoint tensor to their rank's shard. Handing
them a `LazySlice` instead of a tensor means a rank reads only its shard's bytes from the
safetensors file, never the whole tensor.
"""

from __future__ import annotations

from typing import Any

import torch


class LazySlice:
    """A view ``source[index]`` of a tensor stored elsewhere, not yet materialized.

    Contract: ``shape`` is the view's shape; ``narrow(dim, start, length)`` returns a narrower
    lazy view (like ``torch.Tensor.narrow``); ``read()`` materializes exactly the view (one read
    of the source). ``source`` is anything indexable by a tuple of slices that returns a tensor,
    e.g. safetensors' ``get_slice`` object; it must stay open until ``read()``.
    """

    def __init__(self, source: Any, shape: tuple[int, ...], index: tuple[slice, ...] | None = None) -> None:
        self.source = source
        self.shape = torch.Size(shape)
        self.index = index if index is not None else tuple(slice(0, n) for n in shape)

    def narrow(self, dim: int, start: int, length: int) -> "LazySlice":
        if not (0 <= start and start + length <= self.shape[dim]):
            raise ValueError(f"narrow({dim}, {start}, {length}) outside shape {tuple(self.shape)}")
        index = list(self.index)
        base = index[dim].start
        index[dim] = slice(base + start, base + start + length)
        shape = list(self.shape)
        shape[dim] = length
        return LazySlice(self.source, tuple(shape), tuple(index))

    def read(self) -> torch.Tensor:
        return self.source[self.index]


def as_tensor(x: torch.Tensor | LazySlice) -> torch.Tensor:
    """Materialize a `LazySlice` (a tensor is returned as is)."""
    return x.read() if isinstance(x, LazySlice) else x
