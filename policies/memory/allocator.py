"""`PageAllocator`: the free list of KV pages."""

from __future__ import annotations


class PageAllocator:
    """Hands out page ids in ``[0, num_pages)``.

    Invariant: a page is either in the free list or owned by exactly one holder (a request or the
    prefix cache); ``alloc`` never returns a page twice before it is freed, and ``free`` of a page
    that is already free raises (in ``checked`` mode, used by the tests). Pages come out in a
    deterministic order (lowest id first on a fresh pool).
    """

    def __init__(self, num_pages: int, checked: bool = False) -> None:
        self.num_pages = num_pages
        self._free: list[int] = list(range(num_pages - 1, -1, -1))
        self._checked = checked
        self._free_set: set[int] | None = set(self._free) if checked else None

    @property
    def free_count(self) -> int:
        return len(self._free)

    def alloc(self, n: int) -> list[int]:
        if n <= 0:
            return []
        if n > len(self._free):
            raise MemoryError(f"asked for {n} pages, {len(self._free)} free")
        out = self._free[-n:]
        del self._free[-n:]
        out.reverse()
        if self._free_set is not None:
            self._free_set.difference_update(out)
        return out

    def free(self, pages: list[int]) -> None:
        if not pages:
            return
        if self._free_set is not None:
            for p in pages:
                if p in self._free_set or not (0 <= p < self.num_pages):
                    raise AssertionError(f"page {p} freed twice or out of range")
                self._free_set.add(p)
        self._free.extend(pages)

    def free_pages(self) -> list[int]:
        return list(self._free)
