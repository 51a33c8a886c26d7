"""Server-sent events with guaranteed cleanup, and client-disconnect detection.

Starlette's ``StreamingResponse`` only notices a vanished client when a write fails, which may be
never for a request still waiting in the queue. `EventStream` writes under the request's
`ClientWatch` and, however the response ends (finished, client gone, server shutting down),
closes the event iterator and awaits ``on_close`` exactly once.
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Awaitable, Callable

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from twinserve.server.client_watch import ClientWatch


# stateless (the C encoder is made per call): one instance instead of one per `json.dumps` call
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def json_text(obj: Any) -> str:
    """Compact JSON (no spaces, non-ASCII kept), as vLLM and the OpenAI API write it."""
    return _JSON.encode(obj)


def sse_data(obj: Any) -> bytes:
    """One server-sent event carrying ``obj`` as compact JSON."""
    return b"data: " + _JSON.encode(obj).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


# what Starlette's StreamingResponse sends for these headers and media type, in its order
SSE_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no"),
    (b"content-type", b"text/event-stream; charset=utf-8"))


class EventStream(Response):
    """``text/event-stream`` response over ``events``; ``on_close()`` runs when it ends. Its
    status and headers are fixed (`SSE_HEADERS`), made once, not per response.

    The events are written from the request's own task while ``watch`` (the request's
    `ClientWatch`, or one of its own) cancels the writing if the client goes first (then the
    response ends without an error). A chunk that ends with ``[DONE]`` is the stream's last: it
    goes out with the end of the body in one write. However the response ends (finished, client
    gone, server shutting down), the event iterator is closed, ``on_close`` awaited and the
    watch closed, exactly once."""

    status_code = 200
    raw_headers = list(SSE_HEADERS)
    background = None

    def __init__(self, events: AsyncIterator[bytes], on_close: Callable[[], Awaitable[None]],
                 watch: ClientWatch | None = None) -> None:  # no Response.__init__: nothing to build
        self._events = events
        self._on_close = on_close
        self._watch = watch

    async def _write(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        async for chunk in self._events:
            last = chunk.endswith(SSE_DONE)
            await send({"type": "http.response.body", "body": chunk, "more_body": not last})
            if last:
                return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watch = self._watch if self._watch is not None else ClientWatch(receive)
        try:
            try:
                await watch.run(self._write(send))
            except OSError:
                pass
        finally:
            watch.close()
            with anyio.CancelScope(shield=True):
                aclose = getattr(self._events, "aclose", None)
                if aclose is not None:
                    await aclose()
                await self._on_close()
