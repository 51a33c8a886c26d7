"""The FastAPI app: OpenAI-compatible endpoints over the tokenizer/engine/detokenizer pipeline.

Contract of every generation endpoint: the body is validated (400 with an OpenAI error body on
any bad field), the request goes to the tokenizer, and the handler waits for the engine's
``Accepted`` or an ``ErrorReply`` (400 too long / bad ids, 429 queue full, 503 engine down or
stalled) before answering, so errors keep their HTTP status even for ``stream=true``. A client that
disconnects at any point aborts its request (the engine frees its pages). No handler can wait
forever: a dead worker fails every live request, and ``request_timeout_s`` bounds the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException

from twinserve.core.sampling import seed64
from twinserve.server.client_watch import ClientWatch
from twinserve.server.engine_client import EngineClient, RequestStream
from twinserve.server.errors import ERROR_RESPONSES, APIError, error_body
from twinserve.server.formats import ChatFormat, CompletionFormat, GenerateFormat
from twinserve.server.lean_routes import LeanRoute
from twinserve.server.messages import TokenizeRequest
from twinserve.server.metrics import ServerMetrics
from twinserve.server.openai_fields import Choice, merged_batches, model_card, openapi_with_limits, usage_of
from twinserve.server.protocol import (
    ChatCompletionRequest, CompletionRequest, GenerateRequestBody, SamplingFields,
)
from twinserve.server.sse import SSE_DONE, EventStream, sse_data
from twinserve.server.text_guard import check_text

CLIENT_GONE = 499  # nginx's "client closed request"; nobody reads it


@dataclass(slots=True)
class ModelInfo:
    name: str
    path: str
    max_model_len: int
    created: int


@dataclass(slots=True)
class AppState:
    """What the handlers use; built by the launcher inside the app's lifespan. With
    ``replicas > 1`` every usage carries ``replica``: the engine replica that accepted the
    request's first output."""

    client: EngineClient
    metrics: ServerMetrics
    model: ModelInfo
    pids: dict[str, int]
    ipc_dir: str
    max_n: int
    replicas: int = 1


def _usage(st: AppState, streams: list[RequestStream]) -> dict[str, Any]:
    u = usage_of([s.usage() for s in streams])
    if st.replicas > 1 and streams[0].replica is not None:
        u["replica"] = streams[0].replica
    return u


def _state(request: Request) -> AppState:
    return request.app.state.ts


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errs = exc.errors()
    if not errs:
        return "invalid request body", None
    e = errs[0]
    loc = [str(p) for p in e.get("loc", ()) if p != "body"]
    if e.get("type") == "json_invalid":
        return f"the body is not valid JSON: {e.get('msg')}", None
    if not loc:
        hint = " (send it with Content-Type: application/json)" if isinstance(e.get("input"), str) else ""
        return f"the body must be a JSON object{hint}", None
    param = loc[0]
    # a union field fails once per alternative; report them together under the field's name
    msgs = dict.fromkeys(str(x.get("msg")) for x in errs
                         if [str(p) for p in x.get("loc", ()) if p != "body"][:1] == [param])
    where = ".".join(p for p in loc if not p.startswith(("list[", "str", "constrained", "int", "function")))
    return f"{where or param}: {' or '.join(msgs)}", param


def _check_model(st: AppState, body: SamplingFields) -> None:
    check_text(body)  # first: later checks and error bodies quote the body's strings
    if body.model is not None and body.model not in (st.model.name, st.model.path):
        raise APIError(404, f"The model `{body.model}` does not exist; this server serves "
                       f"`{st.model.name}`.", param="model", code="model_not_found")


async def _admit(st: AppState, watch: ClientWatch, build: Callable[[int], TokenizeRequest]) -> RequestStream | None:
    """Submit and wait for Accepted; None if the client left meanwhile (request aborted)."""
    stream = await st.client.submit(build)
    try:
        gone, _ = await watch.run(st.client.next_event(stream))
    except BaseException:
        await st.client.abort(stream)
        raise
    if gone:
        await st.client.abort(stream)
        return None
    return stream


