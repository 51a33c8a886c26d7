"""`build_scheduler`: a `Scheduler` from policy names (what Hydra configs give)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from twinserve.core.config import SchedulerConfig
from twinserve.core.scheduler import Scheduler
from twinserve.policies.memory.allocator import PageAllocator
from twinserve.policies.registries import CACHE, MEMORY, SCHEDULING


def build_scheduler(
    config: SchedulerConfig,
    scheduling: str = "fcfs",
    memory: str = "on_demand",
    cache: str = "radix",
    scheduling_kwargs: Mapping[str, Any] | None = None,
    memory_kwargs: Mapping[str, Any] | None = None,
    cache_kwargs: Mapping[str, Any] | None = None,
    eos_token_ids: Iterable[int] = (),
    checked: bool = False,
) -> Scheduler:
    """Build the policies by registry name (or ``module:Class``) and wire a `Scheduler`.

    ``checked`` makes the page allocator verify every free (tests and debugging).
    """
    config.validate()
    return Scheduler(
        config,
        SCHEDULING.create(scheduling, **dict(scheduling_kwargs or {})),
        MEMORY.create(memory, **dict(memory_kwargs or {})),
        CACHE.create(cache, page_size=config.page_size, **dict(cache_kwargs or {})),
        PageAllocator(config.num_pages, checked=checked),
        eos_token_ids=eos_token_ids,
    )
