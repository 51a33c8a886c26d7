"""`HttpFront`: the API server's ASGI app: its guards and lean routes in one layer.

Every HTTP request passes, in order: the status count (each response counted once by its status
in the app state's `ServerMetrics`: 401, 404, 405, 413, validation 400s and unhandled 500s like
the handlers' own answers), the API key on protected paths (`auth`: 401), the body limit
(`body_limit`: 413), then a lean route (`lean_routes`: a ``POST`` of JSON that validates, served
by its handler) or the FastAPI app. One layer, in front of FastAPI's own middleware rather than
inside it, keeps a generation request's way in and each of its writes to one function call; the
answers are the guards', the handlers' and the app's own.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from twinserve.server.auth import key_problem, protected, refuse_unauthorized
from twinserve.server.body_limit import declared_over, limited, refuse_too_large
from twinserve.server.errors import APIError, error_body
from twinserve.server.lean_routes import LeanRoute, is_json, read_body, replay


class HttpFront:
    """ASGI app over ``app`` (the module docstring says what each request meets). ``fallback``
    is what serves the requests the front does not (default: ``app``; the API server puts
    uvicorn's proxy-header handling there, which only the app's own routes read).

    Invariants: each HTTP request that gets a response, or raises before one, is counted once;
    a protected path reaches a handler only with the key; no handler receives more than
    ``max_body_bytes`` of a body; a lean route answers only a body that validates. Scopes that
    are not HTTP (lifespan) go to ``fallback`` untouched."""

    def __init__(self, app: FastAPI, routes: dict[str, LeanRoute], max_body_bytes: int,
                 key: str | None = None, fallback: ASGIApp | None = None) -> None:
        self.app = app
        self.routes = routes
        self.max_body_bytes = max_body_bytes
        self.key = key.encode() if key is not None else None
        self.fallback: ASGIApp = fallback if fallback is not None else app

    def count(self, status: int) -> None:
        st = getattr(self.app.state, "ts", None)
        if st is not None:
            st.metrics.http.labels(status=str(status)).inc()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.fallback(scope, receive, send)
            return
        path = scope["path"]
        if self.key is not None and protected(path):
            why = key_problem(scope, self.key)
            if why is not None:
                self.count(401)
                await refuse_unauthorized(send, why)
                return
        if declared_over(scope, self.max_body_bytes):
            self.count(413)
            await refuse_too_large(send, self.max_body_bytes)
            return
        receive = limited(receive, self.max_body_bytes)
        route = self.routes.get(path) if scope["method"] == "POST" else None
        if route is not None and is_json(scope):
            await self._lean(route, scope, receive, send)
        else:
            await self._app(scope, receive, send)

    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        status = 0

        async def counted(msg: Message) -> None:
            nonlocal status
            if msg["type"] == "http.response.start" and not status:
                status = int(msg["status"])
                self.count(status)
            await send(msg)

        try:
            await self.fallback(scope, receive, counted)
        except BaseException:
            if not status:
                self.count(500)
            raise

    async def _lean(self, route: LeanRoute, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            data = await read_body(receive)
        except HTTPException as e:  # the body limit
            self.count(e.status_code)
            await JSONResponse(error_body(e.status_code, str(e.detail)), status_code=e.status_code,
                               headers=e.headers)(scope, receive, send)
            return
        try:
            body = route.model.model_validate(json.loads(data))
        except (ValueError, ValidationError):  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
            await self._app(scope, replay(data, receive), send)
            return
        scope["app"] = self.app  # what FastAPI sets: handlers find the app state through it
        request = Request(scope, receive)
        try:
            try:
                response = await route.handler(body, request)
            except APIError as e:
                response = JSONResponse(e.body, status_code=e.status, headers=e.headers)
        except Exception as exc:
            self.count(500)
            await (await self._server_error(request, exc))(scope, receive, send)
            raise  # for the server's log, as the app's own error middleware does
        except BaseException:
            self.count(500)
            raise
        self.count(response.status_code)
        await response(scope, receive, send)

    async def _server_error(self, request: Request, exc: Exception) -> Response:
        """The app's answer to an unhandled exception (its ``Exception`` handler, else
        Starlette's plain 500)."""
        handler: Any = self.app.exception_handlers.get(Exception) or self.app.exception_handlers.get(500)
        if handler is None:
            return PlainTextResponse("Internal Server Error", status_code=500)
        return await handler(request, exc)
