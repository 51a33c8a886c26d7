"""Shared builders for the simulator tests (fixtures only; test files import nothing local)."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from twinserve.core.config import SchedulerConfig
from twinserve.core.model_shapes import get_shape
from twinserve.core.workload import WORKLOADS, Workload
from twinserve.policies.factory import build_scheduler
from twinserve.simulator import COST_MODELS, SimConfig, SimResult, get_hardware, simulate


def _run(workload: Workload, *, scheduling: str = "fcfs", memory: str = "on_demand",
         cache: str = "radix", cost: Any = None, model: str = "llama3-8b", hardware: str = "h200",
         checked: bool = False, sched_kwargs: dict | None = None, **kw: Any) -> SimResult:
    """Simulate ``workload``; SchedulerConfig fields and SimConfig fields go in ``kw``."""
    sc_fields = set(SchedulerConfig.__dataclass_fields__)
    sc = SchedulerConfig(**{k: v for k, v in kw.items() if k in sc_fields})
    sim = SimConfig(**{k: v for k, v in kw.items() if k not in sc_fields})
    if cost is None:
        cost = COST_MODELS.create("roofline", shape=get_shape(model), hardware=get_hardware(hardware))

    def make() -> Any:
        return build_scheduler(SchedulerConfig(**{f: getattr(sc, f) for f in sc_fields}),
                               scheduling=scheduling, memory=memory, cache=cache,
                               scheduling_kwargs=sched_kwargs, checked=checked)

    return simulate(workload, make, cost, sim)


@pytest.fixture
def run_sim() -> Callable[..., SimResult]:
    return _run


@pytest.fixture
def poisson() -> Callable[..., Workload]:
    def make(n: int = 50, rate: float = 20.0, seed: int = 0, **kw: Any) -> Workload:
        kw.setdefault("prompt_len", {"dist": "uniform", "lo": 16, "hi": 600})
        kw.setdefault("output_len", {"dist": "uniform", "lo": 1, "hi": 120})
        return WORKLOADS.create("poisson", num_requests=n, rate=rate, seed=seed, **kw).with_vocab(1024)

    return make
