"""Structural types of the objects the `Scheduler` drives.

The implementations live in ``twinserve.policies`` (which imports core, never the reverse); these
Protocols say everything the scheduler reads, writes or calls on them, and nothing else: a member
missing here is one the scheduler does not use. Each method's contract is documented on the base
classes in ``policies/``, which implement every member (optional ones with a default).
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from twinserve.core.request import Req


class MatchLike(Protocol):
    node: Any
    pages: list[int]
    num_tokens: int


class CacheStatsLike(Protocol):
    queried_tokens: int
    hit_tokens: int


@runtime_checkable
class CacheLike(Protocol):
    page_size: int
    stats: CacheStatsLike

    def match(self, tokens: np.ndarray) -> MatchLike: ...
    def match_len(self, tokens: np.ndarray) -> int: ...
    def insert(self, tokens: np.ndarray, pages: list[int]) -> MatchLike: ...
    def lock(self, node: Any) -> None: ...
    def unlock(self, node: Any) -> None: ...
    def evict(self, n: int) -> list[int]: ...
    def all_pages(self) -> list[int]: ...
    def path_pages(self, node: Any) -> list[int]: ...
    def is_locked(self, node: Any) -> bool: ...
    def distinct_path_pages(self, nodes: Sequence[Any]) -> int: ...
    def check(self) -> None: ...

    @property
    def num_pages(self) -> int: ...

    @property
    def evictable_pages(self) -> int: ...


@runtime_checkable
class AllocatorLike(Protocol):
    num_pages: int

    @property
    def free_count(self) -> int: ...
    def alloc(self, n: int) -> list[int]: ...
    def free(self, pages: list[int]) -> None: ...
    def free_pages(self) -> list[int]: ...


@runtime_checkable
class MemoryLike(Protocol):
    preempts: bool

    def admission_pages(self, req: Req, start: int, chunk: int, page_size: int) -> int: ...
    def can_admit(self, new_pages: int, available: int, total: int) -> bool: ...


@runtime_checkable
class SchedulingLike(Protocol):
    tracks_compute: bool

    def order(self, waiting: Sequence[Req], now: float, cache: CacheLike) -> list[Req]: ...
    def victim(self, candidates: Sequence[Req], now: float) -> Req: ...
    def on_add(self, req: Req, now: float) -> None: ...
    def on_compute(self, req: Req, prefill: int, outputs: int) -> None: ...
    def on_exit(self, req: Req) -> None: ...
