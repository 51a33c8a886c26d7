"""Bench client: replay a `Workload` against any OpenAI-compatible server at the trace's times.

Each request is sent at ``start + spec.arrival`` (open loop, optionally capped by
``max_concurrency``) as a streaming ``/v1/completions`` call with the prompt as token ids (or as
text decoded with the model's tokenizer), ``max_tokens = spec.output_len``, ``ignore_eos`` and
``stream_options.include_usage``, through an httpx or aiohttp transport (`bench_transport`).
Everything is timed on the client with ``time.perf_counter`` relative to the benchmark start:

- ``arrival_s``: when the request was sent; ``first_token_s``: the first chunk that carries a
  choice; ``token_times``: every such chunk (one per token on servers that stream token by token;
  ITL pools the gaps between chunks, as vLLM's benchmark does); ``finish_s``: end of the stream;
- ``output_tokens``, ``prompt_tokens``, ``cached_tokens``: from the final ``usage`` when the server
  sends one, else counted chunks and the workload's prompt length;
- ``replica``: the URL's index with ``replica_urls``; else the engine replica a twinserve server
  running several reports in its ``usage`` (``replica``), or 0;
- ``scheduled_s`` is NaN and ``preemptions`` 0 (a client cannot see them); a request that fails
  (HTTP error, broken stream, timeout) gets ``finish_reason="abort"`` and NaN finish time.

With ``replica_urls`` (``server.replica_urls=[URL, ...]``) each request goes to one of several
servers, picked by a `twinserve.policies.routing` router (``router``, ``router_kwargs``) over
`UrlRouter`'s views (what was sent to each and what came back); its ``replica`` column is the
URL's index. A URL that refuses the connection is taken out of rotation and the request goes to
another; a 429 (queue full) is retried on each other live URL once; a request fails with the
list of URLs only when none is left.

`bench_workload` is the Python API; `run_bench(cfg, workload)` adapts it to the experiments app
(``twinserve-run backend=server backend.url=URL``), which writes requests.parquet/summary.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd

from twinserve.core.metrics import COLUMNS, format_summary, summarize
from twinserve.core.errors import UserError
from twinserve.server.bench_transport import (
    TRANSPORTS, ConnectError, HTTPStatusError, TransportError, run_client, transport_name,
)
from twinserve.server.scraped_gauges import scraped_gauges
from twinserve.server.url_router import UrlRouter


# a streamed chunk with one unfinished choice (vLLM and twinserve write JSON without spaces)
_PLAIN_TOKEN = b'"finish_reason":null}]'


@dataclass(slots=True)
class BenchConfig:
    """Where and how to send the workload.

    ``prompt_format``: "ids" (token ids, exact lengths) or "text" (ids decoded with the tokenizer
    at ``tokenizer_path``; the server re-tokenizes, so lengths may shift slightly).
    ``max_concurrency``: most requests in flight (None: open loop, pure trace timing).
    ``send_tenant_priority``: send ``user`` (tenant) and ``priority`` fields (twinserve's server
    uses them; servers without priority scheduling may reject ``priority``).
    ``transport``: "httpx", "aiohttp" or "auto" (aiohttp when installed: see `bench_transport`).
    ``replica_urls``: several servers instead of ``base_url`` (routed with ``router`` and
    ``router_kwargs``; see the module docstring); ``metrics_interval_s``: how often each of them
    has its ``/metrics`` read for the router's views (0 or None: never).
    ``warm_connections``: about this many connections opened to each server (concurrent
    ``GET /v1/models``) before the clock starts, as a long-running client holds them; 0: every
    request that finds no idle connection opens one on the clock.
    """

    base_url: str = "http://127.0.0.1:8000"
    model: str | None = None
    endpoint: str = "/v1/completions"
    timeout_s: float = 600.0
    prompt_format: str = "ids"
    tokenizer_path: str | None = None
    temperature: float = 0.0
    ignore_eos: bool = True
    max_concurrency: int | None = None
    send_tenant_priority: bool = False
    api_key: str | None = None
    transport: str = "auto"
    extra_body: dict[str, Any] = field(default_factory=dict)
    replica_urls: list[str] | None = None
    router: str = "round_robin"
    router_kwargs: dict[str, Any] = field(default_factory=dict)
    metrics_interval_s: float | None = 1.0
    warm_connections: int = 0

    def urls(self) -> list[str]:
        return [str(u).rstrip("/") for u in self.replica_urls] if self.replica_urls else [self.base_url]


@dataclass(slots=True)
class _Row:
    """One request's client-side record (becomes one `requests_frame` row)."""

    rid: int
    tenant: str
    priority: int
    replica: int = 0
    arrival_s: float = float("nan")
    first_token_s: float = float("nan")
    finish_s: float = float("nan")
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    finish_reason: str | None = None
    token_times: list[float] = field(default_factory=list)
    error: str | None = None

    def as_row(self) -> dict[str, Any]:
        return {"rid": self.rid, "replica": self.replica, "tenant": self.tenant, "priority": self.priority,
                "arrival_s": self.arrival_s, "scheduled_s": float("nan"),
                "first_token_s": self.first_token_s, "finish_s": self.finish_s,
                "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
                "cached_tokens": self.cached_tokens, "preemptions": 0,
                "finish_reason": self.finish_reason,
                "token_times": np.asarray(self.token_times, dtype=np.float64)}


