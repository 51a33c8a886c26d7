"""The simulator's price of a draft model's proposals: host-clock time added before each step
that has verify rows (the engine drafts inside ``schedule()``, before the step launches)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Protocol

from twinserve.core.batch import Batch
from twinserve.core.graph_plan import GraphPlan
from twinserve.core.spec import SpecConfig, layer_draft_depth
from twinserve.core.spec_accept import AcceptanceModel
from twinserve.simulator.cost.base import CostModel


class DraftPrice(Protocol):
    """``price(cost, plan, batch)``: seconds a draft model's proposals add before ``batch``, a
    step with verify rows (``batch.drafts``)."""

    def __call__(self, cost: CostModel, plan: GraphPlan, batch: Batch) -> float: ...


@dataclass(frozen=True)
class MeasuredDraftPrice:
    """An engine's measured mean per drafting step (``spec_decode_draft_s_per_step`` of an
    acceptance file), the same for every step."""

    seconds: float

    def __call__(self, cost: CostModel, plan: GraphPlan, batch: Batch) -> float:
        return self.seconds


@dataclass(frozen=True)
class LayerDraftPrice:
    """``spec.draft=layers:N`` priced from the cost model: the engine proposes ``k`` positions
    for the step's verify rows, each one decode forward of the target's first N of its L layers
    over those rows (engine/spec_draft_paged.py), so position j costs ``fraction`` (N / L) of
    the device time of a decode step of those rows at their context plus j, and the host
    launch of such a step (its attention plan and graph replay), one after the other. An
    estimate: the profile holds no draft steps."""

    k: int
    fraction: float

    def __call__(self, cost: CostModel, plan: GraphPlan, batch: Batch) -> float:
        rows = [(r, s) for r, s, d in zip(batch.reqs, batch.starts, batch.drafts or ()) if d > 0]
        reqs, starts = [r for r, _ in rows], [s for _, s in rows]
        n = len(starts)
        total = 0.0
        for j in range(self.k if n else 0):
            probe = Batch(0, reqs, [s + j for s in starts], [1] * n, [True] * n, [0] * n, [True] * n)
            f = probe.features(plan)
            total += self.fraction * cost.step_time(f) + cost.host_parts(f).launch
        return total


def draft_price(spec: SpecConfig, accept: AcceptanceModel, num_layers: int) -> DraftPrice | None:
    """The engine's measurement when the acceptance file has one, else for ``layers:N`` the
    cost model's estimate, else None (prompt lookup proposes on the host for next to nothing;
    a draft checkpoint without a measurement is not priced, with a warning)."""
    if accept.draft_step_s:
        return MeasuredDraftPrice(accept.draft_step_s)
    if spec.method != "draft" or num_layers < 1:
        return None
    depth = layer_draft_depth(spec.draft, num_layers)
    if depth is None:
        warnings.warn(f"spec.draft={spec.draft}: the simulator prices a draft checkpoint's proposals only from an "
                      "engine's measurement (spec.acceptance_file with spec_decode_draft_s_per_step); here they "
                      "cost nothing", UserWarning, stacklevel=2)
        return None
    return LayerDraftPrice(spec.num_tokens, depth / num_layers)
