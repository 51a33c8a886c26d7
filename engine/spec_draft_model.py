"""``spec.draft=PATH``: a separate draft checkpoint (same vocabulary as the target) with its own
paged KV cache.

The draft keeps, per running request, the KV of the request's known tokens but the last in a
pool of its own (as many token slots as the target's pool, pages from its own free list, side
pages for its proposals). Before a step it catches up on the tokens it has not seen (the prompt
at first, then the accepted tokens: one eager forward over all the step's decodes), then
proposes for them in one batch (a `PagedDraft` over the draft's pool: CUDA graphs when the
engine replays graphs). A request that is no longer running has its pages freed at the next
step; one that does not fit the free pages does not speculate in that step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from twinserve.core.errors import UserError
from twinserve.core.request import Req, ReqState
from twinserve.engine.attention.base import AttentionSpec
from twinserve.engine.kv_pool import KVGeometry, KVPool
from twinserve.engine.loader import load_weights
from twinserve.engine.model_config import ModelConfig
from twinserve.engine.models.decoder import CausalLM
from twinserve.engine.models.registry import build_model
from twinserve.engine.spec_draft import DRAFTS, DraftRuntime, PreparedProposals
from twinserve.engine.spec_draft_paged import side_pages


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

    def __init__(self, model: CausalLM, pool: KVPool, arg: str, runtime: DraftRuntime) -> None:
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
                           pool.device, side_pages=side_pages(runtime.k, g.page_size, runtime.max_running))
        spec = AttentionSpec(mc.num_heads, mc.num_kv_heads, mc.head_dim, dtype, self.pool,
                             runtime.attn_spec.max_pages_per_seq)
        self.paged = runtime.paged(self.model, mc.num_layers, self.pool, spec)
        self._free = list(range(g.num_pages))
        self._kv: dict[int, _DraftKV] = {}
        self._ready = PreparedProposals()

    def prepare(self, reqs: list[Req], k: int) -> None:
        for rid in [rid for rid, st in self._kv.items() if st.req.state is not ReqState.RUNNING]:
            self._release(rid)
        ok = self._catch_up(reqs)
        self._ready.fill(ok, self.propose(ok, k) if ok else ())

    def __call__(self, r: Req, k: int) -> np.ndarray:
        hit = self._ready.get(r, k)
        if hit is not None:
            return hit
        if not self._catch_up([r]):
            return np.zeros(0, dtype=np.int32)
        return self.propose([r], k)[0]

    def propose(self, reqs: list[Req], k: int) -> np.ndarray:
        """[len(reqs), k] int32 proposals of requests caught up (`_catch_up`)."""
        return self.paged.propose([self._kv[r.rid].pages for r in reqs], [self._kv[r.rid].computed for r in reqs],
                                  [int(r.tokens[r.num_tokens - 1]) for r in reqs], k)

    def _release(self, rid: int) -> None:
        self._free.extend(self._kv.pop(rid).pages)

    def _catch_up(self, reqs: list[Req]) -> list[Req]:
        """Give each request's known tokens but the last KV in the draft pool, in one forward;
        returns those that fit (the others' pages are freed)."""
        ok, todo = [], []
        ps = self.pool.page_size
        for r in reqs:
            st = self._kv.get(r.rid)
            if st is None or st.req is not r:
                if st is not None:
                    self._release(r.rid)
                st = self._kv[r.rid] = _DraftKV(r)
            end = r.num_tokens - 1
            need = -(-end // ps) - len(st.pages)
            if need > len(self._free):
                self._release(r.rid)
                continue
            if need > 0:
                st.pages.extend(self._free[-need:])
                del self._free[-need:]
            ok.append(r)
            if st.computed < end:
                todo.append(st)
        if todo:
            self.paged.extend([st.pages for st in todo], [st.computed for st in todo],
                              [st.req.tokens[st.computed: st.req.num_tokens - 1] for st in todo])
            for st in todo:
                st.computed = st.req.num_tokens - 1
        return ok
