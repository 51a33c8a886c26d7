"""``spec.draft=PATH``: a separate draft checkpoint (same vocabulary as the target) with its own
paged KV cache.

The draft keeps, per running request, the KV of the request's known tokens but the last in a
pool of its own (as many token slots as the target's pool, pages from its own free list). Before
a step it catches up on the tokens it has not seen (the prompt at first, then the accepted
tokens: one causal forward per request), then proposes for the step's decodes in one batch
(`propose_batch`, the proposals' K/V kept in local tensors). A request that is no longer
running has its pages freed at the next step; one that does not fit the free pages does not
speculate in that step. Eager forwards with plain SDPA attention.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from twinserve.core.errors import UserError
from twinserve.core.request import Req, ReqState
from twinserve.engine.kv_pool import KVGeometry, KVPool
from twinserve.engine.loader import load_weights
from twinserve.engine.model_config import ModelConfig
from twinserve.engine.models.decoder import CausalLM
from twinserve.engine.models.registry import build_model
from twinserve.engine.spec_draft import DRAFTS, PreparedProposals, _slots, propose_batch


@dataclass
class _DraftKV:
    """One request's pages in the draft pool and how many of its tokens have KV there."""

    req: Req
    pages: list[int] = field(default_factory=list)
    computed: int = 0


@DRAFTS.register("path")
class ModelDraft:
    """`Draft` of a separate checkpoint at ``arg``. Invariant: ``_free`` and the pages of
    ``_kv`` partition the draft pool's pages."""

    def __init__(self, model: CausalLM, pool: KVPool, arg: str) -> None:
        path = Path(arg)
        if not (path / "config.json").is_file():
            raise UserError(f"spec.draft={arg}: not a checkpoint folder (no config.json)", key="spec.draft")
        mc = ModelConfig.from_dir(path)
        if mc.vocab_size != model.config.vocab_size:
            raise UserError(f"spec.draft={arg}: vocabulary of {mc.vocab_size} tokens, the target has "
                            f"{model.config.vocab_size}", key="spec.draft")
        kernels = model.model.layers[0].self_attn.kernels
        dtype = pool.geom.dtype
        self.model = build_model(mc, kernels, dtype, pool.device, max_positions=int(model.rope_cache.shape[0]))
        load_weights(self.model, path)
        g = pool.geom
        self.pool = KVPool(KVGeometry(mc.num_layers, g.num_pages, g.page_size, mc.num_kv_heads, mc.head_dim, dtype),
                           pool.device)
        self._free = list(range(g.num_pages))
        self._kv: dict[int, _DraftKV] = {}
        self._ready = PreparedProposals()

    def prepare(self, reqs: list[Req], k: int) -> None:
        for rid in [rid for rid, st in self._kv.items() if st.req.state is not ReqState.RUNNING]:
            self._release(rid)
        ok = [r for r in reqs if self._catch_up(r)]
        self._ready.fill(ok, self.propose(ok, k) if ok else ())

    def __call__(self, r: Req, k: int) -> np.ndarray:
        hit = self._ready.get(r, k)
        if hit is not None:
            return hit
        if not self._catch_up(r):
            return np.zeros(0, dtype=np.int32)
        return self.propose([r], k)[0]

    def propose(self, reqs: list[Req], k: int) -> np.ndarray:
        ps = self.pool.page_size
        return propose_batch(self.model, len(self.model.model.layers), self.pool,
                             [_slots(self._kv[r.rid].pages, self._kv[r.rid].computed, ps) for r in reqs],
                             [int(r.tokens[r.num_tokens - 1]) for r in reqs], k)

    def _release(self, rid: int) -> None:
        self._free.extend(self._kv.pop(rid).pages)

    def _catch_up(self, r: Req) -> bool:
        """Give ``r``'s known tokens but the last KV in the draft pool; False (its pages freed)
        when the free pages fall short."""
        st = self._kv.get(r.rid)
        if st is None or st.req is not r:
            if st is not None:
                self._release(r.rid)
            st = self._kv[r.rid] = _DraftKV(r)
        end = r.num_tokens - 1
        ps = self.pool.page_size
        need = -(-end // ps) - len(st.pages)
        if need > len(self._free):
            self._release(r.rid)
            return False
        if need > 0:
            st.pages.extend(self._free[-need:])
            del self._free[-need:]
        if st.computed < end:
            self._forward(st, r.tokens[st.computed:end], st.computed)
            st.computed = end
        return True

    @torch.inference_mode()
    def _forward(self, st: _DraftKV, tokens: np.ndarray, start: int) -> None:
        """Run ``tokens`` (positions ``start..``) through the draft, storing their K/V."""
        dev = self.pool.device
        n = int(tokens.size)
        end = start + n
        all_slots = torch.from_numpy(_slots(st.pages, end, self.pool.page_size)).to(dev)
        new = all_slots[start:]
        pos = torch.arange(start, end, device=dev)
        mask = torch.arange(end, device=dev)[None, :] <= pos[:, None]
        dm = self.model.model
        h = dm.embed_tokens(torch.from_numpy(np.asarray(tokens, dtype=np.int64)).to(dev))
        residual = None
        for i, layer in enumerate(dm.layers):
            qkv, residual = layer.pre(h, residual, pos)
            q, kk, vv = layer.self_attn.heads(qkv)
            self.pool.write(i, new, kk, vv)
            kc, vc = self.pool.k(i), self.pool.v(i)
            keys = kc.view(-1, *kc.shape[2:])[all_slots]
            vals = vc.view(-1, *vc.shape[2:])[all_slots]
            group = q.shape[1] // keys.shape[1]
            if group > 1:
                keys = keys.repeat_interleave(group, dim=1)
                vals = vals.repeat_interleave(group, dim=1)
            o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], keys.transpose(0, 1)[None].to(q.dtype),
                                               vals.transpose(0, 1)[None].to(q.dtype), attn_mask=mask)
            h, residual = layer.post(o[0].transpose(0, 1).reshape(n, -1), residual)
