"""Policy plugins, each registered by name: scheduling, memory, cache."""

from twinserve.policies import cache, memory, scheduling  # noqa: F401  (registers built-ins)
from twinserve.policies.factory import build_scheduler
from twinserve.policies.registries import CACHE, MEMORY, SCHEDULING

__all__ = ["CACHE", "MEMORY", "SCHEDULING", "build_scheduler"]
