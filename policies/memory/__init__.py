"""Memory policies: the page allocator plus `reserve` and `on_demand` admission."""

from twinserve.policies.memory.allocator import PageAllocator
from twinserve.policies.memory.base import MemoryPolicy, pages_for
from twinserve.policies.memory.on_demand import OnDemandMemory
from twinserve.policies.memory.reserve import ReserveMemory

__all__ = ["MemoryPolicy", "OnDemandMemory", "PageAllocator", "ReserveMemory", "pages_for"]
