"""IPC endpoints of one server instance and small ZMQ helpers.

All sockets of a server live as files in one private temp directory (``IpcPaths.root``); the
launcher creates it before starting any child and removes it after every child has stopped.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

import zmq

from twinserve.core.proc import pid_exists
from twinserve.server.messages import decode, encode


_PREFIX = "twinserve-ipc-"


def sweep_stale(base: str) -> list[str]:
    """Remove this user's IPC dirs under ``base`` whose owner process no longer exists."""
    removed = []
    for name in os.listdir(base):
        root = os.path.join(base, name)
        owner = os.path.join(root, "owner")
        if not name.startswith(_PREFIX) or not os.path.isfile(owner):
            continue
        try:
            if os.stat(root).st_uid != os.getuid():
                continue
            with open(owner) as f:
                pid = int(f.read().strip() or 0)
        except (OSError, ValueError):
            continue
        if pid > 0 and not pid_exists(pid):
            shutil.rmtree(root, ignore_errors=True)
            removed.append(root)
    return removed


@dataclass(frozen=True, slots=True)
class IpcPaths:
    """The ``ipc://`` endpoints of one server. Each is bound by exactly one process (the PULL side):

    - ``tokenizer``: tokenizer worker input; ``engine`` / ``engine_of(r)``: engine replica r's
      (rank-0) input;
    - ``detokenizer``: detokenizer input; ``api``: API server input; ``ready``: launcher handshake;
    """

    root: str

    def _ep(self, name: str) -> str:
        return f"ipc://{os.path.join(self.root, name)}"

    @property
    def tokenizer(self) -> str:
        return self._ep("tokenizer")

    @property
    def engine(self) -> str:
        return self._ep("engine")

    def engine_of(self, replica: int) -> str:
        """The input of engine replica ``replica`` (replica 0's is ``engine``)."""
        return self.engine if replica == 0 else self._ep(f"engine{replica}")

    @property
    def detokenizer(self) -> str:
        return self._ep("detokenizer")

    @property
    def api(self) -> str:
        return self._ep("api")

    @property
    def ready(self) -> str:
        return self._ep("ready")

    @classmethod
    def create(cls, base: str | None = None) -> "IpcPaths":
        """Make a fresh private directory (mode 0700) holding an ``owner`` file with this pid.
        Unix socket paths are short-limited (~107 bytes), so the default base is /tmp rather than
        a possibly long $TMPDIR. Directories left by a launcher that was SIGKILLed (owner pid
        gone) are removed first."""
        if base is None:
            base = "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()
        sweep_stale(base)
        root = tempfile.mkdtemp(prefix=_PREFIX, dir=base)
        with open(os.path.join(root, "owner"), "w") as f:
            f.write(str(os.getpid()))
        return cls(root)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def push_socket(ctx: zmq.Context, endpoint: str) -> zmq.Socket:
    """A PUSH socket connected to ``endpoint``: never blocks on send, drops nothing at close."""
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.SNDHWM, 0)
    s.setsockopt(zmq.LINGER, 2000)
    s.connect(endpoint)
    return s


def pull_socket(ctx: zmq.Context, endpoint: str) -> zmq.Socket:
    """A PULL socket bound at ``endpoint`` (this process owns the IPC file)."""
    s = ctx.socket(zmq.PULL)
    s.setsockopt(zmq.RCVHWM, 0)
    s.setsockopt(zmq.LINGER, 0)
    s.bind(endpoint)
    return s


def send(sock: zmq.Socket, msg: object) -> None:
    sock.send(encode(msg), copy=False)


def recv_all(sock: zmq.Socket, timeout_ms: int) -> list[object]:
    """Wait up to ``timeout_ms`` for one message, then drain whatever else is queued; a multipart
    message (`outbox.Outbox`) gives one decoded message per frame, in order."""
    out: list[object] = []
    if timeout_ms != 0 and not sock.poll(timeout_ms):
        return out
    while True:
        try:
            data = sock.recv(flags=zmq.NOBLOCK, copy=True)
        except zmq.Again:
            return out
        out.append(decode(data))
        while sock.getsockopt(zmq.RCVMORE):  # the rest of a multipart message is already here
            out.append(decode(sock.recv(copy=True)))
