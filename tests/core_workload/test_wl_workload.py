"""Workload: ordering, token determinism, hash blocks, slicing and scaling, reporting."""

from __future__ import annotations

import numpy as np
import pytest

from twinserve.core.workload import RequestSpec, Workload, load_azure
from twinserve.core.workload import tokens as tk


def _w(n=20, seed=0, **kw):
    specs = [RequestSpec(i, float(i) * 0.5, 50 + i, 5 + i) for i in range(n)]
    return Workload(specs, seed=seed, **kw)


def test_sorted_by_arrival_stably_and_unique_rids():
    specs = [RequestSpec(5, 2.0, 3, 1), RequestSpec(1, 0.0, 3, 1), RequestSpec(9, 2.0, 3, 1),
             RequestSpec(2, 1.0, 3, 1)]
    w = Workload(specs)
    assert [s.rid for s in w] == [1, 2, 5, 9]
    assert w.by_rid(9).arrival == 2.0
    with pytest.raises(ValueError, match="not unique"):
        Workload([RequestSpec(1, 0.0, 3, 1), RequestSpec(1, 1.0, 3, 1)])


def test_spec_validation_and_readonly_tokens():
    with pytest.raises(ValueError):
        RequestSpec(0, 0.0, 0, 1)
    with pytest.raises(ValueError):
        RequestSpec(0, 0.0, 1, 0)
    with pytest.raises(ValueError, match="prompt_len"):
        RequestSpec(0, 0.0, 3, 1, tokens=np.array([1, 2]))
    s = RequestSpec(0, 0.0, 2, 1, tokens=[4, 5], hash_ids=[1, 2])
    assert s.tokens.dtype == np.int32 and not s.tokens.flags.writeable
    assert s.hash_ids == (1, 2)
    assert s == RequestSpec(0, 0.0, 2, 1, tokens=[9, 9], hash_ids=(1, 2))  # arrays not compared


def test_prompt_and_output_tokens_deterministic_and_in_vocab():
    a, b, c = _w(seed=1), _w(seed=1), _w(seed=2)
    for s in a:
        p = a.prompt_tokens(s)
        assert p.dtype == np.int32 and p.size == s.prompt_len
        assert p.min() >= 0 and p.max() < a.vocab_size
        assert np.array_equal(p, b.prompt_tokens(b.by_rid(s.rid)))
        assert np.array_equal(a.output_tokens(s), b.output_tokens(s))
        assert a.output_tokens(s).size == s.output_len
        assert not np.array_equal(p, c.prompt_tokens(s))
    # distinct requests have distinct prompts (no accidental prefix sharing)
    firsts = {tuple(a.prompt_tokens(s)[:4]) for s in a}
    assert len(firsts) == len(a)
    s0 = a[0]
    assert not np.array_equal(a.prompt_tokens(s0)[:5], a.output_tokens(s0))


def test_token_ids_look_uniform():
    w = Workload([RequestSpec(0, 0.0, 200_000, 1)], vocab_size=100)
    counts = np.bincount(w.prompt_tokens(w[0]), minlength=100)
    assert counts.size == 100
    assert counts.min() > 1700 and counts.max() < 2300     # expected 2000 each


def test_token_maker_matches_pure_functions():
    m = tk.TokenMaker(seed=3, vocab_size=1000, block_size=8, max_len=50)
    for start, n in ((0, 10), (20, 30), (40, 100)):          # the last overruns the table
        ref = tk.random_tokens(tk.derive_key(3, 17, tk.PROMPT), n, 1000, start=start)
        assert np.array_equal(m.unique(tk.PROMPT, 17, n, start), ref)
    full = tk.random_tokens(99, 30, 1000)
    assert np.array_equal(full[12:], tk.random_tokens(99, 18, 1000, start=12))
    assert np.array_equal(m.blocks((4, 5, 6), 20), tk.block_tokens(3, (4, 5, 6), 20, 8, 1000))


