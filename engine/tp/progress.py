"""`Progress`: where each rank of a tensor-parallel group is, for the watchdog's error message.

Every rank writes its position (step index, phase, collective number or graph size) into a
small memory-mapped file ``progress{r}`` in the group's folder, on every phase change (a few
stores, no system call); rank 0 reads every rank's file when a step or collective outlasts
``tp_timeout_s`` and names the rank that did not arrive (`laggards`). Positions are the host's:
on CUDA a collective is enqueued rather than awaited, so a rank whose host is stuck is named, and
a hang on the device shows where each host last enqueued work; positions inside a CUDA graph
replay are not visible at all (such a step reads "forward").
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass

from twinserve.core.capture_schedule import CaptureItem

# Phases, in the order a step passes them; "capture" happens at startup, before step 1.
PHASES = ("start", "capture", "broadcast", "forward", "all-reduce", "all-gather")
CAPTURE_KINDS = ("decode", "full", "pieces")
_LAYOUT = struct.Struct("<qqiiii")  # step, seq (phase changes within the step), phase, arg, capture kind, size
# A decoder's all-reduces per step: the vocab-parallel embedding's, then two per layer (o_proj
# and down_proj, the row-parallel linears).
EMBED_ALL_REDUCES = 1
ALL_REDUCES_PER_LAYER = 2


def progress_path(workdir: str, rank: int) -> str:
    return os.path.join(workdir, f"progress{rank}")


@dataclass(frozen=True, slots=True)
class Position:
    """One rank's last reported place: ``step`` (1-based index of the step, 0 before the first),
    ``seq`` (how many phase changes within that step, or since startup; larger is further),
    ``phase`` (a `PHASES` name), ``arg`` (all-reduce, all-gather: its number within the step or
    the graph capture; forward: the all-reduces done) and, during startup, the graph being
    captured (``capture_kind``, an index into `CAPTURE_KINDS`, -1: none, and ``capture_size``)."""

    step: int
    seq: int
    phase: str
    arg: int = 0
    capture_kind: int = -1
    capture_size: int = 0

    def key(self) -> tuple[int, int]:
        return self.step, self.seq

    def describe(self) -> str:
        if self.step:
            where = f"step {self.step}"
        elif self.capture_kind >= 0:
            where = f"graph capture of {CAPTURE_KINDS[self.capture_kind]} size {self.capture_size}"
        else:
            where = "startup"
        if self.phase in ("start", "capture"):
            return where
        if self.phase == "broadcast":
            return f"{where}, waiting for the step's broadcast from rank 0"
        if self.phase == "forward":
            return f"{where}, forward (after {self.arg} all-reduces)"
        if self.phase == "all-reduce":
            k = self.arg
            if where == "startup":
                layer = "the group's self-check"
            elif k < EMBED_ALL_REDUCES:
                layer = "the embedding"
            else:
                layer = f"layer {(k - EMBED_ALL_REDUCES) // ALL_REDUCES_PER_LAYER}"
            return f"{where}, all-reduce #{k} ({layer})"
        return f"{where}, all-gather #{self.arg} (the logits)"


class Progress:
    """A rank's own position file (writer) or another's (``read``).

    Invariants: only the owning rank writes its file; ``step`` only grows; ``collectives()``
    are running totals (all-reduces, all-gathers) since the rank started.
    """

    def __init__(self, workdir: str, rank: int) -> None:
        path = progress_path(workdir, rank)
        with open(path, "wb") as f:
            f.write(b"\0" * _LAYOUT.size)
        self._f = open(path, "r+b")
        self._m = mmap.mmap(self._f.fileno(), _LAYOUT.size)
        self.step = 0
        self._seq = 0
        self._reduces = 0  # in this step
        self._gathers = 0
        self._total = [0, 0]
        self._phase = "start"
        self._capture = (-1, 0)  # the graph being captured (kind index, size)
        self._write("start")

    def _write(self, phase: str, arg: int = 0) -> None:
        self._seq += 1
        self._phase = phase
        _LAYOUT.pack_into(self._m, 0, self.step, self._seq, PHASES.index(phase), arg, *self._capture)

    def capture(self, item: CaptureItem) -> None:
        """Startup: the capture of ``item`` begins (its collectives are numbered from 0)."""
        self._capture = (CAPTURE_KINDS.index(item.kind), item.size)
        self._reduces, self._gathers = 0, 0
        self._write("capture")

    def await_step(self) -> None:
        """A follower waits for the next step's message."""
        self._begin(self.step + 1)
        self._write("broadcast")

    def begin_step(self) -> None:
        """Rank 0 starts the next step (it broadcasts it); a follower has received it. Both then
        count the same phase changes within the step."""
        if self._phase != "broadcast":
            self._begin(self.step + 1)
            self._write("broadcast")
        self._write("forward")

    def _begin(self, step: int) -> None:
        self.step, self._seq, self._reduces, self._gathers = step, 0, 0, 0
        self._capture = (-1, 0)

    def enter(self, collective: str) -> None:
        """Before an ``"all-reduce"`` or ``"all-gather"``."""
        if collective == "all-reduce":
            self._write("all-reduce", self._reduces)
            self._reduces += 1
            self._total[0] += 1
        else:
            self._write("all-gather", self._gathers)
            self._gathers += 1
            self._total[1] += 1

    def leave(self) -> None:
        """After a collective returned."""
        self._write("forward", self._reduces)

    def collectives(self) -> tuple[int, int]:
        return self._total[0], self._total[1]

    def close(self) -> None:
        self._m.close()
        self._f.close()

    @staticmethod
    def read(workdir: str, rank: int) -> Position | None:
        """The rank's last position, or None when it has not written one."""
        try:
            with open(progress_path(workdir, rank), "rb") as f:
                data = f.read(_LAYOUT.size)
        except OSError:
            return None
        if len(data) < _LAYOUT.size:
            return None
        step, seq, phase, arg, kind, size = _LAYOUT.unpack(data)
        if seq == 0:
            return None
        return Position(step, seq, PHASES[phase], arg, kind, size)


def laggards(positions: dict[int, Position | None]) -> list[int]:
    """The ranks behind the furthest one (by step, then phase changes within it); ranks that
    never reported count as behind."""
    known = [p.key() for p in positions.values() if p is not None]
    if not known:
        return sorted(positions)
    front = max(known)
    return sorted(r for r, p in positions.items() if p is None or p.key() < front)
