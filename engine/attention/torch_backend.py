"""Paged attention in plain torch: gathers each row's pages and runs SDPA. Any device."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from twinserve.engine.attention.base import AttentionInputs, AttentionSpec


class TorchAttention:
    """Reference backend: one SDPA call per batch row over its gathered pages.

    Exact and simple, slow for large batches; used on CPU (CI) and as a GPU cross-check.
    Not CUDA-graph capturable (per-row Python loop with data-dependent shapes).
    """

    name = "torch"
    supports_cuda_graphs = False

    def __init__(self, spec: AttentionSpec) -> None:
        self.spec = spec
        self.pool = spec.pool
        self._rows: list[tuple[int, int, int, torch.Tensor]] = []

    def plan(self, inputs: AttentionInputs) -> None:
        dev = self.pool.device
        rows = []
        qo = 0
        indices = torch.from_numpy(inputs.page_indices.astype("int64")).to(dev)
        for i in range(inputs.batch_size):
            n, kv = int(inputs.qo_lens[i]), int(inputs.kv_lens[i])
            pages = indices[int(inputs.page_indptr[i]):int(inputs.page_indptr[i + 1])]
            rows.append((qo, n, kv, pages))
            qo += n
        self._rows = rows

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                slots: torch.Tensor | None, out: torch.Tensor | None = None) -> torch.Tensor:
        if slots is not None:
            self.pool.write(layer, slots, k, v)
        kc, vc = self.pool.k(layer), self.pool.v(layer)
        out = torch.empty_like(q) if out is None else out
        hq, hk, d = q.shape[1], kc.shape[2], q.shape[2]
        group = hq // hk
        for qo, n, kv, pages in self._rows:
            if n == 0:  # a padding row (AttentionInputs.pad_rows): no query
                continue
            keys = kc.index_select(0, pages).reshape(-1, hk, d)[:kv]
            vals = vc.index_select(0, pages).reshape(-1, hk, d)[:kv]
            if group > 1:
                keys = keys.repeat_interleave(group, dim=1)
                vals = vals.repeat_interleave(group, dim=1)
            qi = q[qo:qo + n].transpose(0, 1)  # [H, n, D]
            # query j sits at absolute position kv - n + j and sees keys 0..kv-n+j
            qpos = torch.arange(kv - n, kv, device=q.device)
            mask = torch.arange(kv, device=q.device)[None, :] <= qpos[:, None]
            o = F.scaled_dot_product_attention(qi.unsqueeze(0), keys.transpose(0, 1).unsqueeze(0).to(q.dtype),
                                               vals.transpose(0, 1).unsqueeze(0).to(q.dtype),
                                               attn_mask=mask)
            out[qo:qo + n] = o[0].transpose(0, 1)
        return out
