"""Rows in another order on the device change nothing a request sees: the CPU engine gives the
same greedy tokens with ``row_order="longest_first"``, with overlap, chunked prefill,
speculation and preemption."""

from __future__ import annotations

import numpy as np
import pytest

from twinserve.core.batch import Batch
from twinserve.core.request import Req
from twinserve.core.row_order import ROW_ORDERS, longest_first, permuted
from twinserve.core.sampling import SamplingParams


def _batch(starts, new, drafts=None):
    n = len(starts)
    reqs = [Req(i, [1] * (s + k), SamplingParams(max_tokens=4)) for i, (s, k) in enumerate(zip(starts, new))]
    return Batch(7, reqs, list(starts), list(new), [True] * n, list(range(n)), [k == 1 for k in new], 3, drafts)


def test_longest_first_sorts_rows_by_attended_context_and_keeps_each_row_whole():
    b = _batch([10, 500, 0, 99], [1, 1, 64, 1], drafts=[0, 2, 0, 1])
    got = longest_first(b)
    assert [r.rid for r in got.reqs] == [1, 3, 2, 0]  # contexts 501, 100, 64, 11
    assert got.starts == [500, 99, 0, 10] and got.new_tokens == [1, 1, 64, 1]
    assert got.out_pos == [1, 3, 2, 0] and got.is_decode == [True, True, False, True]
    assert got.drafts == [2, 1, 0, 0] and got.decode_shared_ctx == 3 and got.step == 7
    already = _batch([500, 99, 10], [1, 1, 1])
    assert longest_first(already) is already and ROW_ORDERS.get("scheduled")(b) is b
    with pytest.raises(ValueError, match="permutation"):
        permuted(b, [0, 0, 1, 2])


def _run(model, prompts, spec=None, **kw):
    from twinserve.engine.engine import Engine, EngineConfig

    eng = Engine(EngineConfig(model=str(model), device="cpu", checked=True, spec=spec or {}, **kw))
    try:
        params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
        reqs = [Req(i, p, params, arrival=0.0) for i, p in enumerate(prompts)]
        got = {r.rid: [] for r in reqs}
        for r in reqs:
            eng.add(r)
        steps = 0
        while eng.has_work():
            steps += 1
            assert steps < 1000, "requests never finished"
            for out in eng.step():
                got[out.rid].extend(out.new_token_ids)
            eng.scheduler.check_invariants()
        return [got[i] for i in range(len(prompts))]
    finally:
        eng.shutdown()


@pytest.mark.parametrize("mix", ["overlap", "chunked", "spec", "preempt"])
def test_longest_first_gives_the_same_greedy_tokens(tiny_model_dir, mix):
    rng = np.random.default_rng(3)
    prompts = [np.tile(rng.integers(3, 1000, size=p), 40)[:n].astype(np.int32)
               for n, p in ((40, 7), (150, 5), (23, 23), (90, 9), (5, 5))]
    kw: dict = dict(cpu_kv_tokens=4096)
    spec = None
    if mix == "overlap":
        kw["overlap"] = True
    if mix == "chunked":
        kw["scheduler"] = {"max_num_batched_tokens": 32, "chunked_prefill": True, "chunk_size": 32}
    if mix == "spec":
        spec = {"method": "ngram", "num_tokens": 3, "ngram_min": 1}
    if mix == "preempt":
        kw = dict(num_pages=18)
    model = tiny_model_dir("tiny-llama")
    want = _run(model, prompts, spec, **kw)
    got = _run(model, prompts, spec, row_order="longest_first", **kw)
    assert got == want and all(len(t) == 24 for t in got)
