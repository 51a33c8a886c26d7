"""Arrival processes, length distributions, shared prefixes, sessions and the registry."""

from __future__ import annotations

import numpy as np
import pytest

from twinserve.core.workload import (ARRIVALS, WORKLOADS, build, arrival_times, sample_lengths,
                                     sessions, shared_prefix, stream, synthetic)


def test_poisson_and_gamma_rates_and_burstiness():
    for cv in (1.0, 3.0, 0.5):
        t = arrival_times("gamma", 20001, stream(0, "a"), rate=4.0, cv=cv)
        gaps = np.diff(t)
        assert t[0] == 0.0 and np.all(gaps >= 0)
        assert gaps.mean() == pytest.approx(0.25, rel=0.06)
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.08)
    p = ARRIVALS.get("poisson")(20001, stream(1, "a"), 10.0)
    assert np.diff(p).mean() == pytest.approx(0.1, rel=0.03)
    assert np.allclose(arrival_times("gamma", 5, stream(0, "a"), 2.0, cv=0.0),
                       [0, 0.5, 1.0, 1.5, 2.0])
    assert arrival_times("poisson", 3, stream(0, "a"), float("inf")).tolist() == [0, 0, 0]


def test_length_distributions_and_clipping():
    r = lambda: stream(0, "len")  # noqa: E731
    assert sample_lengths(7, 4, r()).tolist() == [7] * 4
    u = sample_lengths({"dist": "uniform", "lo": 3, "hi": 5}, 5000, r())
    assert set(u.tolist()) == {3, 4, 5}
    ln = sample_lengths({"dist": "lognormal", "mean": 500, "sigma": 0.8}, 50000, r())
    assert ln.mean() == pytest.approx(500, rel=0.03)
    z = sample_lengths({"dist": "zipf", "a": 1.2, "lo": 10, "hi": 1000}, 50000, r())
    assert z.min() == 10 and z.max() <= 1000
    ratio = (z == 10).mean() / (z == 11).mean()
    assert ratio == pytest.approx(2 ** 1.2, rel=0.1)             # P(rank1)/P(rank2)
    c = sample_lengths({"dist": "lognormal", "mean": 500, "sigma": 2, "min": 64, "max": 900},
                       5000, r())
    assert c.min() == 64 and c.max() == 900
    with pytest.raises(ValueError, match="dist"):
        sample_lengths({"lo": 1}, 3, r())
    with pytest.raises(KeyError):
        sample_lengths({"dist": "nope"}, 3, r())


def test_synthetic_deterministic_and_streams_independent():
    a = synthetic(200, rate=5.0, seed=4)
    b = synthetic(200, rate=5.0, seed=4)
    c = synthetic(200, rate=5.0, seed=4, output_len={"dist": "uniform", "lo": 1, "hi": 3})
    assert a.arrivals.tolist() == b.arrivals.tolist()
    assert a.prompt_lens.tolist() == b.prompt_lens.tolist()
    assert a.arrivals.tolist() == c.arrivals.tolist()           # own stream per quantity
    assert a.prompt_lens.tolist() == c.prompt_lens.tolist()
    assert a.output_lens.tolist() != c.output_lens.tolist()
    assert synthetic(200, rate=5.0, seed=5).arrivals.tolist() != a.arrivals.tolist()
    t = synthetic(300, tenants={"a": 3, "b": 1}, priorities=[0, 1], seed=1)
    tenants = [s.tenant for s in t]
    assert 0.65 < tenants.count("a") / 300 < 0.85
    assert {s.priority for s in t} == {0, 1}


def test_shared_prefix_groups_share_exactly_the_prefix():
    w = shared_prefix(num_groups=3, prefix_len=100, suffix_len={"dist": "uniform", "lo": 5,
                      "hi": 20}, output_len=4, num_requests=60, rate=10.0, seed=2)
    assert w.block_size == 100
    by_group: dict[tuple, list] = {}
    for s in w:
        by_group.setdefault(s.hash_ids, []).append(s)
        assert 105 <= s.prompt_len <= 120
    assert len(by_group) == 3
    heads = []
    for members in by_group.values():
        toks = [w.prompt_tokens(s) for s in members]
        for t in toks[1:]:
            assert np.array_equal(t[:100], toks[0][:100])
            assert t[100] != toks[0][100] or not np.array_equal(t[100:105], toks[0][100:105])
        heads.append(toks[0][:100])
    assert not np.array_equal(heads[0], heads[1])


def test_shared_prefix_varied_lengths_use_gcd_blocks_and_zipf_popularity():
    w = shared_prefix(num_groups=4, prefix_len={"dist": "uniform", "lo": 10, "hi": 20},
                      suffix_len=0, output_len=1, num_requests=400, group_zipf_a=1.5, seed=0,
                      tenant_per_group=True)
    plens = {s.hash_ids: s.prompt_len for s in w}               # suffix 0: prompt == prefix
    assert all(len(h) * w.block_size == p for h, p in plens.items())
    ids = [h for hs in plens for h in hs]
    assert len(ids) == len(set(ids))                             # groups own disjoint hashes
    counts = {}
    for s in w:
        counts[s.tenant] = counts.get(s.tenant, 0) + 1
    assert counts["group0"] > counts["group3"] * 3


