"""The OpenAI response fields beyond plain text: ``n`` choices, logprobs, ``echo``, model cards.

`Choice` accumulates one output's deltas for a non-streamed answer; `merged_batches` interleaves
the delta batches of a request's ``n`` streams; the ``*_logprobs`` functions render the
detokenizer's ``[text, logprob, [[text, logprob], ...]]`` entries in each endpoint's shape;
`openapi_with_limits` makes the served schema show the configured ``server.max_n``.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

from twinserve.server.config import MAX_N_LIMIT
from twinserve.server.messages import TextDelta


def _num(x: float) -> float:
    """A JSON-safe log-probability (-inf, which a masked token has, is sent as -9999.0)."""
    return x if math.isfinite(x) else -9999.0


def _bytes(text: str) -> list[int]:
    return list(text.encode("utf-8", errors="replace"))


@dataclass(slots=True)
class Choice:
    """One output of a request, as it accumulates: text, token ids, logprob entries, finish."""

    index: int
    text: list[str] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    logprobs: list | None = None
    prompt_text: str | None = None
    prompt_logprobs: list | None = None
    finish_reason: str | None = None

    def add(self, d: TextDelta) -> None:
        self.text.append(d.text)
        self.ids.extend(d.token_ids)
        if d.logprobs is not None:
            self.logprobs = (self.logprobs or []) + d.logprobs
        if d.prompt_text is not None:
            self.prompt_text = d.prompt_text
            self.prompt_logprobs = d.prompt_logprobs
        if d.finished:
            self.finish_reason = d.finish_reason


def chat_logprobs(entries: list | None) -> dict[str, Any] | None:
    """``choices[].logprobs`` of a chat completion (or chunk)."""
    if entries is None:
        return None
    return {"content": [
        {"token": t, "logprob": _num(lp), "bytes": _bytes(t),
         "top_logprobs": [{"token": a, "logprob": _num(b), "bytes": _bytes(a)} for a, b in top]}
        for t, lp, top in entries], "refusal": None}


@dataclass(slots=True)
class CompletionLogprobs:
    """``choices[].logprobs`` of a text completion: tokens, their logprobs, the alternatives
    and each token's character offset in the choice's text (running across chunks)."""

    offset: int = 0

    def render(self, entries: list | None) -> dict[str, Any] | None:
        if entries is None:
            return None
        out: dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for e in entries:
            if e is None:  # the prompt's first token has no logprob
                out["tokens"].append("")
                out["token_logprobs"].append(None)
                out["top_logprobs"].append(None)
                out["text_offset"].append(self.offset)
                continue
            t, lp, top = e
            out["tokens"].append(t)
            out["token_logprobs"].append(_num(lp))
            out["top_logprobs"].append({a: _num(b) for a, b in top})
            out["text_offset"].append(self.offset)
            self.offset += len(t)
        return out


async def merged_batches(sources: list[AsyncIterator[list[TextDelta]]]
                         ) -> AsyncIterator[tuple[int, list[TextDelta]]]:
    """(choice index, batch) from every source as batches arrive, until all have ended; the
    first error raised by a source is raised here (the other sources are then closed)."""
    if len(sources) == 1:
        async for b in sources[0]:
            yield 0, b
        return
    pending: dict[asyncio.Task, int] = {asyncio.ensure_future(anext(s)): i for i, s in enumerate(sources)}
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for t in sorted(done, key=lambda t: pending[t]):
                i = pending.pop(t)
                try:
                    batch = t.result()
                except StopAsyncIteration:
                    continue
                yield i, batch
                pending[asyncio.ensure_future(anext(sources[i]))] = i
    finally:
        for t in pending:
            t.cancel()
        for t in pending:
            try:
                await t
            except (asyncio.CancelledError, StopAsyncIteration, Exception):
                pass


def usage_of(usages: list[dict[str, Any]]) -> dict[str, Any]:
    """One request's usage over its ``n`` outputs: the prompt once, every output's tokens."""
    first = usages[0]
    completion = sum(u["completion_tokens"] for u in usages)
    cached = max(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
    return {"prompt_tokens": first["prompt_tokens"], "completion_tokens": completion,
            "total_tokens": first["prompt_tokens"] + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def model_card(name: str, created: int, max_model_len: int) -> dict[str, Any]:
    """The served model as ``/v1/models`` lists it (no filesystem path)."""
    return {"id": name, "object": "model", "created": created, "owned_by": "twinserve",
            "max_model_len": max_model_len}


def openapi_with_limits(build: Callable[[], dict[str, Any]], max_n: Callable[[], int | None]
                        ) -> Callable[[], dict[str, Any]]:
    """An ``app.openapi`` that sets the ``n`` maximum of every request body that allows
    `MAX_N_LIMIT` to ``max_n()`` (the configured ``server.max_n``, once the server knows it)."""
    cache: dict[int | None, dict[str, Any]] = {}

    def openapi() -> dict[str, Any]:
        limit = max_n()
        if limit not in cache:
            schema = build()
            for comp in schema.get("components", {}).get("schemas", {}).values():
                n = comp.get("properties", {}).get("n")
                if n is not None and limit is not None and n.get("maximum") == MAX_N_LIMIT:
                    n["maximum"] = limit
            cache.clear()
            cache[limit] = schema
        return cache[limit]

    return openapi
