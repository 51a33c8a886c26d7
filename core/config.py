"""`SchedulerConfig`: batch-formation knobs and the size of the page pool."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from twinserve.core.errors import bad_value


@dataclass(slots=True)
class SchedulerConfig:
    """Batch formation and memory geometry; policies are chosen separately, by name.

    - ``max_num_batched_tokens``: token budget of one step (prefill chunk tokens + one per decode).
    - ``max_running``: most requests holding KV at once.
    - ``chunked_prefill`` / ``chunk_size``: split long prompts into chunks of at most
      ``chunk_size`` tokens; without it a prompt is prefilled whole (so it must fit the budget).
    - ``mixed``: decodes and prefill chunks share a step; if false, prefill-first: a step is all
      prefill whenever a prefill can run, otherwise all decode.
    - ``page_size`` × ``num_pages``: the KV pool, in tokens per page and pages.
    - ``max_model_len``: longest prompt + output a request may have; longer ones are rejected.

    How a backend runs the steps (CUDA graphs and their features) is its `core.graph_plan.GraphPlan`.
    """

    max_num_batched_tokens: int = 8192
    max_running: int = 256
    chunked_prefill: bool = True
    chunk_size: int = 8192
    mixed: bool = True
    page_size: int = 16
    num_pages: int = 8192
    max_model_len: int = 32768

    def validate(self) -> None:
        """Every size is at least 1 (else a `UserError` naming the field); ``chunk_size`` is
        capped at the step budget."""
        for name in ("max_num_batched_tokens", "max_running", "chunk_size", "page_size", "num_pages",
                     "max_model_len"):
            if getattr(self, name) < 1:
                raise bad_value(f"SchedulerConfig.{name}", getattr(self, name), "allowed: >= 1")
        if self.chunk_size > self.max_num_batched_tokens:
            self.chunk_size = self.max_num_batched_tokens

    @property
    def capacity_tokens(self) -> int:
        return self.page_size * self.num_pages


def scheduler_default(name: str) -> Any:
    """The default of the `SchedulerConfig` field ``name``, for the configs and constructors
    that take the same knob (so that it is written once)."""
    for f in fields(SchedulerConfig):
        if f.name == name:
            return f.default
    raise KeyError(f"SchedulerConfig has no field {name!r}")
