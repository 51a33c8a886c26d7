"""`Outbox`: many messages to one process as one ZMQ message.

A burst of requests crosses four processes (API server -> tokenizer -> engine -> detokenizer ->
API server); sent one ZMQ message each, every hop pays a send, a wake-up and a receive per
request. An `Outbox` stands in for a PUSH socket: ``send`` keeps the frame, ``flush`` sends every
kept frame as the frames of one multipart message, which `ipc.recv_all` (and the API server's
reader) decode frame by frame, in order. A worker flushes at the end of each round of its loop,
before it waits again, so batching adds no wait: it only groups what one round produced.
"""

from __future__ import annotations

from typing import Any


class Outbox:
    """Socket-like buffer in front of ``sock`` (anything with ``send`` and ``send_multipart``).

    Invariant: frames leave in the order ``send`` got them, and none is held past the next
    ``flush``; a flush of one frame is a plain single-frame message."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.frames: list[Any] = []

    def send(self, data: Any, copy: bool = True) -> None:
        self.frames.append(data)

    def flush(self) -> int:
        """Send what is kept (nothing when empty); returns how many frames went."""
        frames = self.frames
        if not frames:
            return 0
        self.frames = []
        if len(frames) == 1:
            self.sock.send(frames[0], copy=False)
        else:
            self.sock.send_multipart(frames, copy=False)
        return len(frames)
