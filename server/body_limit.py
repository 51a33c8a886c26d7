"""`BodyLimit`: an ASGI middleware that answers 413 to a request body over ``max_bytes``.

A declared ``Content-Length`` over the limit is refused before any byte is read; a body without
one (chunked) is counted as it arrives and refused as soon as it passes the limit, so a large
body is never buffered whole.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from twinserve.server.errors import error_body


def too_large(max_bytes: int) -> str:
    return f"the request body exceeds {max_bytes} bytes (server.max_body_bytes)"


async def send_json(send: Send, status: int, body: dict[str, Any],
                    headers: dict[str, str] | None = None) -> None:
    """Answer a request from inside a middleware with a JSON body."""
    data = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})


def declared_over(scope: Scope, max_bytes: int) -> bool:
    """The request declares a ``Content-Length`` over ``max_bytes`` (one that does not parse
    counts as none)."""
    for k, v in scope.get("headers") or ():
        if k == b"content-length":
            try:
                declared = int(v)
            except ValueError:
                declared = 0
            if declared > max_bytes:
                return True
    return False


async def refuse_too_large(send: Send, max_bytes: int) -> None:
    """The 413 answer to a declared body over ``max_bytes``."""
    await send_json(send, 413, error_body(413, too_large(max_bytes), code="body_too_large"))


def limited(receive: Receive, max_bytes: int) -> Receive:
    """``receive`` that raises a 413 `HTTPException` once the body passes ``max_bytes``."""
    seen = 0

    async def counted() -> Message:
        nonlocal seen
        msg = await receive()
        if msg["type"] == "http.request":
            seen += len(msg.get("body", b""))
            if seen > max_bytes:
                raise HTTPException(413, too_large(max_bytes))
        return msg

    return counted


class BodyLimit:
    """Invariant: the app never receives more than ``max_bytes`` bytes of one request's body."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if declared_over(scope, self.max_bytes):
            await refuse_too_large(send, self.max_bytes)
            return
        await self.app(scope, limited(receive, self.max_bytes), send)
