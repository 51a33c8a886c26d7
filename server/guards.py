"""`install_guards`: what protects one app: body limit, API key, status counts, debug routes."""

from __future__ import annotations

from fastapi import FastAPI

from twinserve.server.auth import ApiKeyAuth, api_key_of
from twinserve.server.body_limit import BodyLimit
from twinserve.server.config import ServerConfig
from twinserve.server.debug_routes import register_debug_routes
from twinserve.server.status_metrics import StatusCounter


def install_guards(app: FastAPI, cfg: ServerConfig) -> None:
    """Call before the app starts. Order of a request: status count, API key, body limit, app."""
    app.add_middleware(BodyLimit, max_bytes=cfg.max_body_bytes)
    key = api_key_of(cfg.api_key)
    if key is not None:
        app.add_middleware(ApiKeyAuth, key=key)
    app.add_middleware(StatusCounter)
    if cfg.debug:
        register_debug_routes(app)
