"""`constant`: every step takes the same time (queueing checks, policy unit tests)."""

from __future__ import annotations

from typing import Any

from twinserve.simulator.cost.base import COST_MODELS, CostModel, Max


@COST_MODELS.register("constant")
class ConstantCostModel(CostModel):
    """Device time ``step_s`` for any batch; host time ``cpu_s`` (0 by default), overlapped or not.

    With ``max_running=1`` and one-token outputs this turns a replica into an M/D/1 server.
    """

    def __init__(self, step_s: float = 0.01, cpu_s: float = 0.0, overlap: bool = True) -> None:
        if step_s <= 0:
            raise ValueError(f"step_s must be > 0, got {step_s}")
        self.step_s, self.cpu_s, self.overlap = float(step_s), float(cpu_s), bool(overlap)

    def _gpu(self, x: Any, mx: Max) -> Any:
        return x.num_seqs * 0.0 + self.step_s

    def _cpu(self, x: Any, mx: Max) -> Any:
        return x.num_seqs * 0.0 + self.cpu_s

    def describe(self) -> dict[str, Any]:
        return {"name": "constant", "step_s": self.step_s, "cpu_s": self.cpu_s, "overlap": self.overlap}
