"""`KVPool`: the preallocated paged KV cache that the memory policy's page ids address."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class KVGeometry:
    """Shape of the pool: ``num_pages`` usable pages of ``page_size`` token slots per layer."""

    num_layers: int
    num_pages: int
    page_size: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype

    @property
    def bytes_per_page(self) -> int:
        elem = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.page_size * self.num_kv_heads * self.head_dim * elem


class KVPool:
    """One tensor ``[num_layers, 2, num_pages + 1 + side_pages, page_size, num_kv_heads, head_dim]``.

    Per layer, ``k(layer)`` and ``v(layer)`` are contiguous ``[pages, page_size, heads, dim]``
    tensors: FlashInfer's "NHD" paged layout, passed as a ``(k, v)`` tuple. Page ``p`` in
    ``[0, num_pages)`` is the memory policy's page id ``p``; token position ``t`` of a request
    lives in page ``pages[t // page_size]`` at slot ``t % page_size``, i.e. flat slot
    ``page * page_size + t % page_size``. The page after the usable ones (``scratch_page``) is never
    handed out: padded CUDA-graph rows write and read there. ``side_pages`` more pages follow it,
    outside the memory policy's ids too: a self-speculative draft writes the K/V of the
    positions it proposes over there (engine/spec_draft_paged.py). With ``fused_store`` (CUDA with triton), `write`
    stores k and v whose token rows are contiguous with one Triton launch
    (`engine.triton.kv_store`).
    """

    def __init__(self, geom: KVGeometry, device: torch.device | str, fused_store: bool = False,
                 side_pages: int = 0) -> None:
        self.geom = geom
        self._store = None
        if fused_store:
            from twinserve.engine.triton import kv_store

            self._store = kv_store
        self.device = torch.device(device)
        self.scratch_page = geom.num_pages
        self.side_pages = range(geom.num_pages + 1, geom.num_pages + 1 + side_pages)
        total = geom.num_pages + 1 + side_pages
        self.buffer = torch.zeros(
            (geom.num_layers, 2, total, geom.page_size, geom.num_kv_heads, geom.head_dim),
            dtype=geom.dtype, device=self.device)
        slots = total * geom.page_size
        self._k_flat = [self.buffer[i, 0].view(slots, geom.num_kv_heads, geom.head_dim)
                        for i in range(geom.num_layers)]
        self._v_flat = [self.buffer[i, 1].view(slots, geom.num_kv_heads, geom.head_dim)
                        for i in range(geom.num_layers)]
        self._kv_flat = [self.buffer[i].view(2, slots, geom.num_kv_heads, geom.head_dim)
                         for i in range(geom.num_layers)]
        if self._store is not None:  # compile the kernel now, not inside a CUDA-graph capture
            row = torch.zeros((1, geom.num_kv_heads, geom.head_dim), dtype=geom.dtype, device=self.device)
            at = torch.tensor([self.scratch_page * geom.page_size], dtype=torch.int64, device=self.device)
            self._store.store_kv(self._k_flat[0], self._v_flat[0], at, row, row)

    @property
    def page_size(self) -> int:
        return self.geom.page_size

    def k(self, layer: int) -> torch.Tensor:
        return self.buffer[layer, 0]

    def v(self, layer: int) -> torch.Tensor:
        return self.buffer[layer, 1]

    def flat(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``layer``'s keys and values as contiguous ``[slots, heads, dim]`` (flat slot ids)."""
        return self._k_flat[layer], self._v_flat[layer]

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store new keys/values ``[T, heads, dim]`` at flat ``slots`` [T] (int64, on device).
        When ``v`` lies right after ``k`` in one buffer with the same strides (the k and v parts
        of a fused QKV output), both are stored with a single copy."""
        st = self._store
        if (st is not None and k.dtype == v.dtype == self.geom.dtype and st.rows_are_contiguous(k)
                and st.rows_are_contiguous(v)):
            st.store_kv(self._k_flat[layer], self._v_flat[layer], slots, k, v)
            return
        both = _adjacent_pair(k, v)
        if both is not None and k.dtype == self.geom.dtype:
            self._kv_flat[layer].index_copy_(1, slots, both)
            return
        self._k_flat[layer].index_copy_(0, slots, k.to(self.geom.dtype))
        self._v_flat[layer].index_copy_(0, slots, v.to(self.geom.dtype))

    def nbytes(self) -> int:
        return self.buffer.numel() * self.buffer.element_size()


@dataclass(frozen=True)
class KVWrite:
    """Where one layer's new keys and values go: the rotated k that a RoPE kernel is given and
    ``v`` (both [T, Hk*D], rows of a fused QKV output) belong at flat ``slots`` [T] (int64, on the
    device) of ``pool``'s ``layer``. Kernels that can store them in the RoPE launch read `caches`;
    the others call `write` after rotating."""

    pool: KVPool
    layer: int
    slots: torch.Tensor
    v: torch.Tensor

    def caches(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pool.flat(self.layer)

    def write(self, k: torch.Tensor) -> None:
        t, d = k.shape[0], self.pool.geom.head_dim
        self.pool.write(self.layer, self.slots, k.view(t, -1, d), self.v.view(t, -1, d))


def _adjacent_pair(k: torch.Tensor, v: torch.Tensor) -> torch.Tensor | None:
    """``[2, T, heads, dim]`` over the memory of ``k`` and ``v`` when ``v`` starts where ``k``'s
    rows end (``heads * dim`` elements later) with the same shape and strides, else None."""
    if k.dim() != 3 or k.shape != v.shape or k.stride() != v.stride() or k.dtype != v.dtype:
        return None
    t, h, d = k.shape
    if k.stride(2) != 1 or k.stride(1) != d or k.untyped_storage().data_ptr() != v.untyped_storage().data_ptr():
        return None
    gap = h * d
    if v.storage_offset() - k.storage_offset() != gap or k.stride(0) < 2 * gap:
        return None
    return k.as_strided((2, t, h, d), (gap, k.stride(0), d, 1))
