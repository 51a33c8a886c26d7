"""`HttpFront` (the guards and lean routes in one layer) answers as the guards do as separate
middleware, and counts every response once."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from pydantic import BaseModel, ConfigDict
from starlette.requests import Request
from starlette.responses import Response

from twinserve.server.auth import ApiKeyAuth
from twinserve.server.body_limit import BodyLimit
from twinserve.server.errors import APIError, error_body
from twinserve.server.http_front import HttpFront
from twinserve.server.lean_routes import LeanRoute
from twinserve.server.metrics import ServerMetrics

KEY = "sekrit"
LIMIT = 64


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    x: int


async def _lean(body: _Body, request: Request) -> Response:
    if body.x < 0:
        raise APIError(400, "x must be >= 0", param="x")
    if body.x == 13:
        raise RuntimeError("unlucky")
    return JSONResponse({"x": body.x, "by": "lean", "app": request.app.title})


def _app() -> FastAPI:
    app = FastAPI(title="front-test")

    @app.post("/v1/x")
    async def x(body: _Body) -> dict[str, Any]:
        return {"x": body.x, "by": "fastapi"}

    @app.get("/open")
    async def open_() -> dict[str, str]:
        return {"ok": "yes"}

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(error_body(500, "internal server error"), status_code=500)

    app.state.ts = SimpleNamespace(metrics=ServerMetrics("m"))
    return app


def _front() -> tuple[HttpFront, FastAPI]:
    app = _app()
    return HttpFront(app, {"/v1/x": LeanRoute(_Body, _lean)}, LIMIT, KEY), app


def _middleware_stack() -> FastAPI:
    """The same guards as separate middleware around the same app (no lean route)."""
    app = _app()
    app.add_middleware(BodyLimit, max_bytes=LIMIT)
    app.add_middleware(ApiKeyAuth, key=KEY)
    return app


AUTH = {"authorization": f"Bearer {KEY}"}
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/open", {}),
    ("GET", "/nowhere", {}),
    ("GET", "/v1/x", {"headers": AUTH}),  # 405
    ("POST", "/v1/x", {"json": {"x": 1}}),  # no key: 401
    ("POST", "/v1/x", {"json": {"x": 1}, "headers": {"authorization": "Bearer wrong"}}),
    ("POST", "/v1/x", {"json": {"x": "1"}, "headers": AUTH}),  # invalid: the app's 422
    ("POST", "/v1/x", {"content": b'{"x": ', "headers": {**AUTH, "content-type": "application/json"}}),
    ("POST", "/v1/x", {"json": {"x": 1, "pad": "p" * 100}, "headers": AUTH}),  # declared over the limit
]


def _answer(r: Any) -> tuple[int, Any, dict[str, str]]:
    headers = {k: v for k, v in r.headers.items() if k not in ("date", "server")}
    return r.status_code, r.content, headers


@pytest.mark.parametrize("method,path,kw", CASES)
def test_the_front_answers_what_the_guards_and_the_app_answer(method: str, path: str, kw: dict[str, Any]) -> None:
    front, _ = _front()
    with TestClient(front) as a, TestClient(_middleware_stack()) as b:
        assert _answer(a.request(method, path, **kw)) == _answer(b.request(method, path, **kw))


def _counts(app: FastAPI) -> dict[str, float]:
    fam = app.state.ts.metrics.registry.get_sample_value
    return {s: fam("twinserve_http_requests_total", {"model_name": "m", "status": s}) or 0.0
            for s in ("200", "400", "401", "404", "405", "413", "422", "500")}


def test_the_front_serves_valid_bodies_itself_and_counts_each_response_once() -> None:
    front, app = _front()
    with TestClient(front, raise_server_exceptions=False) as c:
        r = c.post("/v1/x", json={"x": 3}, headers=AUTH)
        assert r.json() == {"x": 3, "by": "lean", "app": "front-test"}  # the handler sees the app
        r = c.post("/v1/x", json={"x": -1}, headers=AUTH)
        assert r.status_code == 400 and r.json()["error"]["param"] == "x"
        r = c.post("/v1/x", json={"x": 13}, headers=AUTH)  # a handler that raises: the app's 500
        assert r.status_code == 500 and r.json() == error_body(500, "internal server error")
        assert c.post("/v1/x", json={"x": "3"}, headers=AUTH).json()["detail"][0]["input"] == "3"
        assert c.get("/nowhere").status_code == 404
        assert c.post("/v1/x", json={"x": 1}).status_code == 401

        def chunks() -> Any:  # no declared length: refused as the body passes the limit
            yield b'{"x": 1, "pad": "'
            yield b"p" * 100
            yield b'"}'

        r = c.post("/v1/x", content=chunks(), headers={**AUTH, "content-type": "application/json"})
        assert r.status_code == 413 and "max_body_bytes" in r.json()["error"]["message"]
    assert _counts(app) == {"200": 1, "400": 1, "401": 1, "404": 1, "405": 0, "413": 1, "422": 1, "500": 1}
