"""The memory-policy contract: how many pages a request takes at admission, and when to admit."""

from __future__ import annotations

from abc import ABC, abstractmethod

from twinserve.core.request import Req


def pages_for(tokens: int, page_size: int) -> int:
    return -(-tokens // page_size)


class MemoryPolicy(ABC):
    """Decides admission and whether running out of pages preempts.

    Contract: ``admission_pages(req, start, chunk, page_size)`` is the number of pages the request
    must hold once admitted (cached prefix pages included) for a first chunk of ``chunk`` tokens
    after ``start`` cached ones; ``can_admit(new_pages, available, total)`` says whether taking
    ``new_pages`` more out of ``available`` (free + evictable) pages is allowed. Pages beyond the
    admission set are allocated as tokens arrive; if that fails and ``preempts`` is true the
    scheduler preempts a victim chosen by the scheduling policy (recompute), else it is a bug.
    """

    name: str = "base"
    preempts: bool = True

    @abstractmethod
    def admission_pages(self, req: Req, start: int, chunk: int, page_size: int) -> int: ...

    @abstractmethod
    def can_admit(self, new_pages: int, available: int, total: int) -> bool: ...
