"""`Supervisor`: starts the server's child processes, runs the readiness handshake, stops them.

Invariants: every child is started with the ``spawn`` method through `proc.child_main`; after
``stop()`` returns, no child is alive (SIGTERM, then SIGKILL after ``timeout``) and the handshake
socket is closed. The IPC directory itself belongs to the caller (the launcher removes it).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

import zmq

from twinserve.core.errors import UserError
from twinserve.server.ipc import IpcPaths, pull_socket, recv_all
from twinserve.server.messages import Ready, StartFailed
from twinserve.server.proc import child_main


@dataclass(slots=True)
class Child:
    role: str
    rank: int
    process: Any  # multiprocessing.Process

    @property
    def key(self) -> str:
        return f"{self.role}{self.rank}"


class StartupError(RuntimeError):
    """A child failed or died before it was ready."""


def _start_failed(key: str, msg: StartFailed) -> Exception:
    """A child's failed start: a `UserError` when the child's was one (its message, naming the
    child), else a `StartupError` with the child's traceback."""
    if msg.user_error:
        return UserError(f"{key}: {msg.user_error}")
    return StartupError(f"{key} failed to start:\n{msg.error}")


class Supervisor:
    """Owns the children of one server (see the module docstring)."""

    def __init__(self, paths: IpcPaths) -> None:
        self.paths = paths
        self.zctx = zmq.Context()
        self.ready_sock = pull_socket(self.zctx, paths.ready)
        self.mp = multiprocessing.get_context("spawn")
        self.children: list[Child] = []

    def start(self, role: str, rank: int, target: str, cfg: Any) -> Child:
        p = self.mp.Process(target=child_main, args=(target, role, rank, self.paths, cfg, os.getpid()),
                            name=f"twinserve-{role}{rank}", daemon=False)
        p.start()
        c = Child(role, rank, p)
        self.children.append(c)
        return c

    def wait_ready(self, children: list[Child], timeout_s: float) -> dict[str, dict[str, Any]]:
        """Block until each child sent ``Ready``; returns key -> info. Raises `StartupError`."""
        pending = {c.key: c for c in children}
        infos: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + timeout_s
        while pending:
            for msg in recv_all(self.ready_sock, 200):
                key = f"{msg.role}{msg.rank}"
                if isinstance(msg, StartFailed):
                    raise _start_failed(key, msg)
                if isinstance(msg, Ready) and key in pending:
                    infos[key] = msg.info
                    del pending[key]
            for key, c in list(pending.items()):
                if c.process.exitcode is not None:
                    # it may have sent StartFailed just before exiting
                    for msg in recv_all(self.ready_sock, 100):
                        if isinstance(msg, StartFailed):
                            raise _start_failed(key, msg)
                    raise StartupError(f"{key} exited with code {c.process.exitcode} before it was ready")
            if pending and time.monotonic() > deadline:
                raise StartupError(f"{', '.join(pending)} not ready after {timeout_s:.0f} s")
        return infos

    def dead(self) -> list[Child]:
        return [c for c in self.children if c.process.exitcode is not None]

    def pids(self) -> dict[str, int]:
        return {c.key: int(c.process.pid) for c in self.children if c.process.pid is not None}

    def stop(self, timeout_s: float) -> None:
        for c in self.children:
            if c.process.exitcode is None and c.process.pid is not None:
                try:
                    os.kill(c.process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout_s
        for c in self.children:
            c.process.join(max(0.0, deadline - time.monotonic()))
        for c in self.children:
            if c.process.exitcode is None:
                c.process.kill()
                c.process.join(5.0)
        self.ready_sock.close(linger=0)
        self.zctx.term()
