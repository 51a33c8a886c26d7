"""The policy registries; Hydra picks entries by name (``scheduler=lpm cache=radix router=cache_aware``)."""

from __future__ import annotations

from twinserve.core.registry import Registry

SCHEDULING: Registry = Registry("scheduling policy")
MEMORY: Registry = Registry("memory policy")
CACHE: Registry = Registry("prefix cache")
ROUTING: Registry = Registry("router")
