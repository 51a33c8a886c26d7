"""Draft models for speculative decoding (``spec.method=draft``), built by name (`DRAFTS`).

``layers:N`` is self-speculation: the target's first N decoder layers, its final norm and its
LM head, sharing the target's weights, propose ``k`` tokens greedily. Its KV cache is the
target's: the first N layers of the target compute exactly the keys and values the draft would
for the same tokens, so the draft reads them from the request's pages (positions with KV: all
known tokens but the last) and keeps the K/V of the few positions it proposes over in local
tensors, discarded after the proposal; the pool is never written. The verify step then
computes and stores every position's KV with the full model.

The proposal runs eagerly, one request at a time, with plain SDPA attention.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from twinserve.core.errors import UserError
from twinserve.core.registry import Registry
from twinserve.core.request import Req
from twinserve.core.spec import SpecConfig
from twinserve.engine.kv_pool import KVPool
from twinserve.engine.models.decoder import CausalLM

DRAFTS: Registry[Callable[[Req, int], np.ndarray]] = Registry("speculative draft")


@DRAFTS.register("layers")
class LayerDraft:
    """``propose(r, k)``: ``k`` greedy tokens of the target's first ``num_layers`` layers after
    ``r``'s known tokens. Contract: ``r.num_computed == r.num_tokens - 1`` (a decode) and
    ``r.pages`` hold the KV of positions ``< r.num_computed``; reads the pool, writes nothing."""

    def __init__(self, model: CausalLM, pool: KVPool, arg: str) -> None:
        n_all = len(model.model.layers)
        if not arg.isdigit() or not 1 <= int(arg) <= n_all:
            raise UserError(f"spec.draft=layers:N needs 1 <= N <= {n_all} (the model's layers), got 'layers:{arg}'",
                            key="spec.draft")
        self.model = model
        self.pool = pool
        self.num_layers = int(arg)

    def __call__(self, r: Req, k: int) -> np.ndarray:
        return self.propose(r, k)

    @torch.inference_mode()
    def propose(self, r: Req, k: int) -> np.ndarray:
        dm = self.model.model
        layers = dm.layers[: self.num_layers]
        dev = self.pool.device
        ctx = r.num_computed
        ps = self.pool.page_size
        pages = torch.as_tensor(r.pages[: -(-ctx // ps)], dtype=torch.int64, device=dev)
        past = []
        for i in range(self.num_layers):
            kk = self.pool.k(i).index_select(0, pages).flatten(0, 1)[:ctx]
            vv = self.pool.v(i).index_select(0, pages).flatten(0, 1)[:ctx]
            past.append([kk, vv])
        tok = int(r.tokens[r.num_tokens - 1])
        out = np.empty(k, dtype=np.int32)
        for j in range(k):
            ids = torch.tensor([tok], dtype=torch.int64, device=dev)
            pos = torch.tensor([ctx + j], dtype=torch.int64, device=dev)
            h = dm.embed_tokens(ids)
            residual = None
            for i, layer in enumerate(layers):
                qkv, residual = layer.pre(h, residual, pos)
                q, kn, vn = layer.self_attn.heads(qkv)
                kv = past[i]
                kv[0] = torch.cat([kv[0], kn.to(kv[0].dtype)])
                kv[1] = torch.cat([kv[1], vn.to(kv[1].dtype)])
                o = _attend(q, kv[0], kv[1])
                h, residual = layer.post(o.reshape(1, -1), residual)
            h, _ = dm.norm(h, residual)
            tok = int(self.model.compute_logits(h).argmax(dim=-1).item())
            out[j] = tok
        return out


def _attend(q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor) -> torch.Tensor:
    """One query position [1, Hq, D] over every key [L, Hk, D] (no mask: all are earlier)."""
    group = q.shape[1] // keys.shape[1]
    if group > 1:
        keys = keys.repeat_interleave(group, dim=1)
        vals = vals.repeat_interleave(group, dim=1)
    o = F.scaled_dot_product_attention(q.transpose(0, 1).unsqueeze(0), keys.transpose(0, 1).unsqueeze(0).to(q.dtype),
                                       vals.transpose(0, 1).unsqueeze(0).to(q.dtype))
    return o[0].transpose(0, 1)


def build_draft(cfg: SpecConfig, model: CausalLM, pool: KVPool) -> Callable[[Req, int], np.ndarray]:
    """The proposer of ``cfg.draft`` (``kind:arg``) on the engine's model and pool."""
    kind, _, arg = cfg.draft.partition(":")
    if kind not in DRAFTS:
        raise UserError(f"spec.draft '{cfg.draft}': known forms are {', '.join(k + ':N' for k in DRAFTS.names())}",
                        key="spec.draft")
    return DRAFTS.create(kind, model=model, pool=pool, arg=arg)
