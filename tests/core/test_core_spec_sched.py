"""The scheduler with speculative decoding, backend-free: a deterministic toy "model" (the next
token is a function of the last two) stands in for the engine. Greedy output with speculation
equals output without it, the page invariant holds after every step (with rejections, page
pressure, preemption, EOS and prefix hits), and the token budget counts each verify row's k+1."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers_core import make_req, make_sched
from twinserve.core.graph_plan import DEFAULT_PLAN
from twinserve.core.spec import SpecConfig
from twinserve.core.spec_step import SpecDecoding

V = 11  # a small vocabulary: the toy model's outputs cycle, so prompt lookup often matches


def next_token(ctx: np.ndarray) -> int:
    return int((3 * ctx[-1] + ctx[-2] + 1) % V) if ctx.size > 1 else int(ctx[-1] % V)


def run(sched, reqs, spec_k: int, budget_seen: list[int] | None = None) -> dict[int, list[int]]:
    if spec_k:
        sched.spec = SpecDecoding(SpecConfig("ngram", spec_k, 1, 3))
    for r in reqs:
        sched.add(r)
    t = 0.0
    for _ in range(5000):
        if not sched.has_work:
            break
        b = sched.schedule(t)
        if b is None:
            t += 1.0
            continue
        if budget_seen is not None and b.drafts is not None:  # a step with verify rows
            budget_seen.append(b.num_tokens)
        toks = np.full(len(b), -1, dtype=np.int64)
        verified = [None] * len(b)
        for i, r in enumerate(b.reqs):
            if not b.emits[i]:
                continue
            s, n = b.starts[i], b.new_tokens[i]
            d = b.drafts[i] if b.drafts is not None else 0
            ctx = r.tokens[: s + n]  # the row's inputs: known tokens, then its draft
            # the target's token after each of the row's last d + 1 positions
            outs = [next_token(ctx[: s + n - d + j]) for j in range(d + 1)]
            toks[i] = outs[-1]
            verified[i] = np.asarray(outs, dtype=np.int64)
        sched.complete(b, toks, t + 0.5, verified)
        sched.check_invariants()
        for i, r in enumerate(b.reqs):  # a verified row keeps the pages of its accepted KV only
            if b.drafts is not None and b.drafts[i] and r.state.value == "running":
                assert len(r.pages) == -(-r.num_computed // 4), r
        t += 1.0
    assert not sched.has_work
    free, used, cached = sched.page_counts()
    assert used == 0
    return {r.rid: r.output_ids.tolist() for r in reqs}


def _reqs(lens, max_tokens, eos_ok: bool):
    rng = np.random.default_rng(len(lens))
    return [make_req(i, rng.integers(0, V, size=n), max_tokens=mt, ignore_eos=not eos_ok)
            for i, (n, mt) in enumerate(zip(lens, max_tokens))]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lens=st.lists(st.integers(2, 40), min_size=1, max_size=6), out=st.integers(1, 30),
       k=st.integers(1, 5), pages=st.integers(12, 64), budget=st.integers(8, 64),
       eos=st.booleans(), chunked=st.booleans())
def test_spec_equals_plain_and_keeps_invariants(lens, out, k, pages, budget, eos, chunked):
    max_tokens = [out + (i % 3) for i in range(len(lens))]
    if any(-(-(n + m) // 4) > pages for n, m in zip(lens, max_tokens)):
        return  # a request that can never fit is refused by add(); not what this test is about
    cfg = dict(num_pages=pages, max_num_batched_tokens=max(budget, 41 if not chunked else 8),
               chunked_prefill=chunked, chunk_size=16)
    ends = (5,) if eos else ()
    want = run(make_sched(eos=ends, **cfg), _reqs(lens, max_tokens, eos), 0)
    sched = make_sched(eos=ends, **cfg)
    seen: list[int] = []
    got = run(sched, _reqs(lens, max_tokens, eos), k, seen)
    assert got == want
    # verify rows fit the budget with their k+1 tokens (only a lone recomputed prompt may exceed it)
    assert all(n <= cfg["max_num_batched_tokens"] for n in seen)
    assert sched.spec.num_accepted_tokens <= sched.spec.num_draft_tokens
    assert (sched.spec.reached_per_pos >= sched.spec.accepted_per_pos).all()


def test_verify_rows_count_k_plus_one_and_accept():
    s = make_sched(num_pages=64, max_num_batched_tokens=64)
    s.spec = SpecDecoding(SpecConfig("ngram", 3, 1, 2))
    # a prompt whose tail "1 2" occurred before, followed by 3 4 5: the draft is [3, 4, 5]
    r = make_req(0, [1, 2, 3, 4, 5, 9, 1, 2], max_tokens=10)
    s.add(r)
    b = s.schedule(0.0)
    s.complete(b, [3], 1.0)  # prefill samples 3 (the output so far: 3); tail "2 3" -> draft [4, 5, 9]
    b = s.schedule(1.0)
    assert b.drafts == [3] and b.new_tokens == [4] and not b.is_decode[0]
    assert r.tokens[b.starts[0]: b.starts[0] + 4].tolist() == [3, 4, 5, 9]
    f = b.features(DEFAULT_PLAN)  # what a cost model prices: a row of 1 + 3 new tokens after its context
    assert (f.new_tokens, f.num_decodes, f.prefill_tokens, f.prefill_ctx) == (4, 0, 4, b.starts[0] + 4)
    pages_before = len(r.pages)
    # the target agrees with 4 and 5, then says 7: outputs 3, 4, 5, 7
    s.complete(b, [0], 2.0, [np.array([4, 5, 7, 8])])
    assert r.output_ids.tolist() == [3, 4, 5, 7]
    assert r.num_computed == r.num_tokens - 1 == 8 + 3
    assert len(r.pages) == -(-r.num_computed // 4) <= pages_before
    assert (s.spec.num_drafts, s.spec.num_draft_tokens, s.spec.num_accepted_tokens) == (1, 3, 2)
    assert s.spec.accepted_per_pos.tolist() == [1, 1, 0]
    assert s.spec.reached_per_pos.tolist() == [1, 1, 1]  # position 2 was checked and rejected
    assert s.spec.proposed_len.tolist() == [0, 0, 0, 1]
    assert s.spec.step_counts[b.step] == [3, 2]
    s.check_invariants()


def test_no_speculation_above_max_batch_size():
    """spec.max_batch_size=1: a lone request speculates, two running ones decode plainly."""
    for n, want_drafts in ((1, True), (2, False)):
        s = make_sched(num_pages=64, max_num_batched_tokens=64)
        s.spec = SpecDecoding(SpecConfig("ngram", 3, 1, 2, max_batch_size=1))
        reqs = [make_req(i, [1, 2, 3, 4, 5, 9, 1, 2], max_tokens=10) for i in range(n)]
        for r in reqs:
            s.add(r)
        b = s.schedule(0.0)
        s.complete(b, [3] * n, 1.0)
        b = s.schedule(1.0)
        assert (b.drafts is not None) == want_drafts