@dataclass(slots=True)
class BenchResult:
    requests: pd.DataFrame
    summary: dict[str, Any]
    errors: list[tuple[int, str]]


def frame(rows: list[_Row]) -> pd.DataFrame:
    """Rows in exactly `core.metrics.COLUMNS` with the same dtypes as `requests_frame`."""
    df = pd.DataFrame([r.as_row() for r in rows], columns=list(COLUMNS))
    for c in ("rid", "replica", "priority", "prompt_tokens", "output_tokens", "cached_tokens", "preemptions"):
        df[c] = df[c].astype(np.int64)
    for c in ("arrival_s", "scheduled_s", "first_token_s", "finish_s"):
        df[c] = df[c].astype(np.float64)
    for c in ("tenant", "finish_reason", "token_times"):
        df[c] = df[c].astype(object)
    return df


class _Retry(Exception):
    """The attempt on one server ended before it sent anything back; another may take it."""

    def __init__(self, why: str, down: bool) -> None:
        super().__init__(why)
        self.down = down


class _Replayer:
    """Sends one workload over ``clients`` (one transport per URL; ``routing`` picks among
    several); owns the shared clock."""

    def __init__(self, cfg: BenchConfig, model: str, clients: list[Any], routing: UrlRouter | None = None) -> None:
        self.cfg = cfg
        self.model = model
        self.clients = clients
        self.routing = routing
        self.t0 = 0.0
        self.sem = asyncio.Semaphore(cfg.max_concurrency) if cfg.max_concurrency else None

    def body(self, prompt: Any, spec: Any) -> dict[str, Any]:
        b: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": int(spec.output_len),
                             "temperature": self.cfg.temperature, "stream": True,
                             "stream_options": {"include_usage": True}}
        if self.cfg.ignore_eos:
            b["ignore_eos"] = True
        if self.cfg.send_tenant_priority:
            b["user"] = str(spec.tenant)
            b["priority"] = int(spec.priority)
        b.update(self.cfg.extra_body)
        return b

    def encoded(self, prompt: Any, spec: Any) -> bytes:
        """`body` as the JSON bytes sent (encoded before the clock starts)."""
        return json.dumps(self.body(prompt, spec), separators=(",", ":")).encode()

    async def one(self, spec: Any, prompt: Any, ids: np.ndarray | None = None, body: bytes | None = None) -> _Row:
        """Send one request at its arrival time; ``body``: its `encoded` body, made ahead (None:
        built from ``prompt`` now)."""
        row = _Row(int(spec.rid), str(spec.tenant), int(spec.priority), prompt_tokens=int(spec.prompt_len))
        due = self.t0 + float(spec.arrival)
        # an event loop's timers may fire up to a millisecond early (uvloop rounds them): sleep
        # again until the arrival time has passed
        while (delay := due - time.perf_counter()) > 0:
            await asyncio.sleep(delay)
        if self.sem is not None:
            async with self.sem:
                await self._route(spec, prompt, ids, row, body)
        else:
            await self._route(spec, prompt, ids, row, body)
        return row

    async def _route(self, spec: Any, prompt: Any, ids: np.ndarray | None, row: _Row,
                     body: bytes | None) -> None:
        sent: dict[str, Any] | bytes = body if body is not None else self.body(prompt, spec)
        if self.routing is None:
            await self._send(spec, sent, row, 0)
            return
        routing = self.routing
        tried: set[int] = set()
        last_429: str | None = None
        prompt_ids = ids if ids is not None else np.asarray(prompt, dtype=np.int32)
        row.arrival_s = time.perf_counter() - self.t0
        while True:
            k = routing.choose(row.rid, prompt_ids, int(spec.output_len), row.arrival_s, frozenset(tried))
            if k is None:
                why = routing.none_left() if last_429 is None or not any(routing.alive) else \
                    f"{last_429} (every live server in replica_urls answered 429)"
                row.error, row.finish_reason, row.finish_s = f"NoReplica: {why}", "abort", float("nan")
                return
            row.replica = k
            try:
                await self._send(spec, sent, row, k)
                return
            except _Retry as e:
                tried.add(k)
                if e.down:
                    routing.down(k, str(e))
                else:
                    last_429 = str(e)

    async def _send(self, spec: Any, body: dict[str, Any] | bytes, row: _Row, k: int) -> None:
        """One attempt on server ``k``; raises `_Retry` (with ``routing``) when it refused the
        connection or answered 429."""
        clock = time.perf_counter
        routing = self.routing
        if routing is None:
            row.arrival_s = clock() - self.t0
        usage: dict[str, Any] | None = None
        counted = int(spec.prompt_len) + int(spec.output_len)
        try:
            async with self.clients[k].stream(self.cfg.endpoint, body) as chunks:
                buf = b""
                done = False
                async for raw in chunks:
                    now = clock() - self.t0
                    buf += raw
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        if not line.startswith(b"data:"):
                            continue
                        data = line[5:].strip()
                        if data == b"[DONE]":
                            done = True
                            break
                        if _PLAIN_TOKEN in data and b'"usage":{' not in data and b'"error"' not in data:
                            row.token_times.append(now)  # fast path: one token chunk, nothing to read
                            if routing is not None:
                                routing.on_tokens(k)
                            continue
                        chunk = json.loads(data)
                        if "error" in chunk:
                            raise RuntimeError(f"stream error: {chunk['error']}")
                        if chunk.get("usage"):
                            usage = chunk["usage"]
                        for ch in chunk.get("choices") or ():
                            row.token_times.append(now)
                            if routing is not None:
                                routing.on_tokens(k)
                            if ch.get("finish_reason"):
                                row.finish_reason = ch["finish_reason"]
                    if done:
                        break
            row.finish_s = clock() - self.t0
        except (ConnectError, HTTPStatusError) as e:
            if routing is not None:
                routing.on_end(k, counted - len(row.token_times))
                if isinstance(e, ConnectError) or e.status == 429:
                    raise _Retry(f"{type(e).__name__}: {e}", down=isinstance(e, ConnectError)) from e
                routing = None
            row.error = f"{type(e).__name__}: {e}"
            row.finish_reason = "abort"
            row.finish_s = float("nan")
        except (RuntimeError, ValueError) as e:  # TransportError, bad JSON
            row.error = f"{type(e).__name__}: {e}"
            row.finish_reason = "abort"
            row.finish_s = float("nan")
        if routing is not None:
            routing.on_end(k, counted - len(row.token_times))
        if row.token_times:
            row.first_token_s = row.token_times[0]
        row.output_tokens = len(row.token_times)
        if usage:
            row.output_tokens = int(usage.get("completion_tokens", row.output_tokens))
            row.prompt_tokens = int(usage.get("prompt_tokens", row.prompt_tokens))
            details = usage.get("prompt_tokens_details") or {}
            row.cached_tokens = int(details.get("cached_tokens") or 0)
            if self.routing is None and isinstance(usage.get("replica"), int):
                row.replica = int(usage["replica"])  # twinserve-serve replicas=N: the engine replica
        if row.error is None and row.finish_reason is None:
            row.finish_reason = "length"


