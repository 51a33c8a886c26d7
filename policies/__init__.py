"""Policy plugins, each registered by name: scheduling, memory, cache, routing."""

from twinserve.policies import cache, memory, routing, scheduling  # noqa: F401  (registers built-ins)
from twinserve.policies.factory import build_scheduler
from twinserve.policies.registries import CACHE, MEMORY, ROUTING, SCHEDULING

__all__ = ["CACHE", "MEMORY", "ROUTING", "SCHEDULING", "build_scheduler"]
