"""`GraphPlan`: its invariants, its knobs, and the features of a step under it."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields

import pytest

from twinserve.core.batch import Batch
from twinserve.core.config import SchedulerConfig
from twinserve.core.graph_plan import DEFAULT_PLAN, GraphPlan


def test_a_plan_is_frozen_and_checks_its_fields():
    with pytest.raises(FrozenInstanceError):
        DEFAULT_PLAN.piecewise_max_tokens = 0  # type: ignore[misc]
    for bad in (dict(token_graph_mode="whole"), dict(max_graph_bs=-1), dict(piecewise_max_tokens=-1),
                dict(max_running=0), dict(gqa_group=0)):
        with pytest.raises(ValueError):
            GraphPlan(**bad)
    assert DEFAULT_PLAN.without_token_graphs() == GraphPlan(piecewise_max_tokens=0)


def test_from_knobs_reads_its_fields_and_leaves_nulls_to_the_defaults():
    knobs = {"name": "fcfs", "max_running": 64, "piecewise_max_tokens": 8192, "token_graph_mode": None,
             "hybrid_decode_heavy": False, "max_graph_bs": None}
    p = GraphPlan.from_knobs(knobs, max_running=64, gqa_group=2)
    assert p == GraphPlan(piecewise_max_tokens=8192, hybrid_decode_heavy=False, max_running=64, gqa_group=2)


def test_the_scheduling_records_hold_no_engine_fields():
    plan_fields = {f.name for f in fields(GraphPlan)} - {"max_running"}
    assert not plan_fields & {f.name for f in fields(SchedulerConfig)}
    assert not plan_fields & {f.name for f in fields(Batch)}


def test_a_step_takes_the_features_of_the_plan_it_runs_under():
    class R:  # just what Batch.features reads
        num_tokens = prompt_len = 0

    b = Batch(0, [R(), R()], [0, 100], [300, 1], [True, True], [0, 0], [False, True])
    assert b.features(DEFAULT_PLAN).padded_tokens == 320  # a token graph's padded size (32 apart here)
    off = b.features(DEFAULT_PLAN.without_token_graphs())
    assert (off.padded_tokens, off.eager_step) == (301, 1)