def _prompts(cfg: BenchConfig, ids: list[np.ndarray]) -> list[Any]:
    if cfg.prompt_format == "ids":
        return [a.tolist() for a in ids]
    if cfg.prompt_format != "text":
        raise ValueError(f"prompt_format must be 'ids' or 'text', got {cfg.prompt_format!r}")
    if not cfg.tokenizer_path:
        raise ValueError("prompt_format='text' needs tokenizer_path (the model directory)")
    from twinserve.server.tokenization import TextTokenizer

    tok = TextTokenizer(cfg.tokenizer_path)
    return [tok.decode(a.tolist()) for a in ids]


async def _probe(cfg: BenchConfig, clients: list[Any], routing: UrlRouter | None) -> str:
    """The served model name (``cfg.model`` or the first answering server's); with several URLs,
    those that refuse the connection are marked down (a `UserError` when none answers)."""
    if routing is None:
        return cfg.model or str((await clients[0].get_json("/v1/models"))["data"][0]["id"])
    model = cfg.model
    for k, client in enumerate(clients):
        try:
            got = await client.get_json("/v1/models")
        except ConnectError as e:
            routing.down(k, f"{type(e).__name__}: {e}")
            continue
        model = model or str(got["data"][0]["id"])
    if not any(routing.alive):
        raise UserError(routing.none_left(), "server.replica_urls")
    assert model is not None
    return model


