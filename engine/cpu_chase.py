"""Keep the engine's host thread on a fast vCPU (`EngineConfig.cpu_chase`).

On hosts whose vCPUs are fast or slow by turns (`cpu_speed`), the serving loop's pace follows
the vCPU its thread happens to run on. `CpuChaser` starts a probe process that keeps the other
vCPUs' speeds on a `cpu_speed.SpeedBoard`; every ``interval_s`` the engine's thread times one
unit itself and moves (``sched_setaffinity``) to the fastest vCPU on the board when that one is
faster than ``ratio`` times its own, or when it waited for its vCPU (another runnable thread there:
a pinned thread cannot be moved off by the kernel) over ``contended`` of the interval. Off by
default: on the H200 host it did not pay (docs/engine.md, "The host's vCPUs": a vCPU fast while
idle does not stay fast under the busy thread).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from twinserve.engine.cpu_speed import SpeedBoard, spin_unit


def run_delay_s() -> float | None:
    """Seconds this thread has waited on a run queue (Linux schedstat), None where unreadable."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def choose_cpu(current: int, own_s: float, unit_s: np.ndarray, stamps: np.ndarray, now: float,
               ratio: float = 0.8, max_age_s: float = 1.0, allowed: list[int] | None = None) -> int | None:
    """The vCPU to move to, or None to stay: the fastest allowed vCPU other than ``current``
    whose measurement is at most ``max_age_s`` old, if its unit time is under ``ratio`` times
    ``own_s`` (this thread's own, just measured). ``current`` -1 (unpinned) moves to the
    fastest fresh one whatever ``own_s`` is."""
    cand = [c for c in (allowed if allowed is not None else range(len(unit_s)))
            if c != current and stamps[c] > 0 and now - stamps[c] <= max_age_s and np.isfinite(unit_s[c])
            and unit_s[c] > 0]
    if not cand:
        return None
    best = min(cand, key=lambda c: unit_s[c])
    if current < 0 or unit_s[best] < ratio * own_s:
        return best
    return None


class CpuChaser:
    """Pins the calling thread (the engine's host loop) to a fast vCPU, re-deciding at most
    every ``interval_s`` in ``tick()``: it moves when a fresh vCPU's unit time is under ``ratio``
    times its own, or, pinned, when it waited on its run queue over ``contended`` of the time
    since the last decision (a unit timed between two waits reads fast on a shared vCPU).

    Invariants: active only with at least two allowed vCPUs (this process's affinity at
    construction) on Linux; then exactly one probe process runs until ``close()`` (idempotent),
    and ``cpu`` is the vCPU the ticking thread is pinned to (-1 before the first move or when
    inactive). ``close()``, from any thread, restores that thread's original affinity.
    ``moves`` counts moves.
    """

    def __init__(self, interval_s: float = 0.25, ratio: float = 0.8, period_s: float = 0.1,
                 max_age_s: float = 1.0, contended: float = 0.05) -> None:
        self.interval_s, self.ratio, self.max_age_s, self.contended = interval_s, ratio, max_age_s, contended
        self._delay: tuple[float, float] | None = None  # (perf_counter, run delay) at the last decision
        self.cpu, self.moves = -1, 0
        self._tid = 0  # the native id of the thread that ticks (0 before its first move)
        self._next = 0.0
        self._proc: subprocess.Popen | None = None
        self._board: SpeedBoard | None = None
        self._path = ""
        self.allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self._orig = set(self.allowed)
        if len(self.allowed) < 2:
            return
        fd, self._path = tempfile.mkstemp(prefix="twinserve-cpus-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        os.close(fd)
        self._board = SpeedBoard(self._path, max(self.allowed) + 1, create=True)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "twinserve.engine.cpu_speed", "--board", self._path, "--period-s", str(period_s),
             "--cpus", ",".join(map(str, self.allowed))],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})

    @property
    def active(self) -> bool:
        return self._proc is not None

    @property
    def sweeps(self) -> int:
        return self._board.sweeps if self._board is not None else 0

    def tick(self) -> None:
        """Cheap unless ``interval_s`` has passed: then time one unit here and maybe move."""
        now = time.perf_counter()
        if self._board is None or now < self._next:
            return
        self._next = now + self.interval_s
        own = min(spin_unit(), spin_unit())
        delay = run_delay_s()
        if delay is not None:
            if self._delay is not None and self.cpu >= 0 and now > self._delay[0] \
                    and (delay - self._delay[1]) / (now - self._delay[0]) > self.contended:
                own = float("inf")  # sharing its vCPU: any fresh other one is better
            self._delay = (now, delay)
        best = choose_cpu(self.cpu, own, self._board.unit_s(), self._board.stamps(), time.time(),
                          self.ratio, self.max_age_s, self.allowed)
        if best is None:
            return
        self._tid = threading.get_native_id()
        try:
            os.sched_setaffinity(self._tid, {best})
        except OSError:  # the vCPU left this process's cpuset: stay, and drop it
            self.allowed = [c for c in self.allowed if c != best]
            return
        self.cpu = best
        self._board.engine_cpu = best
        self.moves += 1

    def unpin(self) -> None:
        """Give the ticking thread its original affinity back (the next ``tick`` may pin it again)."""
        if self._tid:
            try:
                os.sched_setaffinity(self._tid, self._orig)
            except OSError:  # that thread has ended
                pass
        self.cpu = -1
        if self._board is not None:
            self._board.engine_cpu = -1

    def close(self) -> None:
        """Stop the probe and unpin (idempotent)."""
        self.unpin()
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None
        if self._board is not None:
            self._board = None
            try:
                os.unlink(self._path)
            except OSError:
                pass
