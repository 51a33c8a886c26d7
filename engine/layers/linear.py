"""Linear layers with tensor-parallel sharding and HF-weight loaders.

Every parameter carries a ``weight_loader(param, loaded, shard_id)`` attribute: the loader hands
it one full (unsharded) checkpoint tensor and the layer copies this rank's slice into place.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn
import torch.nn.functional as F

from twinserve.engine.layers.lazy_tensor import LazySlice, as_tensor
from twinserve.engine.layers.parallel import SINGLE, TPGroup

Loaded = torch.Tensor | LazySlice


def _set_loader(param: nn.Parameter, fn: Any) -> None:
    param.weight_loader = fn  # type: ignore[attr-defined]


def default_weight_loader(param: torch.Tensor, loaded: Loaded, shard_id: Any = None) -> None:
    """Copy a full tensor into an unsharded parameter (shapes must match exactly)."""
    if param.shape != loaded.shape:
        raise ValueError(f"shape mismatch: parameter {tuple(param.shape)} vs checkpoint {tuple(loaded.shape)}")
    param.data.copy_(as_tensor(loaded))


class ColumnParallelLinear(nn.Module):
    """``y = x W^T (+ b)`` with the output dimension split across ranks; no communication.

    The parameter holds rows ``[rank*out/tp, (rank+1)*out/tp)`` of the full weight. Subclasses
    that fuse several checkpoint matrices (QKV, gate/up) declare ``output_sizes`` (full sizes of
    each part, in order) and map a ``shard_id`` to a part; ``shard_start(part)`` is the first
    checkpoint row of this rank's slice of that part. Loaders accept a tensor or a `LazySlice`
    (only the rank's rows are read).
    """

    def __init__(self, in_features: int, output_sizes: Sequence[int], bias: bool = False,
                 tp: TPGroup = SINGLE, dtype: torch.dtype | None = None,
                 local_sizes: Sequence[int] | None = None) -> None:
        super().__init__()
        self.tp = tp
        self.in_features = in_features
        self.output_sizes = list(output_sizes)
        if local_sizes is None:
            local_sizes = [tp.shard(s, "output size") for s in self.output_sizes]
        self.local_sizes = list(local_sizes)
        out_local = sum(self.local_sizes)
        self.weight = nn.Parameter(torch.empty(out_local, in_features, dtype=dtype), requires_grad=False)
        _set_loader(self.weight, self.weight_loader)
        if bias:
            self.bias = nn.Parameter(torch.empty(out_local, dtype=dtype), requires_grad=False)
            _set_loader(self.bias, self.weight_loader)
        else:
            self.register_parameter("bias", None)

    def part_index(self, shard_id: Any) -> int:
        return 0 if shard_id is None else int(shard_id)

    def shard_start(self, part: int) -> int:
        return self.tp.rank * self.local_sizes[part]

    def weight_loader(self, param: nn.Parameter, loaded: Loaded, shard_id: Any = None) -> None:
        part = self.part_index(shard_id)
        full, local = self.output_sizes[part], self.local_sizes[part]
        if loaded.shape[0] != full:
            raise ValueError(f"part {shard_id}: checkpoint has {loaded.shape[0]} rows, expected {full}")
        src = loaded.narrow(0, self.shard_start(part), local)
        offset = sum(self.local_sizes[:part])
        param.data.narrow(0, offset, local).copy_(as_tensor(src))

    def forward(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``x W^T (+ b)``; into ``out`` ([T, out_local], contiguous) when given."""
        if out is None:
            return F.linear(x, self.weight, self.bias)
        if self.bias is None:
            return torch.mm(x, self.weight.t(), out=out)
        return torch.addmm(self.bias, x, self.weight.t(), out=out)


class MergedColumnParallelLinear(ColumnParallelLinear):
    """Several column-parallel matrices stored as one (e.g. gate_proj and up_proj, shard ids 0, 1)."""


def kv_head_layout(num_kv_heads: int, tp: TPGroup) -> tuple[int, int]:
    """``(first kv head, number of kv heads)`` held by this rank.

    With ``num_kv_heads >= tp`` the heads are split evenly (``num_kv_heads % tp == 0``); with
    fewer kv heads than ranks each rank holds one, replicated on ``tp / num_kv_heads`` ranks
    (``tp % num_kv_heads == 0``): rank r holds head ``r // (tp / num_kv_heads)``, the one its
    query heads ``[r*Hq/tp, (r+1)*Hq/tp)`` attend to under GQA.
    """
    if num_kv_heads >= tp.size:
        local = tp.shard(num_kv_heads, "num_kv_heads")
        return tp.rank * local, local
    if tp.size % num_kv_heads:
        raise ValueError(f"tp_size {tp.size} is neither a divisor nor a multiple of num_kv_heads {num_kv_heads}")
    return tp.rank // (tp.size // num_kv_heads), 1


class QKVParallelLinear(ColumnParallelLinear):
    """Fused q/k/v projection, heads split across ranks; shard ids ``"q"``, ``"k"``, ``"v"``.

    Each rank holds ``num_heads/tp`` query heads and the key/value heads those attend to:
    ``num_kv_heads/tp`` of them, or one replicated head when there are fewer kv heads than ranks
    (see `kv_head_layout`).
    """

    _PARTS = {"q": 0, "k": 1, "v": 2}

    def __init__(self, hidden_size: int, head_dim: int, num_heads: int, num_kv_heads: int,
                 bias: bool = False, tp: TPGroup = SINGLE, dtype: torch.dtype | None = None) -> None:
        local_heads = tp.shard(num_heads, "num_heads")
        kv_start, local_kv = kv_head_layout(num_kv_heads, tp)
        q, kv = num_heads * head_dim, num_kv_heads * head_dim
        super().__init__(hidden_size, [q, kv, kv], bias=bias, tp=tp, dtype=dtype,
                         local_sizes=[local_heads * head_dim, local_kv * head_dim, local_kv * head_dim])
        self.head_dim = head_dim
        self.local_heads = local_heads
        self.local_kv_heads = local_kv
        self.kv_head_start = kv_start

    def part_index(self, shard_id: Any) -> int:
        return self._PARTS[shard_id]

    def shard_start(self, part: int) -> int:
        if part == 0:
            return self.tp.rank * self.local_sizes[0]
        return self.kv_head_start * self.head_dim


class RowParallelLinear(nn.Module):
    """``y = x W^T (+ b)`` with the input dimension split across ranks, then all-reduced.

    The parameter holds columns ``[rank*in/tp, (rank+1)*in/tp)``; the input is this rank's slice
    of the activations (the output of a column-parallel layer). The bias is added once, after
    the reduction.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = False, tp: TPGroup = SINGLE,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.tp = tp
        self.in_local = tp.shard(in_features, "input size")
        self.weight = nn.Parameter(torch.empty(out_features, self.in_local, dtype=dtype), requires_grad=False)
        _set_loader(self.weight, self.weight_loader)
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features, dtype=dtype), requires_grad=False)
            _set_loader(self.bias, default_weight_loader)
        else:
            self.register_parameter("bias", None)

    def weight_loader(self, param: nn.Parameter, loaded: Loaded, shard_id: Any = None) -> None:
        src = loaded.narrow(1, self.tp.rank * self.in_local, self.in_local)
        default_weight_loader(param, src)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight)
        if self.tp.size > 1:
            y = self.tp.all_reduce(y)
        if self.bias is not None:
            y = y + self.bias
        return y
