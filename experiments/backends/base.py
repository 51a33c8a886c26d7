"""The backend interface of the experiment app: a workload in, request and step tables out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping

import pandas as pd

from twinserve.core.model_shapes import ModelShape
from twinserve.core.registry import Registry
from twinserve.core.workload import Workload
from twinserve.simulator.hardware import GPUSpec


@dataclass(slots=True)
class RunContext:
    """What every backend gets: the resolved config (plain dicts), the model shape, the hardware,
    the run's output folder, and whether to show progress."""

    cfg: Mapping[str, Any]
    shape: ModelShape
    hardware: GPUSpec
    out_dir: Path
    progress: bool


@dataclass(slots=True)
class BackendResult:
    """Per-request rows (`core.metrics.requests_frame` columns), per-step rows (`StepRecord`
    columns; may be empty for a backend that cannot see steps), requests the backend refused
    (rid, reason), and backend-specific metadata for summary.json (``meta``: run facts that do
    not change between identical runs; ``timing``: wall-clock facts that do)."""

    requests: pd.DataFrame
    steps: pd.DataFrame
    rejected: list[tuple[int, str]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, Any] = field(default_factory=dict)


class Backend(ABC):
    """Runs one workload to completion. Contract: no global state; heavy imports (torch, the
    server) happen inside ``run`` so that choosing the simulator never imports them.
    ``multi_replica``: whether it runs ``replicas > 1`` behind ``router`` (else a run asking for
    several is refused before it starts)."""

    multi_replica: ClassVar[bool] = False

    @abstractmethod
    def run(self, ctx: RunContext, workload: Workload) -> BackendResult: ...


BACKENDS: Registry[Backend] = Registry("backend")
