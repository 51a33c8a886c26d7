"""`ApiKeyAuth`: an ASGI middleware that makes ``/v1/*`` and ``/generate`` require a bearer key.

The key is ``server.api_key``, else the ``TWINSERVE_API_KEY`` environment variable (see
`api_key_of`); with neither, the middleware is not installed. ``/health``, ``/metrics`` and the
OpenAPI pages stay open (probes and scrapers carry no key). Keys are compared in constant time.
"""

from __future__ import annotations

import hmac
import os

from starlette.types import ASGIApp, Receive, Scope, Send

from twinserve.server.body_limit import send_json
from twinserve.server.errors import error_body

API_KEY_ENV = "TWINSERVE_API_KEY"
PROTECTED_PREFIXES = ("/v1/", "/generate")


def api_key_of(configured: str | None) -> str | None:
    """The key to require: the configured one, else the environment's, else None."""
    return configured or os.environ.get(API_KEY_ENV) or None


def protected(path: str) -> bool:
    return path == "/v1" or any(path == p or path.startswith(p if p.endswith("/") else p + "/")
                                for p in PROTECTED_PREFIXES)


def key_problem(scope: Scope, key: bytes) -> str | None:
    """Why the request may not pass (no key, a wrong key), or None when it carries ``key``."""
    given = b""
    for k, v in scope.get("headers") or ():
        if k == b"authorization":
            scheme, _, token = v.partition(b" ")
            if scheme.lower() == b"bearer":
                given = token.strip()
    if hmac.compare_digest(given, key):
        return None
    return "a wrong API key" if given else "no API key"


async def refuse_unauthorized(send: Send, why: str) -> None:
    """The 401 answer to a request that `key_problem` refuses for ``why``."""
    await send_json(send, 401, error_body(
        401, f"this server requires an API key (Authorization: Bearer <key>); the request "
        f"carried {why}", code="invalid_api_key"), {"WWW-Authenticate": "Bearer"})


class ApiKeyAuth:
    """Invariant: a protected path reaches the app only with ``Authorization: Bearer <key>``."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self.key = key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and protected(scope.get("path", "")):
            why = key_problem(scope, self.key)
            if why is not None:
                await refuse_unauthorized(send, why)
                return
        await self.app(scope, receive, send)
