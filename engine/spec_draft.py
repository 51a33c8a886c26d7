"""Draft models for speculative decoding (``spec.method=draft``), built by name (`DRAFTS`).

``layers:N`` is self-speculation: the target's first N decoder layers, its final norm and its
LM head, sharing the target's weights, propose ``k`` tokens greedily. Its KV cache is the
target's: the first N layers of the target compute exactly the keys and values the draft would
for the same tokens, so the draft reads them from the request's pages (positions with KV: all
known tokens but the last) and keeps the K/V of the few positions it proposes over in local
tensors, discarded after the proposal; the pool is never written. The verify step then
computes and stores every position's KV with the full model.

The proposal runs eagerly, the step's decodes batched together, with plain SDPA attention over
the gathered pages. A separate checkpoint (``spec.draft=PATH``) is engine/spec_draft_model.py.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from twinserve.core.errors import UserError
from twinserve.core.registry import Registry
from twinserve.core.request import Req
from twinserve.core.spec import SpecConfig
from twinserve.engine.kv_pool import KVPool
from twinserve.engine.models.decoder import CausalLM

class Draft(Protocol):
    """A draft model's proposer: ``prepare(reqs, k)`` drafts for a step's decodes in one batch,
    ``draft(r, k)`` (the call) returns up to ``k`` ids for one of them (`SpecDecoding`'s hooks)."""

    def prepare(self, reqs: list[Req], k: int) -> None: ...

    def __call__(self, r: Req, k: int) -> np.ndarray: ...


DRAFTS: Registry[Draft] = Registry("speculative draft")


class PreparedProposals:
    """Proposals made for a step's decodes at once, answered one request at a time. Invariant:
    an entry answers only the request it was made for at the token count it had then, and at
    most as many tokens as were proposed; ``fill`` replaces every entry."""

    def __init__(self) -> None:
        self._ready: dict[int, tuple[int, np.ndarray]] = {}  # rid -> (num_tokens, proposal)

    def fill(self, reqs: list[Req], proposals: Any) -> None:
        self._ready = {r.rid: (r.num_tokens, p) for r, p in zip(reqs, proposals)}

    def get(self, r: Req, k: int) -> np.ndarray | None:
        """``r``'s first ``k`` prepared tokens, or None when none were prepared for it now."""
        hit = self._ready.get(r.rid)
        if hit is not None and hit[0] == r.num_tokens and hit[1].size >= k:
            return hit[1][:k]
        return None


@DRAFTS.register("layers")
class LayerDraft:
    """``propose(reqs, k)``: ``k`` greedy tokens per request from the target's first
    ``num_layers`` layers after its known tokens, all requests in one batch (one forward of the
    N layers per proposed position, one host sync). Contract: each request is a decode
    (``num_computed == num_tokens - 1``) whose ``pages`` hold the KV of positions
    ``< num_computed``; reads the pool, writes nothing. ``prepare(reqs, k)`` proposes for a
    step's decodes at once; ``__call__(r, k)`` then answers from those proposals (a request
    not prepared, or prepared at another length, is proposed for alone)."""

    def __init__(self, model: CausalLM, pool: KVPool, arg: str) -> None:
        n_all = len(model.model.layers)
        if not arg.isdigit() or not 1 <= int(arg) <= n_all:
            raise UserError(f"spec.draft=layers:N needs 1 <= N <= {n_all} (the model's layers), got 'layers:{arg}'",
                            key="spec.draft")
        self.model = model
        self.pool = pool
        self.num_layers = int(arg)
        self._ready = PreparedProposals()

    def prepare(self, reqs: list[Req], k: int) -> None:
        self._ready.fill(reqs, self.propose(reqs, k) if reqs else ())

    def __call__(self, r: Req, k: int) -> np.ndarray:
        hit = self._ready.get(r, k)
        return hit if hit is not None else self.propose([r], k)[0]

    def propose(self, reqs: list[Req], k: int) -> np.ndarray:
        """[len(reqs), k] int32 proposals."""
        ps = self.pool.page_size
        return propose_batch(self.model, self.num_layers, self.pool,
                             [_slots(r.pages, r.num_computed, ps) for r in reqs],
                             [int(r.tokens[r.num_tokens - 1]) for r in reqs], k)


def _slots(pages: list[int], n: int, page_size: int) -> np.ndarray:
    """Flat pool slots of positions ``0..n-1`` of a request holding ``pages``."""
    pos = np.arange(n)
    return np.asarray(pages[: -(-n // page_size)], dtype=np.int64)[pos // page_size] * page_size + pos % page_size


@torch.inference_mode()
def propose_batch(model: CausalLM, num_layers: int, pool: KVPool, slots: list[np.ndarray], last: list[int],
                  k: int) -> np.ndarray:
    """``k`` greedy tokens per row from ``model``'s first ``num_layers`` layers, its final norm
    and head: row b has the KV of its positions ``0..len(slots[b])-1`` at those ``pool`` slots
    and ``last[b]`` at the next position. The proposals' own K/V stay in local tensors."""
    dm = model.model
    dev = pool.device
    ctx = np.fromiter((s.size for s in slots), np.int64, len(slots))
    width = max(int(ctx.max()), 1)
    flat = np.zeros((len(slots), width), dtype=np.int64)  # padding reads slot 0, masked out
    valid = np.zeros((len(slots), width), dtype=bool)
    for b, s in enumerate(slots):
        flat[b, : s.size] = s
        valid[b, : s.size] = True
    idx = torch.from_numpy(flat).to(dev)
    mask = torch.from_numpy(valid).to(dev)
    past = []
    for i in range(num_layers):
        kc, vc = pool.k(i), pool.v(i)
        past.append([kc.view(-1, *kc.shape[2:])[idx], vc.view(-1, *vc.shape[2:])[idx]])  # [B, L, Hk, D]
    tok = torch.tensor(last, dtype=torch.int64, device=dev)
    pos = torch.from_numpy(ctx).to(dev)
    ones = torch.ones(len(slots), 1, dtype=torch.bool, device=dev)
    out = []
    for _ in range(k):
        mask = torch.cat([mask, ones], dim=1)
        h = dm.embed_tokens(tok)
        residual = None
        for i, layer in enumerate(dm.layers[:num_layers]):
            qkv, residual = layer.pre(h, residual, pos)
            q, kn, vn = layer.self_attn.heads(qkv)
            kv = past[i]
            kv[0] = torch.cat([kv[0], kn[:, None].to(kv[0].dtype)], dim=1)
            kv[1] = torch.cat([kv[1], vn[:, None].to(kv[1].dtype)], dim=1)
            h, residual = layer.post(_attend(q, kv[0], kv[1], mask).reshape(len(slots), -1), residual)
        h, _ = dm.norm(h, residual)
        tok = model.compute_logits(h).argmax(dim=-1)
        out.append(tok)
        pos = pos + 1
    return torch.stack(out, dim=1).to(torch.int32).cpu().numpy()


def _attend(q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One query per row, q [B, Hq, D], over keys and values [B, L, Hk, D] where ``mask``
    [B, L] is true; returns [B, Hq, D]."""
    group = q.shape[1] // keys.shape[2]
    if group > 1:
        keys = keys.repeat_interleave(group, dim=2)
        vals = vals.repeat_interleave(group, dim=2)
    o = F.scaled_dot_product_attention(q[:, :, None], keys.transpose(1, 2).to(q.dtype), vals.transpose(1, 2).to(q.dtype),
                                       attn_mask=mask[:, None, None, :])
    return o[:, :, 0]


def build_draft(cfg: SpecConfig, model: CausalLM, pool: KVPool) -> Draft:
    """The proposer of ``cfg.draft`` on the engine's model and pool: ``kind:arg`` of a
    `DRAFTS` kind (``layers:N``), else a checkpoint folder (kind ``path``)."""
    import twinserve.engine.spec_draft_model  # noqa: F401  (registers "path")

    kind, _, arg = cfg.draft.partition(":")
    if kind not in DRAFTS:
        kind, arg = "path", cfg.draft
    return DRAFTS.create(kind, model=model, pool=pool, arg=arg)
