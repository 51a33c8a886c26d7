"""HTTP transports of the bench client: how a streamed POST's raw bytes are read.

Contract of a transport: an async context manager over one connection pool; ``get_json(path)``
returns a decoded JSON body, ``get_text(path)`` a text body; ``stream(path, body)`` (``body``: a JSON-able dict, or JSON
text already encoded, as bytes) is an async context manager yielding an async iterator of raw body bytes, and raises `HTTPStatusError` for a
non-200 answer (with the body's beginning in the message and the code as ``status``). Errors of
the library surface as `TransportError` (`ConnectError` when no connection could be opened).

``httpx`` is the reference; ``aiohttp`` (C HTTP parser) costs about a quarter of the client CPU
per streamed chunk (36 vs 138 us measured on the CI machine), which matters when one client
process must keep up with a GPU server streaming tens of thousands of tokens per second.
``auto`` picks aiohttp when it is installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
from typing import Any, AsyncIterator

import httpx

from twinserve.core.registry import Registry


class TransportError(RuntimeError):
    """A connection, protocol or timeout error of the underlying HTTP library."""


class ConnectError(TransportError):
    """No connection could be opened (nothing listens there, the host is unreachable): the
    request never reached the server."""


class HTTPStatusError(RuntimeError):
    """The server answered with a status other than 200 (``status``)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


TRANSPORTS: Registry[Any] = Registry("bench transport")


def _body_args(body: dict[str, Any] | bytes, name: str) -> dict[str, Any]:
    """The library's keyword arguments for ``body``: JSON text already encoded goes as the raw
    body (``name``: the library's argument for it) with its content type."""
    if isinstance(body, bytes):
        return {name: body, "headers": {"Content-Type": "application/json"}}
    return {"json": body}


@TRANSPORTS.register("httpx")
class HttpxTransport:
    """httpx.AsyncClient with one pool of up to ``max_connections`` connections."""

    def __init__(self, base_url: str, timeout_s: float, max_connections: int, headers: dict[str, str]) -> None:
        self.client = httpx.AsyncClient(
            base_url=base_url, timeout=httpx.Timeout(timeout_s, connect=30.0), headers=headers,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=1024))

    async def __aenter__(self) -> "HttpxTransport":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()

    async def get_json(self, path: str) -> Any:
        return (await self._get(path)).json()

    async def get_text(self, path: str) -> str:
        return (await self._get(path)).text

    async def _get(self, path: str) -> httpx.Response:
        try:
            r = await self.client.get(path)
        except httpx.ConnectError as e:
            raise ConnectError(f"{type(e).__name__}: {e}") from e
        except httpx.HTTPError as e:
            raise TransportError(f"{type(e).__name__}: {e}") from e
        if r.status_code != 200:
            raise HTTPStatusError(f"HTTP {r.status_code}: {r.text[:300]}", r.status_code)
        return r

    @contextlib.asynccontextmanager
    async def stream(self, path: str, body: dict[str, Any] | bytes) -> AsyncIterator[AsyncIterator[bytes]]:
        try:
            async with self.client.stream("POST", path, **_body_args(body, "content")) as r:
                if r.status_code != 200:
                    text = (await r.aread()).decode(errors="replace")
                    raise HTTPStatusError(f"HTTP {r.status_code}: {text[:300]}", r.status_code)
                yield _wrap_httpx(r.aiter_raw())
        except httpx.ConnectError as e:
            raise ConnectError(f"{type(e).__name__}: {e}") from e
        except httpx.HTTPError as e:
            raise TransportError(f"{type(e).__name__}: {e}") from e


async def _wrap_httpx(it: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        async for b in it:
            yield b
    except httpx.HTTPError as e:
        raise TransportError(f"{type(e).__name__}: {e}") from e


@TRANSPORTS.register("aiohttp")
class AiohttpTransport:
    """aiohttp.ClientSession with a connector limited to ``max_connections``."""

    def __init__(self, base_url: str, timeout_s: float, max_connections: int, headers: dict[str, str]) -> None:
        import aiohttp

        self._aiohttp = aiohttp
        self.base_url = base_url.rstrip("/")
        self.session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=timeout_s, sock_connect=30.0), headers=headers,
            connector=aiohttp.TCPConnector(limit=max_connections, limit_per_host=max_connections))

    async def __aenter__(self) -> "AiohttpTransport":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.session.close()

    async def get_json(self, path: str) -> Any:
        return json.loads(await self.get_text(path))

    async def get_text(self, path: str) -> str:
        try:
            async with self.session.get(self.base_url + path) as r:
                if r.status != 200:
                    raise HTTPStatusError(f"HTTP {r.status}: {(await r.text())[:300]}", r.status)
                return await r.text()
        except self._aiohttp.ClientConnectorError as e:
            raise ConnectError(f"{type(e).__name__}: {e}") from e
        except (self._aiohttp.ClientError, TimeoutError) as e:
            raise TransportError(f"{type(e).__name__}: {e}") from e

    @contextlib.asynccontextmanager
    async def stream(self, path: str, body: dict[str, Any] | bytes) -> AsyncIterator[AsyncIterator[bytes]]:
        try:
            async with self.session.post(self.base_url + path, **_body_args(body, "data")) as r:
                if r.status != 200:
                    raise HTTPStatusError(f"HTTP {r.status}: {(await r.text())[:300]}", r.status)
                yield self._wrap(r.content.iter_any())
        except self._aiohttp.ClientConnectorError as e:
            raise ConnectError(f"{type(e).__name__}: {e}") from e
        except (self._aiohttp.ClientError, TimeoutError) as e:
            raise TransportError(f"{type(e).__name__}: {e}") from e

    async def _wrap(self, it: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        try:
            async for b in it:
                yield b
        except (self._aiohttp.ClientError, TimeoutError) as e:
            raise TransportError(f"{type(e).__name__}: {e}") from e


def run_client(coro: Any) -> Any:
    """``asyncio.run(coro)`` on a uvloop event loop when uvloop is installed (a client that
    opens and reads hundreds of streams at once spends less of its own time per request)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def transport_name(name: str) -> str:
    if name == "auto":
        return "aiohttp" if importlib.util.find_spec("aiohttp") is not None else "httpx"
    return name
