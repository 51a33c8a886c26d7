"""Batch formation, each expected sequence worked out by hand (page_size 4)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_core import drain, make_req, make_sched, step

from twinserve.core.graph_plan import DEFAULT_PLAN


def test_token_budget_with_chunked_prefill() -> None:
    s = make_sched(max_num_batched_tokens=16, chunk_size=16, cache="none")
    for i in range(3):
        s.add(make_req(i, 10, max_tokens=3))
    assert step(s, 0)[0] == [(0, 10), (1, 6)]           # B gets the 6 tokens left
    assert step(s, 1)[0] == [(0, 1), (1, 4), (2, 10)]   # A decodes, B finishes its prompt, C fits
    shape, ended = step(s, 2)
    assert shape == [(0, 1), (1, 1), (2, 1)]
    assert [r.rid for r in ended] == [0]                 # A has its 3 tokens
    shape, ended = step(s, 3)
    assert shape == [(1, 1), (2, 1)] and sorted(r.rid for r in ended) == [1, 2]


def test_chunk_size_caps_each_prefill() -> None:
    s = make_sched(max_num_batched_tokens=64, chunk_size=4, cache="none")
    s.add(make_req(0, 10, max_tokens=1))
    assert step(s, 0)[0] == [(0, 4)]
    assert step(s, 1)[0] == [(0, 4)]
    shape, ended = step(s, 2)
    assert shape == [(0, 2)] and ended[0].num_output == 1


def test_without_chunking_a_prompt_waits_for_room() -> None:
    s = make_sched(max_num_batched_tokens=16, chunked_prefill=False, cache="none")
    for i in range(3):
        s.add(make_req(i, 10, max_tokens=3))
    assert step(s, 0)[0] == [(0, 10)]
    assert step(s, 1)[0] == [(0, 1), (1, 10)]
    assert step(s, 2)[0] == [(0, 1), (1, 1), (2, 10)]
    assert step(s, 3)[0] == [(1, 1), (2, 1)]
    assert step(s, 4)[0] == [(2, 1)]
    with pytest.raises(ValueError, match="chunked prefill is off"):
        s.add(make_req(9, 17))


def test_prefill_first_versus_mixed() -> None:
    for mixed, expected in ((True, [(0, 1), (1, 4), (2, 10)]), (False, [(1, 4), (2, 10)])):
        s = make_sched(max_num_batched_tokens=16, chunk_size=16, cache="none", mixed=mixed)
        s.add(make_req(0, 10, max_tokens=3))
        s.add(make_req(1, 10, max_tokens=3))
        assert step(s, 0)[0] == [(0, 10), (1, 6)]
        s.add(make_req(2, 10, max_tokens=3, arrival=1))
        assert step(s, 1)[0] == expected
    # prefill-first: with no prefill work left, the step is all decodes
    assert step(s, 2)[0] == [(0, 1), (1, 1), (2, 1)]


def test_prefix_hit_skips_cached_pages() -> None:
    s = make_sched(cache="radix")
    prefix = list(range(100, 108))
    s.add(make_req(0, prefix + [1, 2], max_tokens=2))
    assert step(s, 0)[0] == [(0, 10)]                  # 2 full pages now cached
    s.add(make_req(1, prefix + [3, 4], max_tokens=2, arrival=1))
    shape, ended = step(s, 1)
    assert shape == [(0, 1), (1, 2)]                   # B computes only its 2 own tokens
    assert [r.rid for r in ended] == [0]
    b = s.get(1)
    assert b is not None and b.num_cached == 8
    assert s.cache.stats.hit_tokens == 8 and s.cache.stats.queried_tokens == 20
    shape, ended = step(s, 2)
    assert shape == [(1, 1)] and ended[0].max_cached == 8


def test_full_prompt_hit_still_computes_a_token() -> None:
    s = make_sched(cache="radix")
    s.add(make_req(0, list(range(8)), max_tokens=1))
    drain(s)
    s.add(make_req(1, list(range(8)), max_tokens=1))
    shape, _ = step(s, 5)
    assert shape == [(1, 4)]  # 8-token prompt: match capped below 8 tokens -> one page hit


def test_preemption_by_recompute_without_cache() -> None:
    s = make_sched(num_pages=6, cache="none")
    s.add(make_req(0, 8, max_tokens=8, arrival=0))
    s.add(make_req(1, 8, max_tokens=8, arrival=1))
    shapes = [step(s, t)[0] for t in range(11)]
    assert shapes[0] == [(0, 8), (1, 8)]
    assert shapes[1:5] == [[(0, 1), (1, 1)]] * 4
    assert shapes[5] == [(0, 1)]          # A needs a 4th page: B (latest arrival) is preempted
    assert shapes[6] == [(0, 1)]          # B does not fit yet
    assert shapes[7] == [(0, 1)]          # A's 8th token: A finishes
    assert shapes[8] == [(1, 13)]         # B recomputes prompt + its 5 outputs
    assert shapes[9:11] == [[(1, 1)], [(1, 1)]]
    assert not s.has_work
    assert s.page_counts() == (6, 0, 0)


def test_preemption_keeps_the_victims_prefix_cached() -> None:
    s = make_sched(num_pages=6, cache="radix")
    a, b = make_req(0, 8, max_tokens=8, arrival=0), make_req(1, 8, max_tokens=8, arrival=1)
    s.add(a)
    s.add(b)
    shapes = [step(s, t)[0] for t in range(12)]
    assert shapes[5] == [(0, 1)] and b.num_preemptions == 1
    assert shapes[8] == [(1, 5)]          # B hits its own 2 surviving cached pages
    assert b.max_cached == 8 and b.output_ids.tolist() == [7] * 8
    assert not s.has_work


def test_reserve_never_preempts_and_admits_by_worst_case() -> None:
    s = make_sched(num_pages=6, memory="reserve", cache="none")
    s.add(make_req(0, 8, max_tokens=8))   # needs 4 pages up front
    s.add(make_req(1, 8, max_tokens=8))   # 4 more do not fit
    assert step(s, 0)[0] == [(0, 8)]
    ended = drain(s, 1)
    assert [r.num_preemptions for r in ended] == [0, 0]


def test_eos_and_stop_ids_end_a_request() -> None:
    s = make_sched(cache="none", eos=(7,))
    r = make_req(0, 5, max_tokens=10, ignore_eos=False)
    s.add(r)
    _, ended = step(s, 0, token=7)
    assert ended == [r] and r.finish_reason == "stop" and r.output_ids.tolist() == [7]
    s2 = make_sched(cache="none", eos=(7,))
    r2 = make_req(0, 5, max_tokens=3, ignore_eos=True)
    s2.add(r2)
    drain(s2)
    assert r2.finish_reason == "length" and r2.num_output == 3


def test_abort_frees_everything_including_in_flight() -> None:
    s = make_sched(cache="radix")
    r = make_req(0, 10, max_tokens=5)
    s.add(r)
    b = s.schedule(0)
    assert s.abort(0, now=0.5) is r
    assert r.pages  # still in flight: pages stay until the batch completes
    ended = s.complete(b, [1], 1.0)
    assert ended == [r] and r.pages == [] and r.finish_reason == "abort"
    s.check_invariants()
    free, used, cached = s.page_counts()
    assert used == 0 and free + cached == 64


def test_overlap_schedule_before_complete() -> None:
    """schedule(k+1) before complete(k): lengths advance at launch, values arrive later."""
    s = make_sched(cache="radix", eos=(9,))
    r = make_req(0, 6, max_tokens=5, ignore_eos=False)
    s.add(r)
    b1 = s.schedule(0)
    b2 = s.schedule(0.1)               # decodes the not-yet-known first token
    assert b2 is not None and b2.new_tokens == [1] and r.output_ids.tolist() == [-1, -1]
    s.complete(b1, [5], 1.0)
    b3 = s.schedule(1.1)
    s.complete(b2, [9], 2.0)           # EOS: the token sampled in b3 is dropped
    ended = s.complete(b3, [4], 3.0)
    assert ended == [r] and r.output_ids.tolist() == [5, 9] and r.finish_reason == "stop"
    s.check_invariants()
    assert s.page_counts()[1] == 0


def test_over_long_requests_are_rejected_with_a_reason() -> None:
    s = make_sched(max_model_len=32)
    with pytest.raises(ValueError, match="exceeds max_model_len"):
        s.add(make_req(0, 30, max_tokens=5))
    with pytest.raises(ValueError, match="never fit"):
        make_sched(num_pages=2, max_model_len=1000).add(make_req(1, 10, max_tokens=5))


def test_max_running_caps_admission() -> None:
    s = make_sched(max_running=2, cache="none")
    for i in range(3):
        s.add(make_req(i, 4, max_tokens=2))
    assert step(s, 0)[0] == [(0, 4), (1, 4)]
    assert step(s, 1)[0] == [(0, 1), (1, 1)]
    assert step(s, 2)[0] == [(2, 4)]


def test_features_follow_the_batch() -> None:
    s = make_sched(cache="none")
    s.add(make_req(0, 6, max_tokens=3))
    step(s, 0)
    s.add(make_req(1, 5, max_tokens=3))
    b = s.schedule(1)
    f = b.features(DEFAULT_PLAN)
    assert (f.num_decodes, f.num_prefills, f.new_tokens) == (1, 1, 6)
    assert f.decode_ctx == 7 and f.prefill_tokens == 5 and f.prefill_ctx == 5
    assert f.prefill_attn == 5 * 6 // 2 and f.padded_decodes == 1 and f.max_ctx == 7
    assert f.padded_tokens == 16  # a mixed step: its piecewise graph's size
    rec = s.record(b, DEFAULT_PLAN, 1.0, 0.5)
    assert rec.as_row()["new_tokens"] == 6 and rec.used_pages == 4
    np.testing.assert_array_equal(b.reqs[0].output_ids, [7, -1])


def test_watermark_is_waived_when_nothing_runs() -> None:
    from twinserve.core.config import SchedulerConfig
    from twinserve.policies import build_scheduler

    s = build_scheduler(SchedulerConfig(num_pages=6, page_size=4, max_model_len=64), "fcfs", "on_demand",
                        "none", memory_kwargs={"watermark": 0.5})
    s.add(make_req(0, 21, max_tokens=2))  # 6 of 6 pages: above any watermark, but alone it fits
    assert drain(s)[0].num_output == 2


def test_recompute_longer_than_the_budget_runs_alone_without_chunking() -> None:
    s = make_sched(num_pages=8, page_size=4, max_num_batched_tokens=12, chunked_prefill=False, cache="none")
    a, b = make_req(0, 12, max_tokens=12, arrival=0), make_req(1, 4, max_tokens=12, arrival=1)
    s.add(a)
    s.add(b)
    ended = drain(s)
    assert sorted(r.rid for r in ended) == [0, 1] and b.num_preemptions >= 1


def test_dense_layers_follow_the_graph_the_engine_replays() -> None:
    from twinserve.core.batch import BatchFeatures
    from twinserve.core.graph_plan import GraphPlan, dense_layers
    from twinserve.simulator.stretch import DecodeStretch

    assert dense_layers(3, 3, True) == (4, False)  # a decode graph of 4
    assert dense_layers(300, 300, True, max_graph_bs=256) == (320, False)  # decodes beyond the graphs: pieces
    assert dense_layers(130, 2, False) == (144, False)
    assert dense_layers(3000, 2, False) == (3000, True)  # eager above 2048 tokens
    assert dense_layers(130, 2, False, piecewise_max_tokens=0) == (130, True)  # no piecewise graphs
    assert BatchFeatures(new_tokens=7).padded_tokens == 7  # left unset: the new tokens
    s = make_sched(cache="none")
    for i in range(10):
        s.add(make_req(i, 3, max_tokens=5))
    step(s, 0)
    f = DecodeStretch.find(s, 2).features(2, GraphPlan(max_graph_bs=8))
    assert [(x.padded_tokens, x.eager_step) for x in f] == [(16, 0), (16, 0)]  # 10 decodes > 8: pieces
    assert [x.first_decodes for x in f] == [10, 0]
    big = make_sched(cache="none", max_num_batched_tokens=4096, chunk_size=4096, num_pages=1024)
    big.add(make_req(0, 3000, max_tokens=2))
    g = big.schedule(0).features(GraphPlan(piecewise_max_tokens=2048))
    assert (g.padded_tokens, g.eager_step) == (3000, 1)


def test_a_requests_first_decode_is_counted_in_its_step_features() -> None:
    """`BatchFeatures.first_decodes`: decode rows that sample their request's second output,
    whether the first is known (a completed step) or still in flight (overlap scheduling)."""
    from twinserve.core.graph_plan import GraphPlan

    plan = GraphPlan()
    s = make_sched(cache="none")
    s.add(make_req(0, 5, max_tokens=4))
    b = s.schedule(0)
    assert b.features(plan).first_decodes == 0  # the prefill
    s.complete(b, [7], 1.0)
    s.add(make_req(1, 5, max_tokens=4))
    b = s.schedule(1)
    f = b.features(plan)
    assert (f.num_decodes, f.num_prefills, f.first_decodes) == (1, 1, 1)
    s.complete(b, [7, 7], 2.0)
    f = s.schedule(2).features(plan)
    assert (f.num_decodes, f.first_decodes) == (2, 1)  # request 1's first, request 0's second
    o = make_sched(cache="none")
    o.add(make_req(0, 5, max_tokens=4))
    o.schedule(0)
    f = o.schedule(0.5).features(plan)  # the prefill's token still in flight
    assert (f.num_decodes, f.first_decodes) == (1, 1)
