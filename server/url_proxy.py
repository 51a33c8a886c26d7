"""`UrlProxy`: an API server with no engine of its own that forwards each ``/v1/completions`` and
``/v1/chat/completions`` request (streamed or not) to one of ``server.replica_urls``, chosen by a
`UrlRouter` (the same router objects and `SentReplica` views as a ``backend=server`` replay).

Contract:
- The router's prompt is the request's token ids when ``prompt`` is a list of ints, else the
  UTF-8 bytes of the prompt text (chat: the messages' contents joined), so that requests sharing
  a text prefix share a prefix in the router's index; ``max_tokens`` (or
  ``max_completion_tokens``) is counted as outstanding until its tokens stream back (16 when absent).
- A URL that refuses the connection (on a request or on a ``/metrics`` read) is marked down;
  the request goes to another URL. A down URL's ``/health`` is probed after
  ``server.replica_probe_s`` and then after twice the previous wait each time it fails (refused,
  timed out, or not 200), up to ``server.replica_probe_max_s``; once it answers 200 the URL is
  back in rotation (with an empty prefix index: a server that restarted has lost its cache).
  A 429 is retried once on each other live URL. When no URL is left the answer is 503 with
  `UrlRouter.none_left` (or the last 429 when every live URL answered 429). Any other answer,
  error or not, is passed through as it came, with the URL that gave it in the
  ``x-twinserve-upstream`` header.
- ``/health``: 200 ``ok`` when every URL is up, 200 ``degraded`` (with the down URLs) when some
  are down, 503 when all are. ``/metrics``: the proxy's own per-URL gauges and counters.
- `run_proxy` applies ``server.max_body_bytes`` (413) and ``server.api_key`` (401) as the engine
  server does; the engine's own knobs (``queue_limit``, ``max_n``, ...) are the backends' business.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
from typing import Any, AsyncIterator, Mapping, Sequence

import httpx
import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from twinserve.server.auth import ApiKeyAuth, api_key_of
from twinserve.server.body_limit import BodyLimit
from twinserve.server.probe_backoff import PROBE_FIRST_S, PROBE_MAX_S
from twinserve.server.scraped_gauges import scraped_gauges
from twinserve.server.url_router import UrlRouter

DEFAULT_MAX_TOKENS = 16  # what a request without max_tokens is counted as
SCRAPE_INTERVAL_S = 0.5  # how often each live URL's /metrics is read (and due probes are sent)
PROBE_TIMEOUT_S = 2.0  # a down URL's /health probe that takes longer has failed
FORWARDED_HEADERS = ("authorization", "content-type")
UPSTREAM_HEADER = "x-twinserve-upstream"  # the URL that answered, on each proxied response


def prompt_key(body: Mapping[str, Any]) -> np.ndarray:
    """The sequence the router indexes for ``body`` (see the module's contract)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return np.asarray(prompt, dtype=np.int64)
    if prompt is None and isinstance(body.get("messages"), list):
        prompt = "\n".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in body["messages"])
    text = prompt if isinstance(prompt, str) else json.dumps(prompt)
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)


def _max_tokens(body: Mapping[str, Any]) -> int:
    n = body.get("max_tokens", body.get("max_completion_tokens"))
    return int(n) if isinstance(n, int) and n > 0 else DEFAULT_MAX_TOKENS


