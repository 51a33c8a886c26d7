"""`CaptureLog`: the order a rank captures its CUDA graphs in, and the record of what it captured."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

from twinserve.core.capture_schedule import CaptureItem, CaptureRecord


def _no_collectives() -> tuple[int, int]:
    return 0, 0


class CaptureLog:
    """Follows one capture schedule (`core.capture_schedule.capture_schedule`) and records it.

    Contract: a graph set captures its sizes in ``order(kind, sizes)`` (the schedule's order of
    that kind, which must hold exactly ``sizes``) and wraps each size's warm-up and capture in
    ``capturing(kind, size)``; that appends a `CaptureRecord` with the collectives issued
    meanwhile (``collectives()`` returns running totals of all-reduces and all-gathers) and
    first calls ``on_begin(item)`` (a rank's progress report). ``check()`` raises when the
    records' (kind, size) sequence is not the schedule.
    """

    def __init__(self, schedule: Sequence[CaptureItem],
                 collectives: Callable[[], tuple[int, int]] = _no_collectives,
                 on_begin: Callable[[CaptureItem], None] | None = None) -> None:
        self.schedule = list(schedule)
        self.collectives = collectives
        self.on_begin = on_begin
        self.records: list[CaptureRecord] = []

    def order(self, kind: str, sizes: Sequence[int]) -> list[int]:
        got = [it.size for it in self.schedule if it.kind == kind]
        if sorted(got) != sorted(sizes):
            raise ValueError(f"the capture schedule's {kind} sizes {sorted(got)} are not the graph set's "
                             f"{sorted(sizes)}")
        return got

    @classmethod
    def descending(cls, kind: str, sizes: Sequence[int]) -> "CaptureLog":
        """A log of one graph set captured largest size first (a graph set built on its own)."""
        return cls([CaptureItem(kind, s) for s in sorted(sizes, reverse=True)])

    @contextmanager
    def capturing(self, kind: str, size: int) -> Iterator[None]:
        if self.on_begin is not None:
            self.on_begin(CaptureItem(kind, size))
        r0, g0 = self.collectives()
        yield
        r1, g1 = self.collectives()
        self.records.append(CaptureRecord(kind, size, r1 - r0, g1 - g0))

    def check(self) -> None:
        done = [CaptureItem(r.kind, r.size) for r in self.records]
        if done != self.schedule:
            raise RuntimeError(f"captured graphs {[(i.kind, i.size) for i in done]} are not the capture "
                               f"schedule {[(i.kind, i.size) for i in self.schedule]}")

