"""Vocab-parallel token embedding and LM head."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
import torch.nn.functional as F

from twinserve.engine.layers.lazy_tensor import LazySlice, as_tensor
from twinserve.engine.layers.parallel import SINGLE, TPGroup


class VocabParallelEmbedding(nn.Module):
    """Token embedding whose vocabulary rows are split across ranks.

    Rank r holds rows ``[r*V/tp, (r+1)*V/tp)`` (the vocabulary is padded up to a multiple of
    ``tp`` if needed; padded rows are zero and never looked up). Ids outside the local range
    contribute zeros, and the all-reduce sums the partial lookups.
    """

    def __init__(self, vocab_size: int, hidden_size: int, tp: TPGroup = SINGLE,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.tp = tp
        self.vocab_size = vocab_size
        self.padded_vocab = -(-vocab_size // tp.size) * tp.size
        self.local_vocab = self.padded_vocab // tp.size
        self.vocab_start = tp.rank * self.local_vocab
        self.weight = nn.Parameter(torch.empty(self.local_vocab, hidden_size, dtype=dtype), requires_grad=False)
        self.weight.weight_loader = self.weight_loader  # type: ignore[attr-defined]

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor | LazySlice, shard_id: Any = None) -> None:
        if loaded.shape[0] != self.vocab_size:
            raise ValueError(f"embedding has {loaded.shape[0]} rows, expected vocab_size {self.vocab_size}")
        end = min(self.vocab_start + self.local_vocab, self.vocab_size)
        n = max(0, end - self.vocab_start)
        param.data.zero_()
        if n:
            param.data[:n].copy_(as_tensor(loaded.narrow(0, self.vocab_start, n)))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.tp.size == 1:
            return F.embedding(ids, self.weight)
        local = ids - self.vocab_start
        mask = (local < 0) | (local >= self.local_vocab)
        out = F.embedding(local.masked_fill(mask, 0), self.weight)
        out = out.masked_fill(mask.unsqueeze(-1), 0)
        return self.tp.all_reduce(out)


class ParallelLMHead(VocabParallelEmbedding):
    """Output projection over a vocab-parallel weight; logits are all-gathered to full vocab.

    When embeddings are tied, the model points ``weight`` at the embedding's parameter, so both
    share one tensor (and one shard).
    """

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        logits = F.linear(hidden, self.weight)
        if self.tp.size > 1:
            logits = self.tp.all_gather(logits)
        return logits[..., : self.vocab_size] if self.padded_vocab != self.vocab_size else logits