def test_hash_blocks_equal_hash_equal_tokens_and_unique_tail():
    specs = [RequestSpec(0, 0.0, 40, 1, hash_ids=(1, 2, 3)),    # 3 blocks of 16 cut to 40
             RequestSpec(1, 0.0, 48, 1, hash_ids=(1, 2, 4)),
             RequestSpec(2, 0.0, 60, 1, hash_ids=(9, 1)),       # 28 tokens past the hashes
             RequestSpec(3, 0.0, 60, 1, hash_ids=(9, 1))]
    w = Workload(specs, block_size=16)
    t0, t1, t2, t3 = (w.prompt_tokens(s) for s in specs)
    assert t0.size == 40 and t2.size == 60
    assert np.array_equal(t0[:32], t1[:32])
    assert not np.array_equal(t0[32:40], t1[32:40])
    assert np.array_equal(t2[16:32], t0[:16])                   # hash 1 at another position
    assert np.array_equal(t2[:32], t3[:32])
    assert not np.array_equal(t2[32:], t3[32:])                 # tails are per request
    # longest common prefix is exactly the shared blocks
    lcp = int(np.argmax(t2 != t3))
    assert lcp == 32


def test_head_window_first_seconds_keep_tokens():
    w = _w()
    h = w.head(4)
    assert [s.rid for s in h] == [0, 1, 2, 3]
    win = w.window(1.0, 3.0)                                   # arrivals 1.0 .. 2.5
    assert [s.rid for s in win] == [2, 3, 4, 5]
    assert win.arrivals.tolist() == [0.0, 0.5, 1.0, 1.5]
    assert np.array_equal(win.prompt_tokens(win[0]), w.prompt_tokens(w.by_rid(2)))
    fs = w.first_seconds(2.0)
    assert [s.rid for s in fs] == [0, 1, 2, 3]
    assert isinstance(w[2:5], Workload) and len(w[2:5]) == 3


def test_scale_time_and_with_rate():
    specs = [RequestSpec(i, t, 3, 1) for i, t in enumerate([1.0, 2.0, 4.0, 8.0])]
    w = Workload(specs)
    assert w.scale_time(0.5).arrivals.tolist() == [1.0, 1.5, 2.5, 4.5]
    assert w.mean_rate() == pytest.approx(3 / 7)
    r = w.with_rate(6.0)
    assert r.mean_rate() == pytest.approx(6.0)
    assert np.allclose(np.diff(r.arrivals) / np.diff(w.arrivals), (3 / 7) / 6)
    assert w.with_rate(float("inf")).arrivals.tolist() == [1.0] * 4
    with pytest.raises(ValueError):
        w.scale_time(-1)


def test_over_long_reports_and_never_trims():
    w = _w(n=10)                                  # totals 55, 57, ..., 73
    assert w.over_long(60) == [3, 4, 5, 6, 7, 8, 9]
    assert w.over_long(1000) == []
    assert len(w) == 10


def test_with_vocab_folds_explicit_tokens_and_keeps_equalities():
    toks = np.array([40000, 5, 70000, 40000])
    w = Workload([RequestSpec(0, 0.0, 4, 2, tokens=toks, output_tokens=[1, 50000])])
    assert w.prompt_tokens(w[0]).tolist() == [40000 % 32000, 5, 70000 % 32000, 40000 % 32000]
    v = w.with_vocab(1000)
    t = v.prompt_tokens(v[0])
    assert t.max() < 1000 and t[0] == t[3]
    g = _w().with_vocab(7)
    assert max(int(g.prompt_tokens(s).max()) for s in g) < 7


def test_frame_and_stats():
    w = _w(n=5)
    df = w.to_frame()
    assert list(df.columns) == ["rid", "arrival", "prompt_len", "output_len", "tenant", "priority",
                                "session", "num_hash_ids", "explicit_tokens"]
    assert df["prompt_len"].tolist() == [50, 51, 52, 53, 54]
    st = w.stats()
    assert st["count"] == 5 and st["span_s"] == 2.0 and st["rate"] == 2.0
    assert st["prompt_mean"] == 52 and st["output_p50"] == 7


def test_trace_tokens_are_not_materialised():
    w = load_azure("azure_conv")
    assert all(s.tokens is None and s.hash_ids is None for s in w.head(100))
    s = w[123]
    assert np.array_equal(w.prompt_tokens(s), w.head(200).prompt_tokens(s))