def test_sessions_turn_prompt_extends_previous_prompt_and_answer():
    w = sessions(num_sessions=20, turns={"dist": "uniform", "lo": 2, "hi": 5}, question_len=
                 {"dist": "uniform", "lo": 5, "hi": 30}, output_len={"dist": "uniform", "lo": 1,
                 "hi": 40}, think_time=5.0, rate=1.0, system_prompt_len=16, seed=7)
    by_session: dict[int, list] = {}
    for s in w:
        by_session.setdefault(s.session, []).append(s)
    assert [s.rid for s in w] == list(range(len(w)))
    assert np.all(np.diff(w.arrivals) >= 0)
    assert len(by_session) == 20
    sys0 = None
    for turns in by_session.values():
        assert 2 <= len(turns) <= 5
        for prev, nxt in zip(turns, turns[1:]):
            assert nxt.arrival >= prev.arrival
            ctx = np.concatenate([w.prompt_tokens(prev), w.output_tokens(prev)])
            cur = w.prompt_tokens(nxt)
            assert nxt.prompt_len - ctx.size >= 5
            assert np.array_equal(cur[:ctx.size], ctx)
            assert np.shares_memory(cur, ctx[:1]) or np.shares_memory(cur, w.prompt_tokens(prev))
        first = w.prompt_tokens(turns[0])[:16]
        sys0 = first if sys0 is None else sys0
        assert np.array_equal(first, sys0)                       # one system prompt for all
    s0 = [t for t in by_session.values()][0]
    assert not np.array_equal(w.prompt_tokens(s0[0])[16:21],
                              w.prompt_tokens(list(by_session.values())[1][0])[16:21])


def test_sessions_max_context_and_determinism():
    kw = dict(num_sessions=10, turns=8, question_len=50, output_len=50, rate=2.0, seed=1)
    full = sessions(**kw)
    assert len(full) == 80
    capped = sessions(max_context=350, **kw)
    assert len(capped) == 30                                     # turns 1..3 end at 100,200,300
    assert max(s.prompt_len + s.output_len for s in capped) <= 350
    again = sessions(max_context=350, **kw)
    assert [s.arrival for s in again] == [s.arrival for s in capped]
    assert all(np.array_equal(again.prompt_tokens(a), capped.prompt_tokens(b))
               for a, b in zip(again, capped))


def test_registry_builders_and_slicing_arguments():
    assert {"azure_conv", "azure_code", "csv", "mooncake", "sharegpt", "poisson",
            "shared_prefix", "sessions"} <= set(WORKLOADS.names())
    w = WORKLOADS.create("azure_conv", num_requests=500, rate=8.0)
    assert len(w) == 500 and w.mean_rate() == pytest.approx(8.0)
    d = WORKLOADS.create("azure_code", duration_s=60.0)
    assert d.arrivals.max() < 60.0 and len(d) > 10
    ts = WORKLOADS.create("azure_conv", num_requests=50, time_scale=2.0)
    base = WORKLOADS.create("azure_conv", num_requests=50)
    assert np.allclose(ts.arrivals, base.arrivals * 2.0)
    p = WORKLOADS.create("poisson", rate=20.0, duration_s=30.0, seed=3,
                         prompt_len=16, output_len=4)
    assert p.arrivals.max() < 30.0 and 450 < len(p) < 750
    assert p.prompt_lens.tolist() == [16] * len(p)
    g = WORKLOADS.create("gamma", num_requests=100, rate=5.0, cv=3.0)
    assert len(g) == 100
    sp = WORKLOADS.create("shared_prefix", num_requests=30, num_groups=2)
    assert len({s.hash_ids for s in sp}) == 2
    ss = WORKLOADS.create("sessions", num_requests=25, num_sessions=20)
    assert len(ss) == 25


def test_build_accepts_hydra_containers():
    from omegaconf import OmegaConf
    cfg = OmegaConf.create({"num_requests": 20, "rate": 2.0, "seed": 1,
                            "prompt_len": {"dist": "uniform", "lo": 8, "hi": 9},
                            "tenants": ["x", "y"]})
    w = build("poisson", **cfg)
    assert len(w) == 20 and set(w.prompt_lens.tolist()) <= {8, 9}
    assert {s.tenant for s in w} <= {"x", "y"}


def test_path_builders_take_the_common_arguments(tmp_path):
    import json
    c = tmp_path / "t.csv"
    c.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" +
                 "".join(f"{i * 0.5},{10 + i},{2 + i}\n" for i in range(40)))
    w = WORKLOADS.create("csv", path=str(c), num_requests=10, rate=4.0, seed=1)
    assert len(w) == 10 and w.mean_rate() == pytest.approx(4.0) and w.seed == 1
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps({"timestamp": i * 100, "input_length": 8, "output_length": 2,
                                     "hash_ids": [0, i]}) + "\n" for i in range(30)))
    mw = WORKLOADS.create("mooncake", path=str(m), block_size=4, duration_s=1.0, time_scale=0.5)
    assert len(mw) == 20 and mw.arrivals.max() < 1.0            # gaps 0.05 s after scaling
    s = tmp_path / "s.json"
    convs = [{"conversations": [{"from": "human", "value": "q" * (i + 1)},
                                {"from": "gpt", "value": "a"}]} for i in range(50)]
    s.write_text(json.dumps(convs))
    sw = WORKLOADS.create("sharegpt", path=str(s), num_requests=12, rate=3.0, seed=2)
    assert len(sw) == 12 and sw.prompt_lens.tolist() == list(range(1, 13))
    sd = WORKLOADS.create("sharegpt", path=str(s), duration_s=5.0, rate=3.0, seed=2)
    assert 0 < len(sd) < 50 and sd.arrivals.max() < 5.0
