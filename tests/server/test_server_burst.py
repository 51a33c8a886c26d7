"""The lean path of a burst of requests: batched IPC messages, `HttpFront`'s lean routes, the SSE stream's
writes, and a burst through the shared server."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator

import pytest
import zmq
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel, ConfigDict
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from twinserve.core.workload import RequestSpec, Workload
from twinserve.server.api_server import _events
from twinserve.server.bench_client import BenchConfig, bench_workload
from twinserve.server.engine_client import RequestStream
from twinserve.server.formats import CompletionFormat
from twinserve.server.ipc import recv_all, send
from twinserve.server.http_front import HttpFront
from twinserve.server.lean_routes import LeanRoute
from twinserve.server.messages import TextDelta, TokenizeRequest, decode
from twinserve.server.outbox import Outbox
from twinserve.server.sse import SSE_DONE, EventStream


@pytest.fixture
def pair():
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind("inproc://burst")
    push = ctx.socket(zmq.PUSH)
    push.connect("inproc://burst")
    yield push, pull
    push.close(linger=0)
    pull.close(linger=0)
    ctx.term()


def _req(rid: int) -> TokenizeRequest:
    return TokenizeRequest(rid, "ids", None, None, list(range(rid % 7 + 1)), {"temperature": 0.0}, 4, 16,
                           {"stop": []}, float(rid))


def test_an_outbox_sends_many_messages_as_one_and_recv_all_returns_each_in_order(pair) -> None:
    push, pull = pair
    box = Outbox(push)
    sent = [_req(rid) for rid in range(1, 301)]
    for m in sent:
        send(box, m)
    assert pull.poll(0) == 0  # nothing leaves before the flush
    assert box.flush() == 300 and box.flush() == 0
    frames = pull.recv_multipart()
    assert len(frames) == 300 and [decode(f) for f in frames] == sent  # one message, 300 frames
    for m in sent[:5]:
        send(box, m)
    box.flush()
    send(push, sent[5])  # a plain message behind the batched one
    assert recv_all(pull, 1000) == sent[:6]


def test_an_outbox_of_one_message_sends_a_plain_message(pair) -> None:
    push, pull = pair
    box = Outbox(push)
    send(box, _req(1))
    box.flush()
    assert pull.recv_multipart() and not pull.getsockopt(zmq.RCVMORE)


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    x: int


def _lean_app() -> HttpFront:
    async def lean(body: _Body, request: Request) -> Response:
        return JSONResponse({"x": body.x, "by": "lean"})

    app = FastAPI()

    @app.post("/x")
    async def fastapi_route(body: _Body) -> dict[str, Any]:
        return {"x": body.x, "by": "fastapi"}

    return HttpFront(app, {"/x": LeanRoute(_Body, lean)}, 1 << 20)


def test_lean_routes_serve_valid_bodies_and_hand_the_rest_to_the_app_with_the_body() -> None:
    c = TestClient(_lean_app())
    assert c.post("/x", json={"x": 3}).json() == {"x": 3, "by": "lean"}
    assert c.post("/x", content=b'{"x": 4}', headers={"content-type": "application/vnd+json"}).json() == {
        "x": 4, "by": "lean"}
    # not JSON by its content type, not valid: the FastAPI route answers, having read the same body
    r = c.post("/x", content=b'{"x": 5}', headers={"content-type": "text/plain"})
    assert r.status_code == 422
    r = c.post("/x", json={"x": "5"})
    assert r.status_code == 422 and r.json()["detail"][0]["input"] == "5"
    r = c.post("/x", content=b'{"x": ', headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "json_invalid"
    assert c.get("/x").status_code == 405  # another method: the app's own answer


class _Client:
    """The `EngineClient` side `_events` reads: each stream's deltas in the batches given."""

    def __init__(self, batches: dict[int, list[list[TextDelta]]]) -> None:
        self.batches = batches

    async def delta_batches(self, st: RequestStream) -> AsyncIterator[list[TextDelta]]:
        for b in self.batches[st.rid]:
            await asyncio.sleep(0)
            yield b


class _State:
    def __init__(self, client: _Client) -> None:
        self.client = client
        self.replicas = 1


