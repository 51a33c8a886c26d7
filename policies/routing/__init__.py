"""Routing policies: round_robin, least_loaded, prefix_affinity, cache_aware (registry `ROUTING`)."""

from twinserve.policies.routing.base import ReplicaView, Router
from twinserve.policies.routing.cache_aware import CacheAware
from twinserve.policies.routing.least_loaded import LeastLoaded
from twinserve.policies.routing.prefix_affinity import PrefixAffinity
from twinserve.policies.routing.round_robin import RoundRobin
from twinserve.policies.routing.view import SchedulerView

__all__ = ["CacheAware", "LeastLoaded", "PrefixAffinity", "ReplicaView", "RoundRobin", "Router",
           "SchedulerView"]