class UrlProxy:
    """Routes requests over ``urls`` with router ``name``.

    Invariants: every request chosen onto a URL is ended on it (`UrlRouter.on_end`) once its
    answer is fully passed on or failed, so the views' ``in_flight`` return to 0 when idle;
    ``sent[k]`` counts the requests URL ``k`` answered (any status other than 429), ``retries``
    the attempts moved to another URL, ``no_url`` the requests answered 503 for want of one.
    """

    def __init__(self, urls: Sequence[str], name: str = "round_robin", kwargs: Mapping[str, Any] | None = None,
                 timeout_s: float = 3600.0, probe_first_s: float = PROBE_FIRST_S,
                 probe_max_s: float = PROBE_MAX_S) -> None:
        self.urls = [str(u).rstrip("/") for u in urls]
        self.routing = UrlRouter(self.urls, name, kwargs, probe_first_s=probe_first_s, probe_max_s=probe_max_s)
        self.timeout_s = timeout_s
        self.clients: list[httpx.AsyncClient] = []
        self.sent = [0] * len(self.urls)
        self.retries = 0
        self.no_url = 0
        self._rid = 0

    async def start(self) -> None:
        self.clients = [httpx.AsyncClient(base_url=u, timeout=httpx.Timeout(self.timeout_s, connect=5.0),
                                          limits=httpx.Limits(max_connections=None)) for u in self.urls]

    async def close(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self.clients))

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    async def scrape_forever(self, interval_s: float = SCRAPE_INTERVAL_S) -> None:
        """Read every live URL's ``/metrics`` into its view (a refused connection marks it down)
        and probe the down URLs that are due."""
        async def one(k: int) -> None:
            try:
                r = await self.clients[k].get("/metrics", timeout=5.0)
                if r.status_code == 200:
                    self.routing.on_scraped(k, scraped_gauges(r.text))
            except httpx.ConnectError as e:
                self.routing.down(k, f"ConnectError: {e}", self._now())
            except httpx.HTTPError:
                pass

        while True:
            live = [one(k) for k, a in enumerate(self.routing.alive) if a]
            await asyncio.gather(*live, *(self.probe(k) for k in self.routing.due(self._now())))
            await asyncio.sleep(interval_s)

    async def probe(self, k: int) -> bool:
        """Ask down URL ``k``'s ``/health``; 200 puts it back in rotation, anything else backs off."""
        try:
            r = await self.clients[k].get("/health", timeout=PROBE_TIMEOUT_S)
        except httpx.HTTPError as e:
            self.routing.probe_failed(k, self._now(), f"{type(e).__name__}: {e}")
            return False
        if r.status_code != 200:
            self.routing.probe_failed(k, self._now(), f"/health answered {r.status_code}")
            return False
        self.routing.up(k)
        return True

    async def forward(self, path: str, body: dict[str, Any], headers: Mapping[str, str]) -> tuple[int, Any]:
        """Send ``body`` to a chosen URL. Returns ``(k, response)`` with the response's body not
        yet read (the caller passes it on through `relay`, which ends the request), or
        ``(-1, (status, message))`` when no URL took it."""
        routing = self.routing
        self._rid += 1
        key, max_tokens = prompt_key(body), _max_tokens(body)
        fwd = {h: v for h, v in headers.items() if h.lower() in FORWARDED_HEADERS}
        tried: set[int] = set()
        last_429: str | None = None
        loop = asyncio.get_running_loop()
        while True:
            k = routing.choose(self._rid, key, max_tokens, loop.time(), frozenset(tried))
            if k is None:
                self.no_url += 1
                why = routing.none_left() if last_429 is None or not any(routing.alive) else \
                    f"{last_429} (every live URL in server.replica_urls answered 429)"
                return -1, (503, why)
            req = self.clients[k].build_request("POST", path, json=body, headers=fwd)
            try:
                resp = await self.clients[k].send(req, stream=True)
            except httpx.ConnectError as e:
                routing.on_end(k, len(key) + max_tokens)
                routing.down(k, f"ConnectError: {e}", loop.time())
                tried.add(k)
                self.retries += 1
                continue
            except httpx.HTTPError as e:
                routing.on_end(k, len(key) + max_tokens)
                return -1, (502, f"{self.urls[k]} failed: {type(e).__name__}: {e}")
            if resp.status_code == 429:
                last_429 = f"{self.urls[k]} answered 429: {(await resp.aread()).decode(errors='replace')[:300]}"
                await resp.aclose()
                routing.on_end(k, len(key) + max_tokens)
                tried.add(k)
                self.retries += 1
                continue
            self.sent[k] += 1
            resp.extensions["twinserve_counted"] = len(key) + max_tokens
            return k, resp

    async def relay(self, k: int, resp: httpx.Response) -> AsyncIterator[bytes]:
        """``resp``'s body as it comes, each SSE ``data:`` chunk counted as a token back; the
        request is ended on URL ``k`` when the body is done or the client went away."""
        counted = int(resp.extensions["twinserve_counted"])
        seen = 0
        sse = resp.headers.get("content-type", "").startswith("text/event-stream")
        try:
            async for raw in resp.aiter_raw():
                n = raw.count(b"data:") - raw.count(b"data: [DONE]") if sse else 0
                if n > 0:
                    n = min(n, counted - seen)
                    seen += n
                    self.routing.on_tokens(k, n)
                yield raw
        finally:
            await resp.aclose()
            self.routing.on_end(k, counted - seen)

    def health(self) -> tuple[int, dict[str, Any]]:
        down = {u: self.routing.why_down.get(i, "") for i, u in enumerate(self.urls) if not self.routing.alive[i]}
        if len(down) == len(self.urls):
            return 503, {"status": "unavailable", "down": down}
        return 200, {"status": "degraded" if down else "ok", "urls": self.urls, "down": down}

    def metrics_text(self) -> str:
        """Prometheus text of the proxy's per-URL state."""
        rows = [("twinserve_proxy_url_up", "gauge", "1 while the URL is in rotation",
                 [float(a) for a in self.routing.alive]),
                ("twinserve_proxy_in_flight", "gauge", "requests sent to the URL and not yet ended",
                 [v.in_flight for v in self.routing.views]),
                ("twinserve_proxy_outstanding_tokens", "gauge", "prompt + max_tokens less tokens streamed back",
                 [v.tokens for v in self.routing.views]),
                ("twinserve_proxy_requests_total", "counter", "requests the URL answered (not 429)", self.sent),
                ("twinserve_proxy_url_returns_total", "counter", "times the URL came back into rotation",
                 self.routing.returns)]
        out: list[str] = []
        for name, kind, help_, vals in rows:
            out += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
            out += [f'{name}{{url="{u}"}} {v}' for u, v in zip(self.urls, vals)]
        out += ["# TYPE twinserve_proxy_retries_total counter", f"twinserve_proxy_retries_total {self.retries}",
                "# TYPE twinserve_proxy_no_url_total counter", f"twinserve_proxy_no_url_total {self.no_url}"]
        return "\n".join(out) + "\n"


