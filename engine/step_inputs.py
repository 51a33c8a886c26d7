"""Host-side inputs of one model step, built from a core `Batch` (see CORE_API "Engine view")."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Mapping

import numpy as np
import torch

from twinserve.core.batch import Batch
from twinserve.core.request import PLACEHOLDER
from twinserve.engine.attention.base import AttentionInputs
from twinserve.engine.sampler import SamplingBatch


@dataclass
class StepInputs:
    """Everything the device needs for one step, packed for a single host-to-device copy.

    ``packed`` (int64) = ``[ids | positions | slots]`` (each ``num_padded`` long) then
    ``logits_idx`` (``num_emit``), ``ph_idx`` and ``ph_src`` (``num_ph`` each). ``ids`` holds -1 at
    placeholder tokens; on device ``ids[ph_idx] = previous_step_tokens[ph_src]``. Rows beyond the
    real batch (CUDA-graph padding) read and write the pool's scratch page. ``emit_rows`` are the
    batch rows that sample, in logits order. ``num_rows`` is the batch size and ``graph_bs`` the
    CUDA-graph size the step replays (0: eager). ``forced`` = (positions among the sampled
    rows, token ids) replaces sampled tokens by given ones (requests carrying an
    ``output_hint``: a replayed trace's answers). ``prompt_lp``: which prompt positions' logprobs
    to compute (`PromptLogprobsSpec`), None for none. ``logit_counts`` (None unless a row
    speculates, `Batch.drafts`): how many consecutive logits rows, ending at its last token,
    each emitting row scores (1 + its draft's length), so that ``num_emit`` counts logits rows;
    ``draft_ids`` then holds the token proposed after each logits row (-1 after a row's last),
    which rejection sampling (engine/spec_sampler.py) accepts or replaces.
    The object references no `Req`, so it fully describes a step to a tensor-parallel rank that
    holds no scheduler.
    """

    packed: torch.Tensor
    num_tokens: int
    num_padded: int
    num_emit: int
    num_ph: int
    emit_rows: np.ndarray
    attn: AttentionInputs
    sampling: SamplingBatch | None
    num_rows: int = 0
    graph_bs: int = 0
    forced: tuple[np.ndarray, np.ndarray] | None = None
    prompt_lp: object = None  # a PromptLogprobsSpec (engine.logits_processing) when a request wants them
    logit_counts: np.ndarray | None = None
    draft_ids: np.ndarray | None = None  # with logit_counts: the draft token at each logits row, -1 at a row's last

    def views(self, dev_packed: torch.Tensor) -> dict[str, torch.Tensor]:
        t, e, p = self.num_padded, self.num_emit, self.num_ph
        o = 3 * t
        return {
            "ids": dev_packed[:t], "positions": dev_packed[t:2 * t], "slots": dev_packed[2 * t:o],
            "logits_idx": dev_packed[o:o + e], "ph_idx": dev_packed[o + e:o + e + p],
            "ph_src": dev_packed[o + e + p:o + e + 2 * p],
        }


def build_step_inputs(batch: Batch, page_size: int, scratch_page: int, prev_rows: Mapping[int, int],
                      pad_to: int = 0) -> StepInputs:
    """Flatten ``batch`` into token ids, positions, KV slots, the paged-attention tables, the
    logits rows and the placeholder fix-ups. ``prev_rows`` maps rid → row of the previous step's
    sampled tokens (the only step whose values may still be unknown). ``pad_to > len(batch)``
    appends decode rows on the scratch page (decode-only batches, for CUDA graphs)."""
    reqs = batch.reqs
    b = len(reqs)
    starts = np.asarray(batch.starts, dtype=np.int64)
    qo = np.asarray(batch.new_tokens, dtype=np.int64)
    kv = starts + qo
    npages = (kv + page_size - 1) // page_size
    id_parts = [r.tokens[s:s + n] for r, s, n in zip(reqs, batch.starts, batch.new_tokens)]
    page_lists = [r.pages[:k] for r, k in zip(reqs, npages.tolist())]
    if any(len(pl) < k for pl, k in zip(page_lists, npages.tolist())):
        bad = [r.rid for r, pl, k in zip(reqs, page_lists, npages.tolist()) if len(pl) < k]
        raise RuntimeError(f"requests {bad} hold fewer pages than their context needs")
    ids = np.concatenate(id_parts).astype(np.int64) if b else np.zeros(0, np.int64)
    pages = np.fromiter(chain.from_iterable(page_lists), dtype=np.int64, count=int(npages.sum()))
    t = int(qo.sum())
    pad_rows = max(0, pad_to - b)
    tp = t + pad_rows

    qo_indptr = np.zeros(b + 1, dtype=np.int64)
    np.cumsum(qo, out=qo_indptr[1:])
    page_indptr = np.zeros(b + 1, dtype=np.int64)
    np.cumsum(npages, out=page_indptr[1:])
    if batch.decode_only:
        positions = starts.copy()
        row_page0 = page_indptr[:-1]
    else:
        row_of_tok = np.repeat(np.arange(b), qo)
        positions = np.arange(t, dtype=np.int64) - qo_indptr[row_of_tok] + starts[row_of_tok]
        row_page0 = page_indptr[:-1][row_of_tok]
    slots = pages[row_page0 + positions // page_size] * page_size + positions % page_size
    last_page_len = kv - (npages - 1) * page_size

    emits = np.asarray(batch.emits, dtype=bool)
    emit_rows = np.nonzero(emits)[0]
    logits_idx = qo_indptr[1:][emit_rows] - 1

    counts = None
    if batch.drafts is not None and emit_rows.size:
        counts = np.asarray(batch.drafts, dtype=np.int64)[emit_rows] + 1
        logits_idx = np.repeat(logits_idx - counts + 1, counts) + _ranges(counts)
        last = np.zeros(logits_idx.size, dtype=bool)
        last[np.cumsum(counts) - 1] = True
        draft_ids = np.where(last, -1, ids[np.minimum(logits_idx + 1, t - 1)])
    else:
        draft_ids = None

    ph_idx = np.nonzero(ids == PLACEHOLDER)[0]
    if ph_idx.size:
        tok_rows = np.searchsorted(qo_indptr, ph_idx, side="right") - 1
        try:
            ph_src = np.fromiter((prev_rows[reqs[i].rid] for i in tok_rows.tolist()), np.int64, ph_idx.size)
        except KeyError as e:
            raise RuntimeError(f"request {e.args[0]} has a placeholder token not sampled by the previous step") from None
    else:
        ph_src = ph_idx

    if pad_rows:
        scratch_slot = scratch_page * page_size
        ids = np.concatenate([ids, np.zeros(pad_rows, np.int64)])
        positions = np.concatenate([positions, np.zeros(pad_rows, np.int64)])
        slots = np.concatenate([slots, np.full(pad_rows, scratch_slot, np.int64)])
        pages = np.concatenate([pages, np.full(pad_rows, scratch_page, np.int64)])
        page_indptr = np.concatenate([page_indptr, page_indptr[-1] + np.arange(1, pad_rows + 1)])
        last_page_len = np.concatenate([last_page_len, np.ones(pad_rows, np.int64)])
        qo_all = np.concatenate([qo, np.ones(pad_rows, np.int64)])
        kv_all = np.concatenate([kv, np.ones(pad_rows, np.int64)])
    else:
        qo_all, kv_all = qo, kv

    packed = torch.from_numpy(np.concatenate([ids, positions, slots, logits_idx, ph_idx, ph_src]))
    attn = AttentionInputs(
        qo_lens=qo_all.astype(np.int32), kv_lens=kv_all.astype(np.int32),
        page_indptr=page_indptr.astype(np.int32), page_indices=pages.astype(np.int32),
        last_page_len=last_page_len.astype(np.int32), decode_only=batch.decode_only)
    sampling = None
    forced = None
    if emit_rows.size and counts is not None:
        sampling, forced = _spec_sampling(reqs, batch.out_pos, emit_rows, counts)
    elif emit_rows.size:
        sampling = SamplingBatch.from_params([reqs[i].params for i in emit_rows.tolist()],
                                             [batch.out_pos[i] for i in emit_rows.tolist()])
        forced = _forced(reqs, batch.out_pos, emit_rows)
    return StepInputs(packed=packed, num_tokens=t, num_padded=tp, num_emit=int(logits_idx.size),
                      num_ph=int(ph_idx.size), emit_rows=emit_rows, attn=attn, sampling=sampling,
                      num_rows=b, graph_bs=pad_to, forced=forced, logit_counts=counts,
                      draft_ids=draft_ids)


def _ranges(counts: np.ndarray) -> np.ndarray:
    """``[0..c0-1, 0..c1-1, ...]`` for the counts ``c``."""
    ends = np.cumsum(counts)
    return np.arange(int(ends[-1]), dtype=np.int64) - np.repeat(ends - counts, counts)


def _spec_sampling(reqs, out_pos, emit_rows: np.ndarray, counts: np.ndarray
                   ) -> tuple[SamplingBatch, tuple[np.ndarray, np.ndarray] | None]:
    """Sampling rows and forced tokens of a step whose emitting rows score ``counts`` logits
    rows each: a row's j-th logits row samples its output ``out_pos - counts + 1 + j``."""
    pos = np.repeat(np.asarray(out_pos, dtype=np.int64)[emit_rows] - counts + 1, counts) + _ranges(counts)
    per_row = SamplingBatch.from_params([reqs[i].params for i in emit_rows.tolist()],
                                        np.zeros(emit_rows.size, np.int64))  # counters: ``pos`` below
    sampling = SamplingBatch(  # each emitting row's parameters repeated over its logits rows
        temperature=np.repeat(per_row.temperature, counts), top_k=np.repeat(per_row.top_k, counts),
        top_p=np.repeat(per_row.top_p, counts), seeds=np.repeat(per_row.seeds, counts), counters=pos,
        seeded=np.repeat(per_row.seeded_rows, counts))
    forced = _forced(reqs, out_pos, emit_rows)
    if forced is not None:  # a plain row's one logits row is its last
        forced = ((np.cumsum(counts) - 1)[forced[0]], forced[1])
    return sampling, forced


def _forced(reqs, out_pos, emit_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(sampled-row positions, tokens) of the rows whose request has an answer to emit there."""
    pos, vals = [], []
    for j, i in enumerate(emit_rows.tolist()):
        h = reqs[i].output_hint
        p = out_pos[i]
        if h is not None and p < len(h):
            pos.append(j)
            vals.append(int(h[p]))
    if not pos:
        return None
    return np.asarray(pos, dtype=np.int64), np.asarray(vals, dtype=np.int64)
