"""`PagedDraft`'s plan (which slots the proposed positions write, which pages each position
reads) and its proposals against a cache-free greedy reference of the same layers."""

from __future__ import annotations

import numpy as np
import pytest

from twinserve.engine.spec_draft_paged import plan_draft, side_per_row

PS = 4
SCRATCH = 99


def test_plan_writes_own_then_side_pages_and_reads_a_prefix():
    # row 0: 5 known positions on pages [7, 8] (page 8 partial), k = 6 -> positions 5..10
    # row 1: 8 known positions on [3, 4] (both full), k = 6 -> positions 8..13 on side pages
    pages = [[7, 8], [3, 4]]
    side = [50, 51, 52, 53]  # side_per_row(6, 4) = 2 per row
    plan = plan_draft(pages, np.array([5, 8]), [11, 12], 6, 4, PS, side, SCRATCH)
    assert side_per_row(6, PS) == 2
    slots = plan.packed[:, 2 * 4: 3 * 4]
    want0 = [8 * PS + 1, 8 * PS + 2, 8 * PS + 3, 50 * PS, 50 * PS + 1, 50 * PS + 2]
    want1 = [52 * PS, 52 * PS + 1, 52 * PS + 2, 52 * PS + 3, 53 * PS, 53 * PS + 1]
    assert slots[:, 0].tolist() == want0 and slots[:, 1].tolist() == want1
    assert (slots[:, 2:] == SCRATCH * PS).all()  # padding rows write the scratch page
    assert plan.packed[0, :2].tolist() == [11, 12] and plan.packed[:, 4:6].tolist() == [[5 + j, 8 + j] for j in range(6)]
    for j, inp in enumerate(plan.inputs):
        assert inp.decode_only and inp.batch_size == 4
        assert inp.kv_lens.tolist() == [6 + j, 9 + j, 1, 1]
        table0, table1 = [7, 8, 50, 51], [3, 4, 52, 53]
        n0, n1 = -(-(6 + j) // PS), -(-(9 + j) // PS)
        assert inp.page_indices.tolist() == table0[:n0] + table1[:n1] + [SCRATCH, SCRATCH]
        assert inp.page_indptr.tolist() == [0, n0, n0 + n1, n0 + n1 + 1, n0 + n1 + 2]
        assert inp.last_page_len.tolist() == [(6 + j) - (n0 - 1) * PS, (9 + j) - (n1 - 1) * PS, 1, 1]


def test_plan_uses_pages_a_row_already_holds_and_checks_its_inputs():
    # a row holding pages past its known positions writes them, not side pages
    plan = plan_draft([[1, 2, 3]], np.array([4]), [5], 3, 1, PS, [60], SCRATCH)
    assert plan.packed[:, 2].tolist() == [2 * PS, 2 * PS + 1, 2 * PS + 2]
    with pytest.raises(ValueError, match="side pages"):
        plan_draft([[1], [2]], np.array([3, 3]), [5, 5], 3, 2, PS, [60], SCRATCH)
    with pytest.raises(ValueError, match="do not hold"):
        plan_draft([[1]], np.array([6]), [5], 3, 1, PS, [60], SCRATCH)


def _reference(model, num_layers: int, tokens: list[int], k: int) -> list[int]:
    """Greedy tokens of the first ``num_layers`` layers by a causal forward over the whole
    sequence each time (no KV cache)."""
    import torch
    import torch.nn.functional as F

    dm = model.model
    out: list[int] = []
    seq = list(tokens)
    for _ in range(k):
        n = len(seq)
        pos = torch.arange(n)
        h, residual = dm.embed_tokens(torch.tensor(seq)), None
        for layer in dm.layers[:num_layers]:
            qkv, residual = layer.pre(h, residual, pos)
            q, kk, vv = layer.self_attn.heads(qkv)
            g = q.shape[1] // kk.shape[1]
            o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], kk.repeat_interleave(g, 1).transpose(0, 1)[None],
                                               vv.repeat_interleave(g, 1).transpose(0, 1)[None], is_causal=True)
            h, residual = layer.post(o[0].transpose(0, 1).reshape(n, -1), residual)
        h, _ = dm.norm(h, residual)
        nxt = int(model.compute_logits(h[-1:]).argmax(-1))
        out.append(nxt)
        seq.append(nxt)
    return out


@pytest.mark.parametrize("max_rows", [4, 2])  # 2: the three rows run in two chunks
def test_paged_draft_matches_a_cache_free_reference(tiny_model_dir, max_rows):
    """Rows whose known lengths end at, just after and just before a page boundary (pages of 16),
    k = 5 so proposals cross into the next page; the KV of the known positions is written by a
    prefill of the full model first, as the engine's steps would."""
    torch = pytest.importorskip("torch")
    from twinserve.engine.attention.base import AttentionInputs, AttentionSpec
    from twinserve.engine.attention.torch_backend import TorchAttention
    from twinserve.engine.kv_pool import KVGeometry, KVPool
    from twinserve.engine.layers.kernels import KERNELS
    from twinserve.engine.model_config import ModelConfig
    from twinserve.engine.loader import load_weights
    from twinserve.engine.models import build_model
    from twinserve.engine.models.decoder import ForwardContext
    from twinserve.engine.spec_draft_paged import PagedDraft

    path = tiny_model_dir("tiny-llama")
    mc = ModelConfig.from_dir(path)
    model = build_model(mc, KERNELS.create("torch"), torch.float32, torch.device("cpu"), max_positions=512)
    load_weights(model, path)
    k, ps, n_layers = 5, 16, 1
    pool = KVPool(KVGeometry(mc.num_layers, 32, ps, mc.num_kv_heads, mc.head_dim, torch.float32), "cpu",
                  side_pages=max_rows * side_per_row(k, ps))
    spec = AttentionSpec(mc.num_heads, mc.num_kv_heads, mc.head_dim, torch.float32, pool, 16)
    rng = np.random.default_rng(3)
    seqs = [rng.integers(3, mc.vocab_size, size=n).tolist() for n in (33, 32, 47)]  # known = n - 1
    pages = [[0, 1, 2], [3, 4], [5, 6, 7]]
    with torch.inference_mode():
        attn = TorchAttention(spec)
        for seq, pg in zip(seqs, pages):  # the known positions' KV, by the full model
            n = len(seq) - 1
            slots = torch.tensor([pg[p // ps] * ps + p % ps for p in range(n)])
            attn.plan(AttentionInputs(np.array([n], np.int32), np.array([n], np.int32),
                                      np.array([0, len(pg)], np.int32), np.array(pg, np.int32),
                                      np.array([n - (len(pg) - 1) * ps], np.int32), False))
            model(torch.tensor(seq[:n]), ForwardContext(torch.arange(n), slots, attn))
        draft = PagedDraft(model, n_layers, pool, TorchAttention(spec), pool.side_pages, max_rows, k, graphs=False)
        got = draft.propose(pages, [len(s) - 1 for s in seqs], [s[-1] for s in seqs], k)
        want = [_reference(model, n_layers, s, k) for s in seqs]
    assert got.tolist() == want
