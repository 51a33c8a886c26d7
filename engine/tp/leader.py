"""`TPLeader`: rank 0's side of a tensor-parallel group.

Rank 0 is the process that owns the `Engine` (the user's process offline, the engine worker in
the server). It starts ranks 1..N-1 as ``python -m twinserve.engine.tp.follower`` children,
hosts the rendezvous store, builds its own backend, sends every step on the control channel and
watches the children: a dead child, a startup that does not finish within
``tp_start_timeout_s``, a failed collective or a step that does not finish within
``tp_timeout_s`` raises `TPGroupError` on rank 0 and stops the whole group. Such a timeout's
message names the rank that did not arrive, its step and phase (`Progress`), and rank 0's.

Before capturing CUDA graphs every rank posts its capture schedule to the store and rank 0
checks they are all its own (`agree_schedule`: a rank capturing other graphs, or in another
order, would block a collective forever); after capture they post what they captured, with the
collectives issued per graph, and rank 0 checks that too (`wait_ready`).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from twinserve.core.capture_schedule import CaptureItem, CaptureRecord, first_difference, records_of
from twinserve.engine.capture_log import CaptureLog
from twinserve.engine.config import EngineConfig
from twinserve.engine.layers.parallel import TPGroup
from twinserve.engine.step_inputs import StepInputs
from twinserve.engine.tp.channel import StepSender
from twinserve.engine.tp.comm import check_group, group_over, make_backend, shutdown_backend
from twinserve.engine.tp.errors import TPGroupError
from twinserve.engine.tp.progress import Progress, laggards
from twinserve.engine.tp.spec import GroupSpec, keys
from twinserve.engine.tp.startup_guard import StartupGuard

_CHECK_EVERY_S = 0.005  # liveness checks while spinning on a CUDA event


@dataclass
class _Children:
    """What must be cleaned up even if the engine is dropped without ``shutdown()`` (held by a
    weakref finalizer, so it must not reference the leader)."""

    procs: dict[int, subprocess.Popen] = field(default_factory=dict)
    workdir: str = ""

    def reap(self, grace_s: float) -> None:
        deadline = time.monotonic() + grace_s
        for p in self.procs.values():
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def kill(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
        self.reap(10.0)


def _read_tail(path: str, limit: int = 4000) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-limit:]
    except OSError:
        return ""


class TPLeader:
    """Starts the follower ranks and connects rank 0 to them (see the module docstring).

    On the CPU the ranks share the machine's cores, so this process's torch intra-op threads are
    divided by ``tp_size`` and every follower uses the same number (oversubscribed OpenMP threads
    spinning against gloo make steps 30x slower).

    Invariants: after construction every follower has joined the store and the data-plane
    backend; ``check()`` raises `TPGroupError` as soon as any follower has exited; ``stop()``
    leaves no follower process behind (stop message, then SIGKILL after a grace period), and so
    does dropping the leader or leaving the interpreter.
    """

    def __init__(self, cfg: EngineConfig, device: torch.device) -> None:
        self.size = int(cfg.tp_size)
        self.timeout_s = float(cfg.tp_timeout_s)
        self.start_timeout_s = float(cfg.tp_start_timeout_s)
        self.device = device
        self._children = _Children(workdir=tempfile.mkdtemp(prefix="twinserve-tp-"))
        self._finalizer = weakref.finalize(self, _Children.kill, self._children)
        self.backend: Any = None
        self.failed: TPGroupError | None = None
        self.progress = Progress(self._children.workdir, 0)
        if device.type == "cpu":  # ranks share the cores: split the intra-op threads between them
            torch.set_num_threads(max(1, torch.get_num_threads() // self.size))
        else:
            torch.cuda.set_device(device)
        self.store = dist.TCPStore("127.0.0.1", 0, self.size, True, timeout=timedelta(seconds=self.start_timeout_s),
                                   wait_for_workers=False)
        self.spec = GroupSpec(cfg, self.size, int(self.store.port), self._children.workdir, self.timeout_s,
                              self.start_timeout_s,
                              torch.get_num_threads(), os.getpid())
        spec_path = os.path.join(self._children.workdir, "spec.pkl")
        with open(spec_path, "wb") as f:
            pickle.dump(self.spec, f)
        for r in range(1, self.size):
            self._children.procs[r] = subprocess.Popen(
                [sys.executable, "-m", "twinserve.engine.tp.follower", spec_path, str(r)])
        self.sender = StepSender(self._children.workdir, list(range(1, self.size)))
        self.guard = StartupGuard(self._exited, self._abort, self.start_timeout_s,
                                  where=lambda: self.whereabouts()[1])
        try:
            self.wait_keys(keys("hello", range(1, self.size)), "join the group")
            self.backend = make_backend(self.store, 0, self.size, device, self.timeout_s)
            self.group: TPGroup = group_over(self.backend, 0, self.size, self.progress)
            check_group(self.group, device)
        except TPGroupError:
            raise
        except BaseException:
            if self.failed is None:
                self.check()  # a follower that died explains the failure best (raises)
                self._teardown(kill=True)
            raise

    # ---- failure detection -------------------------------------------------------------------
    def check(self) -> None:
        """Raise `TPGroupError` if any follower has exited (or the group already failed)."""
        if self.failed is not None:
            raise self.failed
        for r, p in self._children.procs.items():
            code = p.poll()
            if code is not None:
                self.fail(f"tensor-parallel rank {r} (pid {p.pid}) exited with code {code}", rank=r)

    def _exited(self) -> tuple[int, int, int] | None:
        for r, p in self._children.procs.items():
            if p.poll() is not None:
                return r, p.pid, int(p.returncode)
        return None

    def _abort(self) -> None:
        """From the startup guard's thread: kill the followers, abort the communicator."""
        self._children.kill()
        if self.backend is not None:
            shutdown_backend(self.backend)

    def fail(self, why: str, rank: int | None = None, cause: BaseException | None = None) -> None:
        """Stop the whole group and raise `TPGroupError` (``why`` plus the rank's traceback)."""
        msg = why
        ranks = [rank] if rank is not None else list(self._children.procs)
        for r in ranks:
            tail = _read_tail(self.spec.error_path(r))
            if tail:
                msg += f"\n--- rank {r} reported:\n{tail}"
        self.failed = TPGroupError(msg)
        self._teardown(kill=True)
        if cause is not None:
            raise self.failed from cause
        raise self.failed

    def diagnose(self, err: BaseException) -> None:
        """Rank 0's collective or step failed with ``err``: name the follower that died (they
        usually exit within moments of the collective error), else report ``err`` itself."""
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            for r, p in self._children.procs.items():
                if p.poll() is not None:
                    self.fail(f"tensor-parallel rank {r} (pid {p.pid}) exited with code {p.returncode} "
                              f"during a step ({type(err).__name__}: {str(err)[:300]})", rank=r, cause=err)
            time.sleep(0.02)
        behind, where = self.whereabouts()
        self.fail(f"{where}\ntensor-parallel step failed on rank 0 while every follower is still running (one "
                  f"may have stopped answering; collectives time out after tp_timeout_s="
                  f"{self.timeout_s:g} s): {type(err).__name__}: {err}", rank=behind, cause=err)

    def whereabouts(self) -> tuple[int | None, str]:
        """``(rank, sentence)``: the first follower behind the furthest rank (None if none is)
        and a sentence naming each such rank's and rank 0's last position (`Progress`)."""
        pos = {r: Progress.read(self._children.workdir, r) for r in range(self.size)}
        pids = self.pids()

        def at(r: int) -> str:
            p = pos[r]
            return p.describe() if p is not None else "no position reported"

        behind = laggards(pos)
        if not behind:
            return None, f"every tensor-parallel rank is at {at(0)}"
        parts = [f"tensor-parallel rank {r} (pid {pids.get(r, os.getpid())}) did not arrive: it is at {at(r)}"
                 for r in behind]
        front = next(r for r in range(self.size) if r not in behind)
        parts.append(f"rank {front} waits at {at(front)}")
        return next((r for r in behind if r != 0), None), "; ".join(parts)

    def wait_keys(self, names: list[str], what: str) -> None:
        """Poll the store until every key exists, checking the followers meanwhile (a startup
        wait: it gives up after ``tp_start_timeout_s``)."""
        deadline = time.monotonic() + self.start_timeout_s
        while not self.store.check(names):
            self.check()
            if time.monotonic() > deadline:
                missing = [n for n in names if not self.store.check([n])]
                self.fail(f"tensor-parallel ranks {missing} did not {what} within tp_start_timeout_s="
                          f"{self.start_timeout_s:g} s ({self.whereabouts()[1]})")
            time.sleep(0.01)

    def wait_event(self, evt: Any) -> None:
        """Wait for a CUDA event without ever blocking blind: spin on ``query()``, checking the
        followers every few ms and giving up after ``tp_timeout_s``."""
        if evt.query():
            return
        t0 = time.monotonic()
        last = t0
        while not evt.query():
            now = time.monotonic()
            if now - last > _CHECK_EVERY_S:
                last = now
                self.check()
                if now - t0 > self.timeout_s:
                    behind, where = self.whereabouts()
                    self.fail(f"a tensor-parallel step did not finish within tp_timeout_s={self.timeout_s:g} s: "
                              f"{where}", rank=behind)
            time.sleep(0)

    # ---- protocol ----------------------------------------------------------------------------
    def agree_pages(self, local: int) -> int:
        """Every rank's pool gets the smallest rank's page capacity."""
        self.wait_keys(keys("pages", range(1, self.size)), "size their KV pool")
        n = min([local] + [int(self.store.get(k)) for k in keys("pages", range(1, self.size))])
        self.store.set("pages", str(n))
        return n

    def capture_log(self, schedule: list[CaptureItem]) -> CaptureLog:
        """Rank 0's `CaptureLog`: counts this rank's collectives, reports each capture."""
        return CaptureLog(schedule, self.progress.collectives, self.progress.capture)

    def _compare(self, what: str, key: str, mine: list[CaptureRecord]) -> tuple[int, str] | None:
        names = keys(key, range(1, self.size))
        self.wait_keys(names, f"report their {what}")
        reports = {0: mine} | {r: records_of(json.loads(self.store.get(k))) for r, k in zip(range(1, self.size), names)}
        return first_difference(reports, what)

    def agree_schedule(self, schedule: list[CaptureItem]) -> None:
        """Every rank follows rank 0's capture schedule, else `TPGroupError` names the first
        rank and position that differ (the followers learn the verdict from the store)."""
        diff = self._compare("capture schedule", "schedule", [CaptureRecord.planned(i) for i in schedule])
        self.store.set("schedule", diff[1] if diff else "ok")
        if diff:
            self.fail(diff[1], rank=diff[0])

    def wait_ready(self, captured: list[CaptureRecord]) -> None:
        """Wait for every follower's shard, then check each captured the graphs rank 0 did
        (``captured``), in the same order with the same collectives inside."""
        self.wait_keys(keys("ready", range(1, self.size)), "finish building their model shard")
        diff = self._compare("graph capture", "captured", captured)
        if diff:
            self.fail(diff[1], rank=diff[0])
        self.guard.done()

    def send(self, inputs: StepInputs) -> None:
        self.check()
        self.progress.begin_step()
        self.sender.send("step", inputs)

    # ---- shutdown ----------------------------------------------------------------------------
    def _teardown(self, kill: bool) -> None:
        if hasattr(self, "guard"):
            self.guard.done()
        if self._finalizer.alive:
            self._finalizer.detach()
            if not kill:
                try:
                    self.sender.send("stop")
                except Exception:
                    kill = True
            if kill:
                self._children.kill()
            else:
                self._children.reap(10.0)
            if hasattr(self, "sender"):
                self.sender.close()
            if self.backend is not None:
                shutdown_backend(self.backend)
                self.backend = None

    def stop(self, kill: bool = False) -> None:
        """Ask the followers to exit (SIGKILL after 10 s; at once with ``kill`` or after a
        failure) and release the group."""
        self._teardown(kill=kill or self.failed is not None)

    def pids(self) -> dict[int, int]:
        return {r: p.pid for r, p in self._children.procs.items()}
