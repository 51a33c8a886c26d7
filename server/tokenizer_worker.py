"""Tokenizer worker: turns `TokenizeRequest`s into length-checked `GenerateRequest`s.

Contract: every ``TokenizeRequest`` produces exactly one of a ``GenerateRequest`` to the engine or
an ``ErrorReply`` (400) to the API server; ``AbortRequest``s are forwarded to the engine in the
order they arrived, behind the request they cancel. Checks done here: empty prompts, token ids
outside the model's vocabulary, chat-template failures, and the context length
(``prompt + max_tokens <= max_model_len``).
"""

from __future__ import annotations

from dataclasses import dataclass

from twinserve.server.ipc import pull_socket, push_socket, recv_all, send
from twinserve.server.messages import AbortRequest, ErrorReply, GenerateRequest, TokenizeRequest
from twinserve.server.proc import ChildContext
from twinserve.server.tokenization import TemplateError, TextTokenizer

PROMPT_TAIL = 8  # prompt ids the detokenizer keeps as left context


@dataclass(slots=True)
class TokenizerWorkerConfig:
    tokenizer_path: str
    max_model_len: int
    vocab_size: int


class RequestError(ValueError):
    """A request that must be answered with 400; ``param`` names the offending field."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


def prompt_ids(tok: TextTokenizer, msg: TokenizeRequest) -> list[int]:
    if msg.kind == "ids":
        return list(msg.token_ids or [])
    if msg.kind == "text":
        return tok.encode(msg.text or "")
    if msg.kind == "chat":
        try:
            text = tok.render_chat(msg.messages or [], bool(msg.detok.get("add_generation_prompt", True)))
        except (TemplateError, ValueError) as e:
            raise RequestError(str(e), msg.prompt_field) from e
        return tok.encode(text, add_special=False)
    raise RequestError(f"unknown request kind {msg.kind!r}")


def tokenize(tok: TextTokenizer, cfg: TokenizerWorkerConfig, msg: TokenizeRequest) -> GenerateRequest:
    """The checks of the module docstring; raises `RequestError`."""
    param = msg.prompt_field
    ids = prompt_ids(tok, msg)
    if not ids:
        raise RequestError("the prompt is empty (it has no tokens)", param)
    bad = [t for t in ids if not (0 <= t < cfg.vocab_size)]
    if bad:
        raise RequestError(f"token id {bad[0]} is outside the vocabulary [0, {cfg.vocab_size})", param)
    n, ctx = len(ids), cfg.max_model_len
    if n >= ctx:
        raise RequestError(
            f"This model's maximum context length is {ctx} tokens, but the prompt has {n} tokens "
            "(at least one token must be left for the output).", param, "context_length_exceeded")
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


def run(cfg: TokenizerWorkerConfig, ctx: ChildContext) -> None:
    """Child entry: load the tokenizer, bind the input socket, handshake, serve until SIGTERM."""
    tok = TextTokenizer(cfg.tokenizer_path)
    inbox = pull_socket(ctx.zmq_ctx, ctx.paths.tokenizer)
    to_engine = push_socket(ctx.zmq_ctx, ctx.paths.engine)
    to_api = push_socket(ctx.zmq_ctx, ctx.paths.api)
    try:
        ctx.announce({"vocab_size": tok.vocab_size, "chat_template": tok.chat_template is not None})
        while True:
            for msg in recv_all(inbox, 1000):
                if isinstance(msg, AbortRequest):
                    send(to_engine, msg)
                elif isinstance(msg, TokenizeRequest):
                    try:
                        send(to_engine, tokenize(tok, cfg, msg))
                    except RequestError as e:
                        send(to_api, ErrorReply(msg.rid, 400, str(e), param=e.param, code=e.code))
                    except Exception as e:  # a tokenizer failure must not strand the request
                        send(to_api, ErrorReply(msg.rid, 400, f"could not tokenize the request: {e}"))
    finally:
        for s in (inbox, to_engine, to_api):
            s.close(linger=0)
