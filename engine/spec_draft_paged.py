"""A greedy draft that runs like decoding: paged attention, one forward per proposed position,
CUDA graphs on the GPU.

`PagedDraft` proposes ``k`` tokens for a batch of rows; each row has pages holding the K/V of
its positions ``0..ctx-1`` (the first ``num_layers`` layers of the model) and its pending token
at position ``ctx``. Position ``ctx + j``, the j-th draft input, gets its K/V stored like a
decode's: in the row's own page when one of its pages covers it, else in one of the row's side
pages (`KVPool.side_pages`, outside the memory policy's ids). Those slots are scratch: the
verify step (self-speculation) or the next catch-up (a draft checkpoint) stores the accepted
positions' K/V there again, and nothing reads a slot past a row's known length. A row's own
pages past position ``ctx - 1`` are partial or fresh pages, which only full pages' prefix
sharing never hands to another request.

On the GPU with graphs, each padded row count has one CUDA graph of embed -> the first
``num_layers`` layers -> final norm -> head -> argmax; the proposed token is copied back as the
next replay's input on the device, and the host reads the ``k`` proposals once at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from twinserve.core.capture_schedule import decode_graph_sizes
from twinserve.engine.attention.base import AttentionInputs
from twinserve.engine.cuda_graph import capture, decode_capture_inputs
from twinserve.engine.kv_pool import KVPool
from twinserve.engine.models.decoder import CausalLM, ForwardContext

DRAFT_MAX_ROWS = 64  # rows of one draft forward (more run in chunks): speculation rarely pays above


def draft_rows(max_running: int) -> int:
    """Rows of one draft forward for an engine running up to ``max_running`` requests."""
    return max(1, min(max_running, DRAFT_MAX_ROWS))


def side_per_row(k: int, page_size: int) -> int:
    """Side pages one row needs for ``k`` proposed positions: a row owns the pages of its known
    positions, so positions ``ctx..ctx+k-1`` reach at most ``ceil(k / page_size)`` pages more."""
    return -(-k // page_size)


def side_pages(k: int, page_size: int, max_running: int) -> int:
    """Side pages a pool needs for drafts of ``k`` tokens in an engine of ``max_running``."""
    return draft_rows(max_running) * side_per_row(k, page_size)


@dataclass(frozen=True)
class DraftPlan:
    """Host arrays of a ``k``-position draft over ``rows`` rows (the batch and its padding):
    for proposed position j, ``inputs[j]`` (decode-only attention inputs) and ``packed[j]`` =
    ``[ids | positions | slots]`` (``rows`` each; ids are the pending tokens, used at j = 0)."""

    inputs: list[AttentionInputs]
    packed: np.ndarray


def plan_draft(pages: Sequence[Sequence[int]], ctx: np.ndarray, last: Sequence[int], k: int, rows: int,
               page_size: int, side: Sequence[int], scratch_page: int) -> DraftPlan:
    """The plan of ``k`` draft positions for ``len(pages)`` rows padded to ``rows``: row b's page
    table is its own pages covering positions ``< ctx[b] + k`` then its side pages
    ``side[b * s:(b + 1) * s]`` (``s`` = `side_per_row`); padding rows attend to one slot of
    ``scratch_page`` and write there."""
    n, ps = len(pages), page_size
    s = side_per_row(k, ps)
    if len(side) < n * s:
        raise ValueError(f"{n} draft rows need {n * s} side pages, the pool has {len(side)}")
    ctx = np.asarray(ctx, dtype=np.int64)
    need = -(-(ctx + k) // ps)
    width = int(need.max()) if n else 1
    table = np.full((rows, width), scratch_page, dtype=np.int64)
    for b in range(n):
        own = np.asarray(pages[b][: int(need[b])], dtype=np.int64)
        if own.size < -(-int(ctx[b]) // ps):
            raise ValueError(f"draft row {b}: {own.size} pages do not hold its {int(ctx[b])} known positions")
        table[b, : own.size] = own
        table[b, own.size: need[b]] = side[b * s: b * s + int(need[b]) - own.size]
    pad = rows - n
    packed = np.zeros((k, 3 * rows), dtype=np.int64)
    packed[0, :n] = np.asarray(last, dtype=np.int64)
    inputs = []
    for j in range(k):
        pos = ctx + j
        packed[j, rows: rows + n] = pos
        packed[j, 2 * rows: 2 * rows + n] = table[np.arange(n), pos // ps] * ps + pos % ps
        packed[j, 2 * rows + n:] = scratch_page * ps
        kv = np.concatenate([pos + 1, np.ones(pad, np.int64)])
        cols = np.arange(width)[None, :] < -(-kv // ps)[:, None]
        inputs.append(AttentionInputs.from_lengths(np.ones(rows), kv, table[cols], ps, True))
    return DraftPlan(inputs, packed)


class PagedDraft:
    """``propose(pages, ctx, last, k)`` -> ``[rows, k]`` int32 greedy proposals of ``model``'s
    first ``num_layers`` layers, final norm and head (module docstring).

    ``attn`` is the draft's own attention backend over ``pool`` (its plans must not overwrite
    another forward's); ``side`` holds `side_per_row` pages for each of ``max_rows`` rows; more
    rows run in chunks of ``max_rows``. With ``graphs`` (CUDA, a backend with decode graphs) one
    graph per padded row count up to ``max_rows`` replays each position; else forwards run eagerly
    at the batch's own size. Invariant: graph ``bs`` reads ``static[0:bs]`` (ids),
    ``static[bs:2bs]`` (positions), ``static[2bs:3bs]`` (slots) and writes ``tokens[bs]``.
    """

    def __init__(self, model: CausalLM, num_layers: int, pool: KVPool, attn: Any, side: Sequence[int],
                 max_rows: int, k_max: int, graphs: bool) -> None:
        self.model = model
        self.num_layers = num_layers
        self.pool = pool
        self.attn = attn
        self.side = list(side)
        self.max_rows = max_rows
        self.k_max = k_max
        dev = pool.device
        self._cuda = dev.type == "cuda"
        self._event = torch.cuda.Event() if self._cuda else None
        self._planned = False  # a plan's copy may still be pending (then ``_event`` marks it)
        self.sizes = decode_graph_sizes(max_rows) if graphs else []
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.tokens: dict[int, torch.Tensor] = {}
        if self.sizes:
            self.static = torch.zeros(3 * max(self.sizes), dtype=torch.int64, device=dev)
            attn.init_graphs(self.sizes)
            self._capture_all()

    # ---- the forward -------------------------------------------------------------------------
    def _hidden(self, ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """The first ``num_layers`` layers over ``ids``, storing their K/V at ``slots``:
        ``(hidden, residual)`` before the final norm."""
        ctx = ForwardContext(positions=positions, slots=slots, attn=self.attn)
        h, residual = self.model.model.embed_tokens(ids), None
        for layer in self.model.model.layers[: self.num_layers]:
            h, residual = layer(h, residual, ctx)
        return h, residual

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Each row's greedy next token: `_hidden`, the final norm, the head, argmax."""
        h, _ = self.model.model.norm(*self._hidden(ids, positions, slots))
        return self.model.compute_logits(h).argmax(dim=-1)

    def _run_graph_inputs(self, bs: int) -> torch.Tensor:
        s = self.static
        return self._forward(s[:bs], s[bs:2 * bs], s[2 * bs:3 * bs])

    @torch.inference_mode()
    def _capture_all(self) -> None:
        handle = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        ps = self.pool.page_size
        for bs in sorted(self.sizes, reverse=True):  # the largest first: the rest reuse its memory
            self.static.zero_()
            self.static[2 * bs:3 * bs] = self.pool.scratch_page * ps
            self.attn.plan_graph(bs, decode_capture_inputs(bs, self.pool.scratch_page))
            self.graphs[bs], self.tokens[bs] = capture(lambda: self._run_graph_inputs(bs), stream, handle, warmups=2)
        torch.cuda.synchronize()

    # ---- proposing ---------------------------------------------------------------------------
    @torch.inference_mode()
    def propose(self, pages: Sequence[Sequence[int]], ctx: Sequence[int], last: Sequence[int], k: int) -> np.ndarray:
        if k > self.k_max:
            raise ValueError(f"a draft of {k} tokens; this draft was sized for {self.k_max}")
        n = len(pages)
        out = np.zeros((n, k), dtype=np.int32)
        ctx_a = np.asarray(ctx, dtype=np.int64)
        for a in range(0, n, self.max_rows):
            b = min(n, a + self.max_rows)
            out[a:b] = self._propose_chunk(pages[a:b], ctx_a[a:b], last[a:b], k)
        return out

    def _propose_chunk(self, pages: Sequence[Sequence[int]], ctx: np.ndarray, last: Sequence[int],
                       k: int) -> np.ndarray:
        n = len(pages)
        bs = next((s for s in self.sizes if s >= n), 0)
        rows = bs or n
        plan = plan_draft(pages, ctx, last, k, rows, self.pool.page_size, self.side, self.pool.scratch_page)
        dev = self.pool.device
        packed = torch.from_numpy(plan.packed)
        packed = packed.pin_memory().to(dev, non_blocking=True) if self._cuda else packed
        props = torch.empty((k, rows), dtype=torch.int64, device=dev)
        step: Callable[..., torch.Tensor] = self._graph_step if bs else self._eager_step
        prev = None
        for j in range(k):
            self._plan(plan.inputs[j], bs)
            prev = step(j, rows, packed, prev)
            props[j].copy_(prev)
        out = props[:, :n].T.to(torch.int32).cpu().numpy()
        self._planned = False  # the host read the proposals: every plan's copy has run
        return out

    @torch.inference_mode()
    def extend(self, pages: Sequence[Sequence[int]], starts: Sequence[int], tokens: Sequence[np.ndarray]) -> None:
        """Run row b's ``tokens[b]`` (positions ``starts[b]..``) through the layers in one
        eager forward, storing their K/V at those positions of ``pages[b]`` (which must cover
        them); nothing is returned. A draft checkpoint catches up on a request's tokens so."""
        ps = self.pool.page_size
        qo = np.fromiter((t.size for t in tokens), np.int64, len(tokens))
        kv = np.asarray(starts, dtype=np.int64) + qo
        pos = np.concatenate([np.arange(s, e) for s, e in zip(starts, kv)])
        row_pages = [np.asarray(p[: -(-int(e) // ps)], dtype=np.int64) for p, e in zip(pages, kv)]
        slots = np.concatenate([rp[(np.arange(s, e)) // ps] * ps + np.arange(s, e) % ps
                                for rp, s, e in zip(row_pages, starts, kv)])
        self._plan(AttentionInputs.from_lengths(qo, kv, np.concatenate(row_pages), ps, bool((qo == 1).all())), 0)
        dev = self.pool.device
        ids = torch.from_numpy(np.concatenate(tokens).astype(np.int64)).to(dev)
        self._hidden(ids, torch.from_numpy(pos).to(dev), torch.from_numpy(slots).to(dev))

    def _plan(self, inputs: AttentionInputs, graph_bs: int) -> None:
        """Plan the attention (graph ``graph_bs``'s wrapper, or the eager one at 0). FlashInfer
        stages a plan in one pinned host buffer per wrapper and copies it to the device
        asynchronously, so a plan first waits until the previous plan's copy has run."""
        if self._planned:
            self._event.synchronize()
        if graph_bs:
            self.attn.plan_graph(graph_bs, inputs)
        else:
            self.attn.plan(inputs)
        if self._event is not None:
            self._event.record()
            self._planned = True

    def _graph_step(self, j: int, bs: int, packed: torch.Tensor, prev: torch.Tensor | None) -> torch.Tensor:
        s = self.static
        if prev is None:
            s[: 3 * bs].copy_(packed[j])
        else:
            s[bs: 3 * bs].copy_(packed[j, bs:])
            s[:bs].copy_(prev)
        self.graphs[bs].replay()
        return self.tokens[bs]

    def _eager_step(self, j: int, rows: int, packed: torch.Tensor, prev: torch.Tensor | None) -> torch.Tensor:
        ids = packed[j, :rows] if prev is None else prev
        return self._forward(ids, packed[j, rows: 2 * rows], packed[j, 2 * rows: 3 * rows])
