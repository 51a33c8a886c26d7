"""`guarded`: what protects one app: status counts, API key, body limit, debug routes."""

from __future__ import annotations

from fastapi import FastAPI

from twinserve.server.auth import api_key_of
from twinserve.server.config import ServerConfig
from twinserve.server.debug_routes import register_debug_routes
from twinserve.server.http_front import HttpFront
from twinserve.server.lean_routes import LeanRoute


def guarded(app: FastAPI, cfg: ServerConfig, routes: dict[str, LeanRoute]) -> HttpFront:
    """The ASGI app to serve, in front of ``app`` (call before the app starts). Order of a
    request: status count, API key, body limit, then ``routes`` or the app."""
    if cfg.debug:
        register_debug_routes(app)
    return HttpFront(app, routes, cfg.max_body_bytes, api_key_of(cfg.api_key))
