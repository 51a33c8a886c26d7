"""The capture schedule of a GraphPlan and the comparison of the ranks' capture reports."""

from __future__ import annotations

import pytest

from twinserve.core.capture_schedule import (CaptureItem, CaptureRecord, capture_schedule, decode_graph_sizes,
                                             first_difference, records_of, report_of, token_graph_sizes)
from twinserve.core.graph_plan import HYBRID_FULL_MAX_TOKENS, GraphPlan


def _pairs(items):
    return [(i.kind, i.size) for i in items]


def test_decode_sizes_then_token_sets_largest_first():
    plan = GraphPlan(max_graph_bs=16, piecewise_max_tokens=64, token_graph_mode="hybrid")
    full = [("full", t) for t in (64, 48, 32, 16)]
    pieces = [("pieces", t) for t in (64, 48, 32, 16)]
    assert _pairs(capture_schedule(plan)) == [("decode", b) for b in (16, 8, 4, 2, 1)] + full + pieces


@pytest.mark.parametrize("mode,kinds", [("full", ["full"]), ("piecewise", ["pieces"]), ("hybrid", ["full", "pieces"])])
def test_each_mode_lists_its_sets(mode, kinds):
    plan = GraphPlan(max_graph_bs=8, piecewise_max_tokens=32, token_graph_mode=mode)
    token = [i.kind for i in capture_schedule(plan) if i.kind != "decode"]
    assert list(dict.fromkeys(token)) == kinds


def test_hybrid_full_set_is_capped():
    plan = GraphPlan(max_graph_bs=1, piecewise_max_tokens=4096, token_graph_mode="hybrid")
    sched = capture_schedule(plan)
    assert max(i.size for i in sched if i.kind == "full") == HYBRID_FULL_MAX_TOKENS
    assert max(i.size for i in sched if i.kind == "pieces") == 4096
    assert [i.size for i in sched if i.kind == "pieces"] == sorted(token_graph_sizes(4096), reverse=True)


def test_no_token_graphs_lists_decode_only():
    sched = capture_schedule(GraphPlan(max_graph_bs=32).without_token_graphs())
    assert _pairs(sched) == [("decode", b) for b in reversed(decode_graph_sizes(32))]


def _recs(*pairs, reduces=3):
    return [CaptureRecord(k, s, reduces, 1) for k, s in pairs]


def test_equal_reports_have_no_difference():
    a = _recs(("decode", 8), ("decode", 4))
    assert first_difference({0: a, 1: list(a), 2: list(a)}) is None


def test_other_order_names_rank_and_position():
    a = _recs(("decode", 8), ("decode", 4), ("decode", 2))
    b = _recs(("decode", 8), ("decode", 2), ("decode", 4))
    rank, msg = first_difference({0: a, 1: list(a), 2: b})
    assert rank == 2
    assert "rank 2's graph capture differs from rank 0's at position 1" in msg
    assert "rank 0 has decode 4 (3 all-reduces, 1 all-gathers), rank 2 has decode 2" in msg


def test_missing_graph_and_other_collectives_are_differences():
    a = _recs(("decode", 8), ("decode", 4))
    rank, msg = first_difference({0: a, 1: a[:1]})
    assert rank == 1 and "position 1" in msg and "rank 1 has nothing" in msg
    rank, msg = first_difference({0: a, 1: _recs(("decode", 8), ("decode", 4), reduces=2)})
    assert "position 0" in msg and "(2 all-reduces" in msg


def test_report_round_trip():
    a = _recs(("full", 64), ("pieces", 16))
    assert records_of(report_of(a)) == a
    assert CaptureRecord.planned(CaptureItem("decode", 4)).describe() == "decode 4"
