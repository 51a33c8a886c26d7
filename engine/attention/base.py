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

    @classmethod
    def from_lengths(cls, qo_lens: np.ndarray, kv_lens: np.ndarray, page_indices: np.ndarray, page_size: int,
                     decode_only: bool) -> "AttentionInputs":
        """Rows of ``qo_lens`` new tokens over ``kv_lens`` tokens, row i on the next
        ``ceil(kv_lens[i] / page_size)`` pages of ``page_indices``: the page offsets and last
        page lengths follow from the lengths."""
        kv = np.asarray(kv_lens, dtype=np.int64)
        pages = -(-kv // page_size)
        return cls(qo_lens=np.asarray(qo_lens).astype(np.int32), kv_lens=kv.astype(np.int32),
                   page_indptr=np.concatenate([[0], np.cumsum(pages)]).astype(np.int32),
                   page_indices=np.asarray(page_indices).astype(np.int32),
                   last_page_len=(kv - (pages - 1) * page_size).astype(np.int32), decode_only=decode_only)

    @property
    def batch_size(self) -> int:
        return int(self.qo_lens.size)

    @property
    def num_tokens(self) -> int:
        return int(self.qo_lens.sum())

    def pad_rows(self, rows: int, scratch_page: int) -> "AttentionInputs":
        """These inputs with rows appended up to ``rows``: each has no new token and one
        context token on ``scratch_page``, so it adds no query and no work (the fixed batch
        size of a captured prefill wrapper). ``rows`` below the batch size is an error."""
        pad = rows - self.batch_size
        if pad < 0:
            raise ValueError(f"cannot pad a batch of {self.batch_size} rows to {rows}")
        if pad == 0:
            return self
        one = np.ones(pad, np.int32)
        return AttentionInputs(
            qo_lens=np.concatenate([self.qo_lens, np.zeros(pad, np.int32)]),
            kv_lens=np.concatenate([self.kv_lens, one]),
            page_indptr=np.concatenate([self.page_indptr,
                                        self.page_indptr[-1] + np.arange(1, pad + 1, dtype=np.int32)]),
            page_indices=np.concatenate([self.page_indices, np.full(pad, scratch_page, np.int32)]),
            last_page_len=np.concatenate([self.last_page_len, one]),
            decode_only=False)


class AttentionBackend(Protocol):
    """Paged attention over a ``KVPool``.

    Contract: ``plan(inputs)`` is called once per step before the forward; then for every layer
    ``forward(layer, q, k, v, slots)`` first stores ``k``/``v`` [T, Hk, D] at the flat ``pool``
    ``slots`` [T] (``slots=None``: the layer's kernels stored them already), then returns the
    causal attention output [T, Hq, D] of ``q`` [T, Hq, D] over each row's pages, into ``out``
    [T, Hq, D] when given (the piecewise CUDA graphs' buffer).
    Backends with ``supports_cuda_graphs`` also implement
    the decode-graph hooks ``init_graphs``/``plan_graph`` and the token-graph hooks
    ``init_token_graphs``/``plan_token_graph`` used by the runner (see flashinfer_backend.py).
    Rows with no new token (``qo_lens[i] == 0``, from `AttentionInputs.pad_rows`) produce nothing.
    """

    name: str
    supports_cuda_graphs: bool
    pool: KVPool

    def plan(self, inputs: AttentionInputs) -> None: ...

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                slots: torch.Tensor | None, out: torch.Tensor | None = None) -> torch.Tensor: ...


@dataclass(frozen=True)
class AttentionSpec:
    """What a backend needs to know about the model and pool at construction."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    pool: KVPool
    max_pages_per_seq: int
