"""`StartupGuard`: rank 0's last line of defence against a tensor-parallel startup that hangs.

During startup rank 0 can block inside CUDA: an NCCL collective whose peer died, or a CUDA-graph
capture waiting on NCCL work, neither of which times out by itself (captured NCCL work is not
watched by torch's NCCL watchdog). Polling waits on the rendezvous store and gloo collectives
already fail on their own; this thread covers the rest.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable

EXIT_CODE = 70


class StartupGuard:
    """Watches the follower ranks from a daemon thread until ``done()`` is called.

    Contract: when a follower exits, or startup outlasts ``timeout_s``, it prints one clear line
    to stderr, calls ``on_failure()`` (kill the followers, abort the NCCL communicator: this
    unblocks CUDA waits on collectives) and, if startup has still neither finished nor raised
    after ``grace_s`` more seconds, ends the process with code 70 rather than hang silently.
    ``exited()`` returns ``(rank, pid, exit code)`` of a follower that has exited, or None;
    ``where()`` (optional) says where the ranks are (the leader's `whereabouts`), appended to
    the line.
    """

    def __init__(self, exited: Callable[[], tuple[int, int, int] | None], on_failure: Callable[[], None],
                 timeout_s: float, grace_s: float = 30.0, period_s: float = 0.25,
                 where: Callable[[], str] | None = None) -> None:
        self._exited = exited
        self._where = where
        self._on_failure = on_failure
        self.timeout_s = timeout_s
        self.grace_s = grace_s
        self.period_s = period_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tp-startup-guard")
        self._thread.start()

    def done(self) -> None:
        self._done.set()

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._done.wait(self.period_s):
            dead = self._exited()
            if dead is not None:
                why = f"tensor-parallel rank {dead[0]} (pid {dead[1]}) exited with code {dead[2]} during startup"
            elif time.monotonic() - t0 > self.timeout_s:
                why = f"tensor-parallel startup did not finish within tp_start_timeout_s={self.timeout_s:g} s"
            else:
                continue
            if self._done.wait(min(2.0, self.grace_s)):  # the main thread may raise on its own
                return
            if self._where is not None:
                try:
                    why += f" ({self._where()})"
                except Exception:  # noqa: BLE001 - the position is a hint; the stop below matters
                    pass
            print(f"[twinserve] {why}; stopping the group", file=sys.stderr, flush=True)
            try:
                self._on_failure()
            except Exception as e:  # noqa: BLE001 - best effort, the exit below still follows
                print(f"[twinserve] stopping the group failed: {e!r}", file=sys.stderr, flush=True)
            if not self._done.wait(self.grace_s):
                print(f"[twinserve] {why}; rank 0 is still blocked after {self.grace_s:g} s: exiting "
                      f"with code {EXIT_CODE}", file=sys.stderr, flush=True)
                os._exit(EXIT_CODE)
            return
