"""The attention-backend contract and the per-step description every backend plans from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from twinserve.engine.kv_pool import KVPool


@dataclass
class AttentionInputs:
    """Host-side description of one step's attention, in batch-row order.

    Row ``i`` has ``qo_lens[i]`` new tokens (contiguous in the flattened token dimension) and
    attends to ``kv_lens[i]`` tokens (its cached context plus the new ones, causally). Its pages
    are ``page_indices[page_indptr[i]:page_indptr[i+1]]`` and its last page holds
    ``last_page_len[i]`` tokens (1..page_size). ``decode_only`` means every ``qo_lens[i] == 1``.
    All arrays are int32 numpy.
    """

    qo_lens: np.ndarray
    kv_lens: np.ndarray
    page_indptr: np.ndarray
    page_indices: np.ndarray
    last_page_len: np.ndarray
    decode_only: bool

    @property
    def batch_size(self) -> int:
        return int(self.qo_lens.size)

    @property
    def num_tokens(self) -> int:
        return int(self.qo_lens.sum())


class AttentionBackend(Protocol):
    """Paged attention over a ``KVPool``.

    Contract: ``plan(inputs)`` is called once per step before the forward; then for every layer
    ``forward(layer, q, k, v, slots)`` first stores ``k``/``v`` [T, Hk, D] at the flat pool
    ``slots`` [T], then returns the causal attention output [T, Hq, D] of ``q`` [T, Hq, D] over
    each row's pages, into ``out`` [T, Hq, D] when given (the piecewise CUDA graphs' buffer).
    Backends with ``supports_cuda_graphs`` also implement
    ``graph_batch_sizes`` capture/replay hooks used by the runner (see flashinfer_backend.py).
    """

    name: str
    supports_cuda_graphs: bool

    def plan(self, inputs: AttentionInputs) -> None: ...

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                slots: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor: ...


@dataclass(frozen=True)
class AttentionSpec:
    """What a backend needs to know about the model and pool at construction."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    pool: KVPool
    max_batch_size: int
    max_pages_per_seq: int
