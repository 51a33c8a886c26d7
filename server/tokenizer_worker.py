"""Tokenizer worker: turns `TokenizeRequest`s into length-checked `GenerateRequest`s.

Contract: every ``TokenizeRequest`` produces exactly one of a ``GenerateRequest`` to the engine or
an ``ErrorReply`` (400) to the API server; ``AbortRequest``s are forwarded to the engine in the
order they arrived, behind the request they cancel (an abort for a request still being
tokenized drops it). Checks done here: empty prompts, token ids outside the model's vocabulary,
chat-template failures, and the context length (``prompt + max_tokens <= max_model_len``),
checked on the characters before tokenizing and chunk by chunk while counting a long text
(`prompt_limit`).

No request blocks the others: a long text is a job that advances one chunk at a time, and
between two chunks the worker reads and serves whatever else has arrived (`TokenizerLoop`).
"""

from __future__ import annotations

from collections import OrderedDict
import time
from dataclasses import dataclass, field
from typing import Any, Generator

from twinserve.core.config import scheduler_default
from twinserve.server.ipc import pull_socket, push_socket, recv_all, send
from twinserve.server.outbox import Outbox
from twinserve.server.messages import (AbortRequest, EngineStats, ErrorReply, GenerateRequest, ReplicaDown,
                                       TokenizeRequest)
from twinserve.server.prompt_limit import CHUNK_CHARS, PromptLimit
from twinserve.server.proc import ChildContext
from twinserve.server.tokenization import TemplateError, TextTokenizer

PROMPT_TAIL = 8  # prompt ids the detokenizer keeps as left context


@dataclass(slots=True)
class TokenizerWorkerConfig:
    """The tokenizer and context facts, and with ``replicas > 1`` how to route over the engine
    replicas (`ReplicaRouter`: ``router`` with ``router_kwargs``, a prefix index of
    ``page_size``-token pages)."""

    tokenizer_path: str
    max_model_len: int
    vocab_size: int
    replicas: int = 1
    router: str = "round_robin"
    router_kwargs: dict[str, Any] = field(default_factory=dict)
    page_size: int = scheduler_default("page_size")