async def _events(st: AppState, streams: list[RequestStream], fmt: Any, include_usage: bool) -> AsyncIterator[bytes]:
    """The stream's SSE bytes: one event per delta (clients time tokens by events), one write per
    batch; the last batch carries the usage chunk and ``[DONE]`` in the same write."""
    for chunk in fmt.start(len(streams)):
        yield sse_data(chunk)
    left = len(streams)  # streams whose finishing delta is still to come
    try:
        async for i, batch in merged_batches([st.client.delta_batches(s) for s in streams]):
            data = b"".join(e for e in (fmt.event(d, i) for d in batch) if e is not None)
            left -= sum(1 for d in batch if d.finished)
            if left == 0:
                usage = sse_data(fmt.usage(_usage(st, streams))) if include_usage else b""
                yield data + usage + SSE_DONE
                return
            if data:
                yield data
    except APIError as e:
        yield sse_data(e.body) + SSE_DONE
        return
    if include_usage:  # not reached when every stream ended with its finishing delta
        yield sse_data(fmt.usage(_usage(st, streams)))
    yield SSE_DONE


async def _collect(st: AppState, streams: list[RequestStream]) -> list[Choice]:
    choices = [Choice(i) for i in range(len(streams))]
    async for i, batch in merged_batches([st.client.delta_batches(s) for s in streams]):
        for d in batch:
            choices[i].add(d)
    return choices


async def _abort_all(st: AppState, streams: list[RequestStream]) -> None:
    for s in streams:
        if not s.finished:
            await st.client.abort(s)


async def _respond(st: AppState, request: Request, body: SamplingFields, fmt: Any,
                   build: Callable[[int, int, int | None], TokenizeRequest]) -> Response:
    """Submit ``body.n`` requests (the first leads: the others start once it has a token, from
    the prefix cache) and answer with all of them. One `ClientWatch` serves the request's
    whole life; a streamed answer takes it over."""
    watch: ClientWatch | None = ClientWatch(request.receive)
    streams: list[RequestStream] = []
    try:
        try:
            first = await _admit(st, watch, lambda rid: build(rid, 0, None))
            if first is None:
                return Response(status_code=CLIENT_GONE)
            streams.append(first)
            for k in range(1, body.n):
                s = await _admit(st, watch, lambda rid, k=k: build(rid, k, first.rid))
                if s is None:
                    await _abort_all(st, streams)
                    return Response(status_code=CLIENT_GONE)
                streams.append(s)
        except BaseException:
            await _abort_all(st, streams)
            raise
        if body.stream:
            async def on_close() -> None:
                await _abort_all(st, streams)
            events = EventStream(_events(st, streams, fmt, body.include_usage), on_close, watch)
            watch = None  # the stream closes it
            return events
        try:
            gone, choices = await watch.run(_collect(st, streams))
        finally:
            await _abort_all(st, streams)
        if gone:
            return Response(status_code=CLIENT_GONE)
        return JSONResponse(fmt.full(choices, _usage(st, streams)))
    finally:
        if watch is not None:
            watch.close()


def _request(rid: int, body: SamplingFields, kind: str, field: str, k: int, after: int | None, *,
             text: str | None = None, messages: list[dict[str, Any]] | None = None,
             ids: list[int] | None = None, default_max: int | None, detok: dict[str, Any]) -> TokenizeRequest:
    """Output ``k`` of ``body``'s ``n`` (``after``: the first's rid; a seeded output's seed is
    moved by ``k``, as `engine.llm.sibling_params` does)."""
    params = body.sampling_params()
    if k and params.get("seed") is not None:
        params["seed"] = seed64(params["seed"] + k)
    return TokenizeRequest(rid, kind, text, messages, ids, params, body.max_tokens, default_max,
                           detok, time.time(), body.priority, body.user or "default", field,
                           leads=body.n > 1 and k == 0, after=after)


def _detok(body: SamplingFields, **kw: Any) -> dict[str, Any]:
    d = {"stop": body.stop_strings(), "stop_token_ids": body.stop_token_ids or [], "detokenize": True,
         **kw}
    if body.min_tokens:
        d["min_tokens"] = body.min_tokens
    return d


async def completions(body: CompletionRequest, request: Request) -> Response:
    st = _state(request)
    body.check_supported(st.max_n)
    _check_model(st, body)
    prompt = body.single_prompt()
    detok = _detok(body, echo=True) if body.echo else _detok(body)
    if isinstance(prompt, str):
        def build(rid: int, k: int, after: int | None) -> TokenizeRequest:
            return _request(rid, body, "text", "prompt", k, after, text=prompt, default_max=16, detok=detok)
    else:
        def build(rid: int, k: int, after: int | None) -> TokenizeRequest:
            return _request(rid, body, "ids", "prompt", k, after, ids=list(prompt), default_max=16,
                            detok=detok)
    fmt = CompletionFormat(f"cmpl-{uuid.uuid4().hex}", st.model.name, echo=body.echo)
    return await _respond(st, request, body, fmt, build)


