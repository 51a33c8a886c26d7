"""Draft models for speculative decoding (``spec.method=draft``), built by name (`DRAFTS`).

``layers:N`` is self-speculation: the target's first N decoder layers, its final norm and its
LM head, sharing the target's weights, propose ``k`` tokens greedily. Its KV cache is the
target's: the first N layers of the target compute exactly the keys and values the draft would
for the same tokens, so the draft reads them from the request's pages (positions with KV: all
known tokens but the last) and stores the K/V of the positions it proposes over like a decode
would (engine/spec_draft_paged.py: the request's own partial page or the pool's side pages),
where the verify step then stores every position's KV with the full model.

The proposals run as `PagedDraft` forwards, the step's decodes batched together (CUDA graphs
when the engine replays graphs). A separate checkpoint (``spec.draft=PATH``) is
engine/spec_draft_model.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol

import numpy as np

from twinserve.core.registry import Registry
from twinserve.core.request import Req
from twinserve.core.spec import SpecConfig, layer_draft_depth
from twinserve.engine.attention.base import AttentionSpec
from twinserve.engine.kv_pool import KVPool
from twinserve.engine.models.decoder import CausalLM
from twinserve.engine.spec_draft_paged import PagedDraft, draft_rows, side_pages, side_per_row

class Draft(Protocol):
    """A draft model's proposer: ``prepare(reqs, k)`` drafts for a step's decodes in one batch,
    ``draft(r, k)`` (the call) returns up to ``k`` ids for one of them (`SpecDecoding`'s hooks)."""

    def prepare(self, reqs: list[Req], k: int) -> None: ...

    def __call__(self, r: Req, k: int) -> np.ndarray: ...


DRAFTS: Registry[Draft] = Registry("speculative draft")


@dataclass(frozen=True)
class DraftRuntime:
    """What the engine lends a draft: ``make_attention(spec=...)`` builds an attention backend of the
    engine's kind (sharing FlashInfer's float workspace), ``attn_spec`` is the target's,
    ``graphs`` says whether the engine replays CUDA graphs, ``max_running`` its most running
    requests and ``k`` the most tokens a draft proposes (``spec.num_tokens``)."""

    make_attention: Callable[..., Any]
    attn_spec: AttentionSpec
    graphs: bool
    max_running: int
    k: int

    def paged(self, model: CausalLM, num_layers: int, pool: KVPool, spec: AttentionSpec) -> PagedDraft:
        """A `PagedDraft` of ``model``'s first ``num_layers`` layers over ``pool``, whose side pages
        it needs (`side_pages`); its attention backend is built here for ``spec``."""
        rows = draft_rows(self.max_running)
        need = side_pages(self.k, pool.page_size, self.max_running)
        if len(pool.side_pages) < need:
            raise ValueError(f"the draft's KV pool has {len(pool.side_pages)} side pages, it needs {need}")
        spec = replace(spec, max_pages_per_seq=spec.max_pages_per_seq + side_per_row(self.k, pool.page_size))
        return PagedDraft(model, num_layers, pool, self.make_attention(spec=spec), pool.side_pages, rows, self.k,
                          self.graphs)


def target_side_pages(spec: SpecConfig, page_size: int, max_running: int) -> int:
    """Side pages the target's KV pool needs for ``spec``: those of a ``layers:N`` draft, which
    proposes over the target's pages (a checkpoint draft has a pool of its own)."""
    if not spec.enabled or spec.draft.partition(":")[0] != "layers":
        return 0
    return side_pages(spec.num_tokens, page_size, max_running)


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
    ``num_layers`` layers after its known tokens, all requests in one batch (`PagedDraft`: one
    forward of the N layers per proposed position, one host sync). Contract: each request is a
    decode (``num_computed == num_tokens - 1``) whose ``pages`` hold the KV of positions
    ``< num_computed``; writes only slots past them (module docstring). ``prepare(reqs, k)``
    proposes for a step's decodes at once; ``__call__(r, k)`` then answers from those proposals
    (a request not prepared, or prepared at another length, is proposed for alone)."""

    def __init__(self, model: CausalLM, pool: KVPool, arg: str, runtime: DraftRuntime) -> None:
        self.num_layers = layer_draft_depth(f"layers:{arg}", len(model.model.layers))
        self.paged = runtime.paged(model, self.num_layers, pool, runtime.attn_spec)
        self._ready = PreparedProposals()

    def prepare(self, reqs: list[Req], k: int) -> None:
        self._ready.fill(reqs, self.propose(reqs, k) if reqs else ())

    def __call__(self, r: Req, k: int) -> np.ndarray:
        hit = self._ready.get(r, k)
        return hit if hit is not None else self.propose([r], k)[0]

    def propose(self, reqs: list[Req], k: int) -> np.ndarray:
        """[len(reqs), k] int32 proposals."""
        return self.paged.propose([r.pages for r in reqs], [r.num_computed for r in reqs],
                                  [int(r.tokens[r.num_tokens - 1]) for r in reqs], k)


def build_draft(cfg: SpecConfig, model: CausalLM, pool: KVPool, runtime: DraftRuntime) -> Draft:
    """The proposer of ``cfg.draft`` on the engine's model and pool: ``kind:arg`` of a
    `DRAFTS` kind (``layers:N``), else a checkpoint folder (kind ``path``)."""
    import twinserve.engine.spec_draft_model  # noqa: F401  (registers "path")

    kind, _, arg = cfg.draft.partition(":")
    if kind not in DRAFTS:
        kind, arg = "path", cfg.draft
    return DRAFTS.create(kind, model=model, pool=pool, arg=arg, runtime=runtime)
