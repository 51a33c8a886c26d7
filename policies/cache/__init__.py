"""Prefix caches: `none` and `radix`."""

from twinserve.policies.cache.base import CacheStats, MatchResult, PrefixCache
from twinserve.policies.cache.none import NoCache
from twinserve.policies.cache.radix import RadixCache

__all__ = ["CacheStats", "MatchResult", "NoCache", "PrefixCache", "RadixCache"]