def _delta(rid: int, text: str, last: bool = False) -> TextDelta:
    return TextDelta(rid, text, [1], last, "length" if last else None, 5, 0)


def _sse(data: bytes) -> list[bytes]:
    return [e for e in data.split(b"\n\n") if e]


@pytest.mark.parametrize("include_usage", [True, False])
def test_the_last_write_carries_the_final_deltas_usage_and_done(include_usage: bool) -> None:
    batches = {1: [[_delta(1, "a")], [_delta(1, "b"), _delta(1, "c")], [_delta(1, "d", last=True)]],
               2: [[_delta(2, "x"), _delta(2, "y", last=True)]]}
    streams = [RequestStream(1, 0.0, prompt_tokens=5, completion_tokens=4),
               RequestStream(2, 0.0, prompt_tokens=5, completion_tokens=2)]
    fmt = CompletionFormat("cmpl-1", "m")

    async def collect() -> list[bytes]:
        return [w async for w in _events(_State(_Client(batches)), streams, fmt, include_usage)]

    writes = asyncio.run(collect())
    assert all(not w.endswith(SSE_DONE) for w in writes[:-1]) and writes[-1].endswith(SSE_DONE)
    events = [json.loads(e[len(b"data: "):]) for e in _sse(b"".join(writes))[:-1]]
    usage = [e for e in events if e.get("usage")]
    tokens = [e for e in events if e.get("choices")]
    # one event per delta, and every stream's text in order
    assert len(tokens) == 6
    for i, text in ((0, "abcd"), (1, "xy")):
        assert "".join(e["choices"][0]["text"] for e in tokens if e["choices"][0]["index"] == i) == text
    assert len(usage) == int(include_usage)
    if include_usage:
        assert usage[0]["usage"]["completion_tokens"] == 6 and b'"usage"' in writes[-1]
    assert b'"finish_reason":"length"' in writes[-1]  # the final delta shares the last write


def _asgi_call(stream: EventStream, disconnect_after: float | None) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if disconnect_after is None:
            await asyncio.sleep(3600)
        await asyncio.sleep(disconnect_after or 0)
        return {"type": "http.disconnect"}

    async def send_(msg: dict[str, Any]) -> None:
        sent.append(msg)

    asyncio.run(asyncio.wait_for(stream({"type": "http", "method": "POST"}, receive, send_), 10))
    return sent


def test_an_event_stream_ends_its_body_with_the_done_write_and_closes_once() -> None:
    closed: list[int] = []

    async def events() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        yield b"data: 2\n\n" + SSE_DONE

    async def on_close() -> None:
        closed.append(1)

    sent = _asgi_call(EventStream(events(), on_close), None)
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    assert [m["more_body"] for m in bodies] == [True, False] and bodies[-1]["body"].endswith(SSE_DONE)
    assert closed == [1]


def test_an_event_stream_ends_quietly_when_the_client_leaves() -> None:
    closed: list[int] = []
    finalized: list[int] = []

    async def events() -> AsyncIterator[bytes]:
        try:
            yield b"data: 1\n\n"
            await asyncio.sleep(3600)  # a request that waits in the queue
            yield b"never"
        finally:
            finalized.append(1)

    async def on_close() -> None:
        closed.append(1)

    sent = _asgi_call(EventStream(events(), on_close), 0.05)
    assert [m.get("body") for m in sent if m["type"] == "http.response.body"] == [b"data: 1\n\n"]
    assert closed == [1] and finalized == [1]


def test_a_burst_through_the_server_completes_every_request(server) -> None:
    n = 48
    specs = [RequestSpec(rid=i, arrival=0.0, prompt_len=8 + i % 5, output_len=3 + i % 4) for i in range(n)]
    res = bench_workload(BenchConfig(base_url=server.url, warm_connections=n), Workload(specs, vocab_size=1024))
    assert not res.errors
    df = res.requests.set_index("rid")
    for s in specs:
        assert df.loc[s.rid].output_tokens == s.output_len and df.loc[s.rid].prompt_tokens == s.prompt_len
        assert len(df.loc[s.rid].token_times) == s.output_len  # one SSE event per token
