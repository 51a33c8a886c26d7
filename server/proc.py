"""Child-process bootstrap shared by the tokenizer, engine and detokenizer workers.

Contract of a child started through `child_main`:

- SIGINT is ignored (Ctrl-C reaches the whole process group; the launcher decides), SIGTERM
  raises ``SystemExit`` in the main thread so the worker's ``finally`` blocks close its sockets;
- a watchdog thread SIGTERMs the child when its parent disappears (re-parented), so a killed
  launcher leaves no orphans;
- the worker announces itself with ``Ready`` (or ``StartFailed`` with the traceback) on the
  launcher's handshake socket.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import zmq

from twinserve.core.cli_errors import DEBUG_ENV
from twinserve.core.errors import UserError
from twinserve.server.ipc import IpcPaths, push_socket, send
from twinserve.server.messages import Ready, StartFailed


@dataclass(slots=True)
class ChildContext:
    """What a worker function receives besides its own config."""

    role: str
    rank: int
    paths: IpcPaths
    zmq_ctx: zmq.Context

    def announce(self, info: dict[str, Any] | None = None) -> None:
        """Send ``Ready`` to the launcher (call once, after the worker's sockets are bound)."""
        _handshake(self, Ready(self.role, self.rank, os.getpid(), info or {}))


def _handshake(ctx: ChildContext, msg: object) -> None:
    s = push_socket(ctx.zmq_ctx, ctx.paths.ready)
    try:
        send(s, msg)
    finally:
        s.close(linger=2000)


def _on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def _watch_parent(parent_pid: int, period_s: float) -> None:
    while True:
        time.sleep(period_s)
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5.0)
            os._exit(1)


def resolve(path: str) -> Callable[..., Any]:
    """``"package.module:function"`` -> the function."""
    mod, _, attr = path.partition(":")
    return getattr(importlib.import_module(mod), attr)


def child_main(target: str, role: str, rank: int, paths: IpcPaths, cfg: Any, parent_pid: int) -> None:
    """Entry point of every child (a ``multiprocessing`` spawn target): run ``target(cfg, ctx)``.

    The worker's own ``finally`` blocks close its sockets and engine; then the process ends with
    ``os._exit`` (interpreter teardown with torch loaded takes seconds and frees nothing the OS
    would not)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)
    threading.Thread(target=_watch_parent, args=(parent_pid, 0.5), daemon=True,
                     name="parent-watchdog").start()
    zctx = zmq.Context()
    ctx = ChildContext(role, rank, paths, zctx)
    code = 0
    try:
        resolve(target)(cfg, ctx)
    except SystemExit:
        pass
    except BaseException as e:
        code = 1
        tb = traceback.format_exc()
        user = str(e) if isinstance(e, UserError) else ""
        try:
            _handshake(ctx, StartFailed(role, rank, os.getpid(), tb, user))
        except Exception:
            pass
        if not user or os.environ.get(DEBUG_ENV) == "1":  # the launcher prints a user error's line
            print(f"[twinserve {role}{rank}] crashed:\n{tb}", flush=True)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        zctx.destroy(linger=0)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
