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
- ``scheduled_s`` is NaN and ``preemptions`` 0 (a client cannot see them); a request that fails
  (HTTP error, broken stream, timeout) gets ``finish_reason="abort"`` and NaN finish time.

`bench_workload` is the Python API; `run_bench(cfg, workload)` adapts it to the experiments app
(``twinserve-run backend=server backend.url=URL``), which writes requests.parquet/summary.json.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd

from twinserve.core.metrics import COLUMNS, format_summary, summarize
from twinserve.server.bench_transport import TRANSPORTS, transport_name


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


@dataclass(slots=True)
class _Row:
    """One request's client-side record (becomes one `requests_frame` row)."""

    rid: int
    tenant: str
    priority: int
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
        return {"rid": self.rid, "replica": 0, "tenant": self.tenant, "priority": self.priority,
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


class _Replayer:
    """Sends one workload; owns the HTTP client and the shared clock."""

    def __init__(self, cfg: BenchConfig, model: str, client: Any) -> None:
        self.cfg = cfg
        self.model = model
        self.client = client
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

    async def one(self, spec: Any, prompt: Any) -> _Row:
        row = _Row(int(spec.rid), str(spec.tenant), int(spec.priority), prompt_tokens=int(spec.prompt_len))
        delay = self.t0 + float(spec.arrival) - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if self.sem is not None:
            async with self.sem:
                await self._send(spec, prompt, row)
        else:
            await self._send(spec, prompt, row)
        return row

    async def _send(self, spec: Any, prompt: Any, row: _Row) -> None:
        clock = time.perf_counter
        row.arrival_s = clock() - self.t0
        usage: dict[str, Any] | None = None
        try:
            async with self.client.stream(self.cfg.endpoint, self.body(prompt, spec)) as chunks:
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
                            continue
                        chunk = json.loads(data)
                        if "error" in chunk:
                            raise RuntimeError(f"stream error: {chunk['error']}")
                        if chunk.get("usage"):
                            usage = chunk["usage"]
                        for ch in chunk.get("choices") or ():
                            row.token_times.append(now)
                            if ch.get("finish_reason"):
                                row.finish_reason = ch["finish_reason"]
                    if done:
                        break
            row.finish_s = clock() - self.t0
        except (RuntimeError, ValueError) as e:  # TransportError, HTTPStatusError, bad JSON
            row.error = f"{type(e).__name__}: {e}"
            row.finish_reason = "abort"
            row.finish_s = float("nan")
        if row.token_times:
            row.first_token_s = row.token_times[0]
        row.output_tokens = len(row.token_times)
        if usage:
            row.output_tokens = int(usage.get("completion_tokens", row.output_tokens))
            row.prompt_tokens = int(usage.get("prompt_tokens", row.prompt_tokens))
            details = usage.get("prompt_tokens_details") or {}
            row.cached_tokens = int(details.get("cached_tokens") or 0)
        if row.error is None and row.finish_reason is None:
            row.finish_reason = "length"


def _prompts(cfg: BenchConfig, workload: Any) -> list[Any]:
    ids = [workload.prompt_tokens(s) for s in workload]
    if cfg.prompt_format == "ids":
        return [a.tolist() for a in ids]
    if cfg.prompt_format != "text":
        raise ValueError(f"prompt_format must be 'ids' or 'text', got {cfg.prompt_format!r}")
    if not cfg.tokenizer_path:
        raise ValueError("prompt_format='text' needs tokenizer_path (the model directory)")
    from twinserve.server.tokenization import TextTokenizer

    tok = TextTokenizer(cfg.tokenizer_path)
    return [tok.decode(a.tolist()) for a in ids]


async def _replay(cfg: BenchConfig, workload: Any) -> tuple[list[_Row], float]:
    prompts = _prompts(cfg, workload)
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    transport = TRANSPORTS.create(transport_name(cfg.transport), base_url=cfg.base_url,
                                  timeout_s=cfg.timeout_s, max_connections=cfg.max_concurrency or 100_000,
                                  headers=headers)
    async with transport as client:
        model = cfg.model or str((await client.get_json("/v1/models"))["data"][0]["id"])
        rep = _Replayer(cfg, model, client)
        rep.t0 = time.perf_counter()
        rows = await asyncio.gather(*(rep.one(s, p) for s, p in zip(workload, prompts)))
        duration = time.perf_counter() - rep.t0
    return list(rows), duration


def bench_workload(cfg: BenchConfig, workload: Any, print_summary: bool = False) -> BenchResult:
    """Replay ``workload`` against ``cfg.base_url``; returns the requests frame and its summary."""
    rows, _ = asyncio.run(_replay(cfg, workload))
    df = frame(rows)
    summary = summarize(df)
    if print_summary:
        print(format_summary(summary, title="twinserve bench client"))
    errors = [(r.rid, r.error) for r in rows if r.error]
    return BenchResult(df, summary, errors)


def bench_config_from(cfg: Mapping[str, Any]) -> BenchConfig:
    """A `BenchConfig` from the experiments' run config (``backend`` node of ``backend=server``;
    ``server.base_url`` is accepted as well; ``model.path`` gives the tokenizer for text prompts)."""
    b = dict(cfg.get("backend") or {})
    srv = dict(cfg.get("server") or {})
    url = srv.get("base_url") or b.get("url") or BenchConfig.base_url
    known = set(BenchConfig.__dataclass_fields__)
    extra = {k: v for k, v in b.items() if k in known and k not in ("base_url", "model") and v is not None}
    tok = extra.pop("tokenizer_path", None) or (cfg.get("model") or {}).get("path")
    return BenchConfig(base_url=str(url).rstrip("/"), model=b.get("model_name") or b.get("model"),
                       tokenizer_path=tok, **extra)


def run_bench(cfg: Mapping[str, Any], workload: Any) -> tuple[pd.DataFrame, None, dict[str, Any]]:
    """The experiments app's entry: (requests frame, no steps, metadata for summary.json).

    The app computes and prints the summary itself from the frame (vLLM key names)."""
    bc = bench_config_from(cfg)
    res = bench_workload(bc, workload)
    meta = {"bench_client": {"base_url": bc.base_url, "endpoint": bc.endpoint,
                             "transport": transport_name(bc.transport),
                             "prompt_format": bc.prompt_format, "max_concurrency": bc.max_concurrency,
                             "errors": len(res.errors), "first_errors": res.errors[:5]}}
    return res.requests, None, meta
