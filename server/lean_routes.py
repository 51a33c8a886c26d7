"""`LeanRoutes`: the generation endpoints without FastAPI's per-request machinery.

FastAPI spends more on each request than the handler does (routing, dependency solving, query
and cookie parsing, exception-handling wrappers); under a burst of hundreds of requests that is
the API server's main cost, and requests queue behind it. `LeanRoutes` sits inside the guards
(status counts, API key, body limit) and serves a ``POST`` to one of its paths itself when the
body is JSON that validates: ``model.model_validate(json.loads(body))``, the same parse and
validation FastAPI does for a body parameter, then the same handler. Anything else (another
method or path, a content type that is not JSON, a body that does not parse or validate) goes to
the FastAPI app with its body replayed, so every error answer is the FastAPI route's own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from fastapi import HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from twinserve.server.errors import APIError, error_body


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


class LeanRoutes:
    """ASGI middleware over a FastAPI app (see the module docstring).

    Invariant: a request it serves gets the handler's answer, or an `APIError`'s JSON body, or a
    413 from the body limit; it never answers a request that does not validate."""

    def __init__(self, app: ASGIApp, routes: dict[str, LeanRoute]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.routes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if route is None or not is_json(scope):
            await self.app(scope, receive, send)
            return
        try:
            data = await read_body(receive)
        except HTTPException as e:  # the body limit
            await JSONResponse(error_body(e.status_code, str(e.detail)), status_code=e.status_code,
                               headers=e.headers)(scope, receive, send)
            return
        try:
            body = route.model.model_validate(json.loads(data))
        except (ValueError, ValidationError):  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
            await self.app(scope, replay(data, receive), send)
            return
        request = Request(scope, receive)
        try:
            response = await route.handler(body, request)
        except APIError as e:
            response = JSONResponse(e.body, status_code=e.status, headers=e.headers)
        await response(scope, receive, send)
