"""The replica loop modes: one class each, picked by name from `SimConfig`."""

from __future__ import annotations

from typing import Any

import pytest

from twinserve.simulator import SimConfig
from twinserve.simulator.replica_lagged import LaggedReplica
from twinserve.simulator.replica_pipelined import PipelinedReplica
from twinserve.simulator.replica_plain import PlainReplica
from twinserve.simulator.replicas import REPLICA_LOOPS, make_replica


def test_each_mode_has_its_class() -> None:
    assert dict(REPLICA_LOOPS) == {"plain": PlainReplica, "lagged": LaggedReplica, "pipelined": PipelinedReplica}
    with pytest.raises(TypeError):
        REPLICA_LOOPS["other"] = PlainReplica  # type: ignore[index]


@pytest.mark.parametrize("kw,mode", [(dict(), "plain"), (dict(lag_arrivals=True), "lagged"),
                                     (dict(pipeline=True), "pipelined"),
                                     (dict(pipeline=True, lag_arrivals=True), "pipelined")])
def test_sim_config_names_its_loop(kw: dict, mode: str) -> None:
    assert SimConfig(**kw).loop == mode


def test_an_unknown_mode_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="known: lagged, pipelined, plain"):
        make_replica("overlap", None)  # type: ignore[arg-type]


@pytest.mark.parametrize("kw", [dict(), dict(lag_arrivals=True), dict(pipeline=True)])
def test_every_mode_serves_the_workload(run_sim: Any, poisson: Any, kw: dict) -> None:
    w = poisson(n=30, rate=20.0, seed=4)
    r = run_sim(w, num_pages=300, check_invariants=True, checked=True, **kw)
    assert len(r.requests) == 30 and r.unfinished == 0 and not r.rejected
    assert (r.stretch_steps > 0) == (not kw.get("pipeline", False))