async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    st = _state(request)
    body.check_supported(st.max_n)
    _check_model(st, body)
    messages = [m.as_template_input() for m in body.messages]
    detok = _detok(body, add_generation_prompt=body.add_generation_prompt)

    def build(rid: int, k: int, after: int | None) -> TokenizeRequest:
        return _request(rid, body, "chat", "messages", k, after, messages=messages, default_max=None,
                        detok=detok)
    fmt = ChatFormat(f"chatcmpl-{uuid.uuid4().hex}", st.model.name)
    return await _respond(st, request, body, fmt, build)


async def generate(body: GenerateRequestBody, request: Request) -> Response:
    st = _state(request)
    body.check_supported(st.max_n)
    _check_model(st, body)
    if body.stop is not None:
        raise APIError(400, "/generate takes stop_token_ids, not stop strings", param="stop")
    detok = {"stop": [], "detokenize": False}

    def build(rid: int, k: int, after: int | None) -> TokenizeRequest:
        return _request(rid, body, "ids", "input_ids", k, after, ids=list(body.input_ids), default_max=16,
                        detok=detok)
    return await _respond(st, request, body, GenerateFormat(f"gen-{uuid.uuid4().hex}", st.model.name), build)


GENERATION_ROUTES: dict[str, LeanRoute] = {
    "/v1/completions": LeanRoute(CompletionRequest, completions),
    "/v1/chat/completions": LeanRoute(ChatCompletionRequest, chat_completions),
    "/generate": LeanRoute(GenerateRequestBody, generate),
}


def _register_routes(app: FastAPI) -> None:
    # the generation routes' FastAPI entries give the schema and every error answer;
    # `HttpFront` serves the requests that validate (`GENERATION_ROUTES`: the same handlers)
    app.post("/v1/completions", responses=ERROR_RESPONSES)(completions)
    app.post("/v1/chat/completions", responses=ERROR_RESPONSES)(chat_completions)
    app.post("/generate", responses=ERROR_RESPONSES)(generate)

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        m = _state(request).model
        return {"object": "list", "data": [model_card(m.name, m.created, m.max_model_len)]}

    @app.get("/v1/models/{model_id:path}", responses={404: ERROR_RESPONSES[404]})
    async def model(model_id: str, request: Request) -> dict[str, Any]:
        m = _state(request).model
        if model_id != m.name:
            raise APIError(404, f"The model `{model_id}` does not exist; this server serves `{m.name}`.",
                           param="model", code="model_not_found")
        return model_card(m.name, m.created, m.max_model_len)

    @app.get("/health", responses={503: ERROR_RESPONSES[503]})
    async def health(request: Request) -> Response:
        client = _state(request).client
        down = client.unavailable
        if down is not None:
            return JSONResponse(error_body(503, down), status_code=503)
        if client.replicas_down:
            return JSONResponse({"status": "degraded", "replicas_down": sorted(client.replicas_down)})
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        return Response(_state(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)


def _register_errors(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        msg, param = _validation_message(exc)
        return JSONResponse(error_body(400, msg, param=param), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(error_body(exc.status_code, str(exc.detail)), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> JSONResponse:
        # the details go to the server's log, not to the client
        return JSONResponse(error_body(500, "internal server error"), status_code=500)


def build_app(make_state: Callable[[], contextlib.AbstractAsyncContextManager[AppState]]) -> FastAPI:
    """The app; ``make_state()`` is entered in its lifespan (sockets, reader and monitor tasks)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with make_state() as st:
            app.state.ts = st
            yield

    app = FastAPI(title="twinserve", version="0.1.0", lifespan=lifespan,
                  description="OpenAI-compatible serving over the twinserve engine")
    _register_routes(app)
    _register_errors(app)
    app.openapi = openapi_with_limits(app.openapi, lambda: getattr(getattr(app.state, "ts", None), "max_n", None))
    return app


async def cancel_tasks(*tasks: asyncio.Task) -> None:
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t