def build_proxy_app(proxy: UrlProxy) -> FastAPI:
    """The FastAPI app serving ``proxy``: the two OpenAI routes, ``/v1/models``, ``/health``,
    ``/metrics``."""
    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        await proxy.start()
        task = asyncio.create_task(proxy.scrape_forever())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await proxy.close()

    app = FastAPI(lifespan=lifespan)

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": "proxy_error", "code": status}}, status)

    async def route(request: Request, path: str) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return error(400, "the request body is not JSON")
        if not isinstance(body, dict):
            return error(400, "the request body must be a JSON object")
        k, got = await proxy.forward(path, body, request.headers)
        if k < 0:
            return error(*got)
        keep = {h: v for h, v in got.headers.items() if h.lower() in ("content-type", "retry-after")}
        keep[UPSTREAM_HEADER] = proxy.urls[k]
        return StreamingResponse(proxy.relay(k, got), status_code=got.status_code, headers=keep)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await route(request, "/v1/completions")

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await route(request, "/v1/chat/completions")

    @app.get("/v1/models")
    async def models() -> Response:
        for k, c in enumerate(proxy.clients):
            if proxy.routing.alive[k]:
                with contextlib.suppress(httpx.HTTPError):
                    r = await c.get("/v1/models", timeout=5.0)
                    return Response(r.content, r.status_code, media_type="application/json")
        return error(503, proxy.routing.none_left())

    @app.get("/health")
    async def health() -> Response:
        status, body = proxy.health()
        return JSONResponse(body, status)

    @app.get("/metrics")
    async def metrics() -> Response:
        return PlainTextResponse(proxy.metrics_text(), media_type="text/plain; version=0.0.4")

    return app


def run_proxy(cfg: Any) -> None:
    """Serve a `UrlProxy` over ``cfg.replica_urls`` (a `ServerConfig`) until SIGINT/SIGTERM, then
    return (a clean stop)."""
    import uvicorn

    proxy = UrlProxy(cfg.replica_urls, cfg.router, cfg.router_kwargs, cfg.request_timeout_s or 3600.0,
                     cfg.replica_probe_s, cfg.replica_probe_max_s)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((cfg.host, cfg.port))
    url = f"http://{cfg.host}:{sock.getsockname()[1]}"
    print(f"twinserve: routing over {len(proxy.urls)} URLs with {cfg.router} at {url}", flush=True)
    app = build_proxy_app(proxy)
    app.add_middleware(BodyLimit, max_bytes=cfg.max_body_bytes)
    key = api_key_of(cfg.api_key)
    if key is not None:  # the proxy's own key; the Authorization header is forwarded as well
        app.add_middleware(ApiKeyAuth, key=key)
    config = uvicorn.Config(app, log_level=cfg.log_level, lifespan="on", access_log=False,
                            timeout_graceful_shutdown=3)
    stops = (signal.SIGINT, signal.SIGTERM)
    old = {s: signal.signal(s, _exit_on) for s in stops}  # uvicorn re-raises the signal it caught
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except SystemExit as e:
        if e.code not in tuple(128 + s for s in stops):
            raise
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _exit_on(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)
