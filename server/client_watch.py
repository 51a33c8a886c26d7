"""`ClientWatch`: one task per request that notices when its client goes away.

A request waits in several places (for the engine's ``Accepted``, while its stream is written,
while a full answer is collected); a client may leave during any of them, and the request must
then be aborted at once, not when a write fails. One watcher task per request listens for
``http.disconnect`` for the request's whole life, and `ClientWatch.run` lets the request's own
task await each wait: the watcher cancels that task if the client leaves meanwhile, and ``run``
turns the cancellation into its answer.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Coroutine, TypeVar

from starlette.types import Receive

T = TypeVar("T")


class ClientWatch:
    """Watches ``receive`` (call only once the request's body has been read).

    Invariant: ``gone`` becomes True once ``receive`` has yielded ``http.disconnect`` and never
    goes back; a task is cancelled by the watcher only while it is inside `run`, and `run`
    absorbs exactly that cancellation. `close` ends the watcher (idempotent)."""

    __slots__ = ("gone", "_target", "_task")

    def __init__(self, receive: Receive) -> None:
        self.gone = False
        self._target: asyncio.Task | None = None
        self._task = asyncio.ensure_future(self._listen(receive))

    async def _listen(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.gone = True
        if self._target is not None:
            self._target.cancel()

    async def run(self, work: Awaitable[T]) -> tuple[bool, T | None]:
        """Await ``work`` in the calling task: ``(False, result)``, or ``(True, None)`` when the
        client has left first (``work`` is then cancelled, or closed unstarted)."""
        if self.gone:
            if isinstance(work, Coroutine):
                work.close()
            return True, None
        task = asyncio.current_task()
        assert task is not None
        self._target = task
        try:
            return False, await work
        except asyncio.CancelledError:
            # the watcher's cancellation, and no one else's: the client left
            if not self.gone or task.uncancel() > 0:
                raise
            return True, None
        finally:
            self._target = None

    def close(self) -> None:
        self._task.cancel()
