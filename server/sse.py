"""Server-sent events with guaranteed cleanup, and client-disconnect detection.

Starlette's ``StreamingResponse`` only notices a vanished client when a write fails, which may be
never for a request still waiting in the queue. `EventStream` always listens for
``http.disconnect`` next to the writer and, however the response ends (finished, client gone,
server shutting down), closes the event iterator and awaits ``on_close`` exactly once.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Awaitable, Callable

import anyio
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


# stateless (the C encoder is made per call): one instance instead of one per `json.dumps` call
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def json_text(obj: Any) -> str:
    """Compact JSON (no spaces, non-ASCII kept), as vLLM and the OpenAI API write it."""
    return _JSON.encode(obj)


def sse_data(obj: Any) -> bytes:
    """One server-sent event carrying ``obj`` as compact JSON."""
    return b"data: " + _JSON.encode(obj).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


class EventStream(StreamingResponse):
    """``text/event-stream`` response over ``events``; ``on_close()`` runs when it ends.

    One task per response: the events are written from the request's own task while a watcher
    task waits for ``http.disconnect`` and cancels the writing if the client goes first (then the
    response ends without an error). A chunk that ends with ``[DONE]`` is the stream's last: it
    goes out with the end of the body in one write."""

    def __init__(self, events: AsyncIterator[bytes], on_close: Callable[[], Awaitable[None]]) -> None:
        super().__init__(events, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._events = events
        self._on_close = on_close

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        async for chunk in self._events:
            last = chunk.endswith(SSE_DONE)
            await send({"type": "http.response.body", "body": chunk, "more_body": not last})
            if last:
                return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        state = {"writing": True, "gone": False}

        async def listen() -> None:
            await self.listen_for_disconnect(receive)
            if state["writing"]:
                state["gone"] = True
                task.cancel()

        watcher = asyncio.ensure_future(listen())
        try:
            try:
                await self.stream_response(send)
            except OSError:
                pass
            except asyncio.CancelledError:
                if not state["gone"]:
                    raise
                task.uncancel()  # the client left: the response just ends
            finally:
                state["writing"] = False
                watcher.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                aclose = getattr(self._events, "aclose", None)
                if aclose is not None:
                    await aclose()
                await self._on_close()


async def wait_disconnect(request: Request) -> None:
    """Return when the client has gone away (call only after the body has been read)."""
    while True:
        msg = await request.receive()
        if msg["type"] == "http.disconnect":
            return


async def unless_disconnected(request: Request, work: Awaitable[Any]) -> tuple[bool, Any]:
    """Run ``work`` until it finishes or the client disconnects: (client_gone, result)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(wait_disconnect(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watch.cancel()
    if task.done():
        return False, task.result()
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):
        pass
    return True, None