async def _warm(clients: list[Any], routing: UrlRouter | None, n: int) -> None:
    """Open about ``n`` connections to each live server: ``n`` concurrent cheap requests, whose
    connections stay idle in the pool for the workload's requests (failures are ignored: the
    workload's own requests report them)."""

    async def one(client: Any) -> None:
        with contextlib.suppress(TransportError, HTTPStatusError):
            await client.get_json("/v1/models")

    live = [c for k, c in enumerate(clients) if routing is None or routing.alive[k]]
    await asyncio.gather(*(one(c) for c in live for _ in range(n)))


async def _scrape(clients: list[Any], routing: UrlRouter, interval_s: float) -> None:
    """Read every live URL's ``/metrics`` into ``routing`` every ``interval_s`` until cancelled;
    a URL that does not answer keeps its last gauges (failures are the requests' to report)."""

    async def one(k: int) -> None:
        try:
            routing.on_scraped(k, scraped_gauges(await clients[k].get_text("/metrics")))
        except (TransportError, HTTPStatusError):
            pass

    while True:
        await asyncio.gather(*(one(k) for k, a in enumerate(routing.alive) if a))
        await asyncio.sleep(interval_s)


async def _replay(cfg: BenchConfig, workload: Any) -> tuple[list[_Row], float]:
    ids = [workload.prompt_tokens(s) for s in workload]
    prompts = _prompts(cfg, ids)
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    urls = cfg.urls()
    routing = UrlRouter(urls, cfg.router, cfg.router_kwargs) if cfg.replica_urls else None
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(TRANSPORTS.create(
            transport_name(cfg.transport), base_url=u, timeout_s=cfg.timeout_s,
            max_connections=cfg.max_concurrency or 100_000, headers=headers)) for u in urls]
        model = await _probe(cfg, clients, routing)
        rep = _Replayer(cfg, model, clients, routing)
        bodies = [rep.encoded(p, s) for s, p in zip(workload, prompts)]
        if cfg.warm_connections > 0:
            await _warm(clients, routing, cfg.warm_connections)
        scraper = None
        if routing is not None and cfg.metrics_interval_s:
            scraper = asyncio.create_task(_scrape(clients, routing, float(cfg.metrics_interval_s)))
        rep.t0 = time.perf_counter()
        try:
            rows = await asyncio.gather(*(rep.one(s, p, i, b) for s, p, i, b in zip(workload, prompts, ids, bodies)))
        finally:
            if scraper is not None:
                scraper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await scraper
        duration = time.perf_counter() - rep.t0
    return list(rows), duration