class RequestError(ValueError):
    """A request that must be answered with 400; ``param`` names the offending field."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


Steps = Generator[None, None, Any]  # yields between chunks, returns its result


def _encode_bounded(tok: TextTokenizer, limit: PromptLimit, text: str, add_special: bool,
                    param: str) -> Generator[None, None, list[int]]:
    why = limit.chars_problem(len(text))
    if why is not None:
        raise RequestError(why, param, "context_length_exceeded")
    if len(text) > CHUNK_CHARS:
        special = tok.num_special() if add_special else 0
        for step in limit.count_chunks(text, tok.count, special):
            if isinstance(step, str):
                raise RequestError(step, param, "context_length_exceeded")
            yield
    return tok.encode(text, add_special=add_special)


def prompt_ids(tok: TextTokenizer, limit: PromptLimit, msg: TokenizeRequest) -> Generator[None, None, list[int]]:
    if msg.kind == "ids":
        return list(msg.token_ids or [])
    if msg.kind == "text":
        return (yield from _encode_bounded(tok, limit, msg.text or "", True, msg.prompt_field))
    if msg.kind == "chat":
        try:
            text = tok.render_chat(msg.messages or [], bool(msg.detok.get("add_generation_prompt", True)))
        except (TemplateError, ValueError) as e:
            raise RequestError(str(e), msg.prompt_field) from e
        return (yield from _encode_bounded(tok, limit, text, False, msg.prompt_field))
    raise RequestError(f"unknown request kind {msg.kind!r}")


def tokenize(tok: TextTokenizer, cfg: TokenizerWorkerConfig, msg: TokenizeRequest,
             limit: PromptLimit | None = None) -> GenerateRequest:
    """The checks of the module docstring, all at once; raises `RequestError`."""
    steps = tokenize_steps(tok, cfg, msg, limit)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def tokenize_steps(tok: TextTokenizer, cfg: TokenizerWorkerConfig, msg: TokenizeRequest,
                   limit: PromptLimit | None = None) -> Generator[None, None, GenerateRequest]:
    """`tokenize` as steps: yields between chunks of a long text, returns the request."""
    param = msg.prompt_field
    limit = limit or PromptLimit(cfg.max_model_len, tok.longest_token_chars())
    ids = yield from prompt_ids(tok, limit, msg)
    if not ids:
        raise RequestError("the prompt is empty (it has no tokens)", param)
    n, ctx = len(ids), cfg.max_model_len
    if n >= ctx:  # before the vocabulary scan, whose cost grows with the prompt
        raise RequestError(
            f"This model's maximum context length is {ctx} tokens, but the prompt has {n} tokens "
            "(at least one token must be left for the output).", param, "context_length_exceeded")
    bad = [t for t in ids if not (0 <= t < cfg.vocab_size)]
    if bad:
        raise RequestError(f"token id {bad[0]} is outside the vocabulary [0, {cfg.vocab_size})", param)
    room = ctx - n
    if msg.max_tokens is None:
        max_tokens = room if msg.default_max_tokens is None else min(msg.default_max_tokens, room)
    else:
        max_tokens = msg.max_tokens
        if n + max_tokens > ctx:
            raise RequestError(
                f"This model's maximum context length is {ctx} tokens. However, you requested "
                f"{n + max_tokens} tokens ({n} in the prompt, {max_tokens} for the completion). "
                "Please reduce the prompt or max_tokens.", "max_tokens", "context_length_exceeded")
    params = dict(msg.params)
    params["max_tokens"] = int(max_tokens)
    detok = dict(msg.detok)
    detok["prompt_tail"] = ids[-PROMPT_TAIL:]
    if detok.get("echo"):
        detok["echo_ids"] = ids
    return GenerateRequest(msg.rid, ids, params, detok, msg.arrival, msg.priority, msg.tenant,
                           msg.leads, msg.after)


class TokenizerLoop:
    """The worker's scheduling, apart from its sockets (tests drive it with lists).

    Invariant: every request in ``jobs`` has been partly tokenized and will get exactly one
    reply; each `advance` runs one job one chunk further, oldest first, so a short request that
    arrives behind a long one waits for at most one chunk of it.

    ``to_engine`` is one engine's socket, or a list of the replicas' sockets: then each
    tokenized request goes to the replica `ReplicaRouter` picks (503 once none is alive), the
    replicas' ``EngineStats`` feed its views, a ``ReplicaDown`` takes a replica out of rotation,
    and an abort goes to every live replica (one that does not hold the request ignores it)."""

    def __init__(self, tok: TextTokenizer, cfg: TokenizerWorkerConfig, to_engine: Any, to_api: Any) -> None:
        self.tok = tok
        self.cfg = cfg
        self.limit = PromptLimit(cfg.max_model_len, tok.longest_token_chars())
        self.to_engines = list(to_engine) if isinstance(to_engine, (list, tuple)) else [to_engine]
        self.to_api = to_api
        self.jobs: OrderedDict[int, Steps] = OrderedDict()
        self.routing = None
        if len(self.to_engines) > 1:
            from twinserve.server.replica_router import ReplicaRouter

            self.routing = ReplicaRouter(len(self.to_engines), cfg.router, cfg.router_kwargs, cfg.page_size)

    def _live_engines(self) -> list[Any]:
        if self.routing is None:
            return self.to_engines
        return [s for s, a in zip(self.to_engines, self.routing.alive) if a]

    def handle(self, msg: object) -> None:
        if isinstance(msg, AbortRequest):
            job = self.jobs.pop(msg.rid, None)
            if job is not None:
                job.close()
            for sock in self._live_engines():
                send(sock, msg)
        elif isinstance(msg, TokenizeRequest):
            self._step(msg.rid, tokenize_steps(self.tok, self.cfg, msg, self.limit))
        elif isinstance(msg, EngineStats) and self.routing is not None:
            self.routing.on_stats(msg.replica, msg.stats)
        elif isinstance(msg, ReplicaDown) and self.routing is not None:
            self.routing.down(msg.replica)

    def _dispatch(self, req: GenerateRequest) -> None:
        if self.routing is None:
            send(self.to_engines[0], req)
            return
        k = self.routing.choose(req.rid, req.prompt_ids, int(req.params["max_tokens"]), time.monotonic())
        if k is None:
            send(self.to_api, ErrorReply(req.rid, 503, "every engine replica has died; the server must be "
                                                       "restarted", type="service_unavailable"))
            return
        send(self.to_engines[k], req)

    def advance(self) -> None:
        if self.jobs:
            rid, job = self.jobs.popitem(last=False)
            self._step(rid, job)

    def _step(self, rid: int, job: Steps) -> None:
        try:
            next(job)
        except StopIteration as done:
            self._dispatch(done.value)
        except RequestError as e:
            send(self.to_api, ErrorReply(rid, 400, str(e), param=e.param, code=e.code))
        except Exception as e:  # a tokenizer failure must not strand the request
            send(self.to_api, ErrorReply(rid, 400, f"could not tokenize the request: {e}"))
        else:
            self.jobs[rid] = job

    def run(self, inbox: Any) -> None:
        """Serve ``inbox`` forever; what one round sends to each process leaves as one message
        (`Outbox`), flushed before the next wait."""
        boxes = [Outbox(s) for s in self.to_engines]
        self.to_engines = list(boxes)
        self.to_api = api = Outbox(self.to_api)
        boxes.append(api)
        while True:
            for msg in recv_all(inbox, 0 if self.jobs else 1000):
                self.handle(msg)
            self.advance()
            for box in boxes:
                box.flush()


def run(cfg: TokenizerWorkerConfig, ctx: ChildContext) -> None:
    """Child entry: load the tokenizer, bind the input socket, handshake, serve until SIGTERM."""
    tok = TextTokenizer(cfg.tokenizer_path)
    inbox = pull_socket(ctx.zmq_ctx, ctx.paths.tokenizer)
    to_engines = [push_socket(ctx.zmq_ctx, ctx.paths.engine_of(r)) for r in range(max(1, cfg.replicas))]
    to_api = push_socket(ctx.zmq_ctx, ctx.paths.api)
    try:
        loop = TokenizerLoop(tok, cfg, to_engines if len(to_engines) > 1 else to_engines[0], to_api)
        ctx.announce({"vocab_size": tok.vocab_size, "chat_template": tok.chat_template is not None,
                      "longest_token_chars": loop.limit.token_chars})
        loop.run(inbox)
    finally:
        for s in (inbox, *to_engines, to_api):
            s.close(linger=0)
