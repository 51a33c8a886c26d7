"""`LeanRoute`: a generation endpoint served without FastAPI's per-request machinery.

FastAPI spends more on each request than the handler does (routing, dependency solving, query
and cookie parsing, exception-handling wrappers); under a burst of hundreds of requests that is
the API server's main cost, and requests queue behind it. `http_front.HttpFront` serves a
``POST`` of JSON to a lean route's path itself when the body validates:
``model.model_validate(json.loads(body))``, the same parse and validation FastAPI does for a body
parameter, then the same handler. Anything else (another method or path, a content type that is
not JSON, a body that does not parse or validate) goes to the FastAPI app with its body replayed
(`replay`), so every error answer is the FastAPI route's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope


@dataclass(frozen=True, slots=True)
class LeanRoute:
    """One endpoint: its body model and its handler ``(body, request) -> Response``, which may
    raise `APIError` (answered as the app's `APIError` handler does)."""

    model: type[BaseModel]
    handler: Callable[[Any, Request], Awaitable[Response]]


def is_json(scope: Scope) -> bool:
    """The request's content type is ``application/json`` or ``application/*+json`` (what
    FastAPI parses as JSON)."""
    for k, v in scope.get("headers") or ():
        if k == b"content-type":
            kind = v.split(b";", 1)[0].strip().lower()
            return kind.startswith(b"application/") and (kind == b"application/json" or kind.endswith(b"+json"))
    return False


async def read_body(receive: Receive) -> bytes:
    """The whole request body (raises what ``receive`` raises, e.g. the body limit's 413)."""
    parts: list[bytes] = []
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            break
        parts.append(msg.get("body", b""))
        if not msg.get("more_body", False):
            break
    return b"".join(parts)


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that yields ``body`` as one message, then defers to ``receive``."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again