def bench_workload(cfg: BenchConfig, workload: Any, print_summary: bool = False) -> BenchResult:
    """Replay ``workload`` against ``cfg.base_url`` (or ``cfg.replica_urls``); returns the
    requests frame and its summary."""
    rows, _ = run_client(_replay(cfg, workload))
    df = frame(rows)
    summary = summarize(df)
    if print_summary:
        print(format_summary(summary, title="twinserve bench client"))
    errors = [(r.rid, r.error) for r in rows if r.error]
    return BenchResult(df, summary, errors)


def bench_config_from(cfg: Mapping[str, Any]) -> BenchConfig:
    """A `BenchConfig` from the experiments' run config (``backend`` node of ``backend=server``;
    ``server.base_url`` is accepted as well; ``server.replica_urls`` with the run's ``router`` and
    ``router_kwargs`` route over several servers; ``model.path`` gives the tokenizer for text
    prompts)."""
    b = dict(cfg.get("backend") or {})
    srv = dict(cfg.get("server") or {})
    url = srv.get("base_url") or b.get("url") or BenchConfig.base_url
    known = set(BenchConfig.__dataclass_fields__)
    routed = ("base_url", "model", "replica_urls", "router", "router_kwargs")
    extra = {k: v for k, v in b.items() if k in known and k not in routed and v is not None}
    tok = extra.pop("tokenizer_path", None) or (cfg.get("model") or {}).get("path")
    urls = srv.get("replica_urls")
    if urls is not None and (isinstance(urls, str) or not urls):
        raise UserError(f"server.replica_urls={urls}: a non-empty list of server URLs, "
                        "e.g. server.replica_urls=[http://h1:8000,http://h2:8000]", "server.replica_urls")
    return BenchConfig(base_url=str(url).rstrip("/"), model=b.get("model_name") or b.get("model"),
                       tokenizer_path=tok, replica_urls=[str(u) for u in urls] if urls else None,
                       router=str(cfg.get("router") or "round_robin"),
                       router_kwargs=dict(cfg.get("router_kwargs") or {}), **extra)


def run_bench(cfg: Mapping[str, Any], workload: Any) -> tuple[pd.DataFrame, None, dict[str, Any]]:
    """The experiments app's entry: (requests frame, no steps, metadata for summary.json).

    The app computes and prints the summary itself from the frame (vLLM key names)."""
    bc = bench_config_from(cfg)
    res = bench_workload(bc, workload)
    meta = {"bench_client": {"base_url": bc.base_url, "replica_urls": bc.replica_urls,
                             "router": bc.router if bc.replica_urls else None, "endpoint": bc.endpoint,
                             "transport": transport_name(bc.transport),
                             "prompt_format": bc.prompt_format, "max_concurrency": bc.max_concurrency,
                             "errors": len(res.errors), "first_errors": res.errors[:5]}}
    if bc.replica_urls:  # summary.json's run facts: the servers routed over, not the config's replicas=1
        meta.update(replicas=len(bc.replica_urls), router=bc.router)
    return res.requests, None, meta
