"""Every message the server's processes exchange, and its msgpack wire format.

Process graph (all sockets are ZMQ PUSH -> PULL over IPC files in one temp dir)::

    API server --TokenizeRequest/AbortRequest/ReplicaDown--> tokenizer
    tokenizer --GenerateRequest/AbortRequest--> engine rank 0 (of the replica the router picks)
    engine rank 0 --Accepted/ErrorReply/StepOutputs/EngineStats/RequestTimes--> detokenizer
    engine rank 0 --EngineStats--> tokenizer (only with several replicas: the router's view)
    detokenizer --AbortRequest (stop string hit)--> engine rank 0 (of every replica)
    detokenizer --Accepted/ErrorReply/DetokOutputs/EngineStats/RequestTimes--> API server
    tokenizer --ErrorReply--> API server
    every child --Ready--> launcher (the readiness handshake)

Aborts from the API server travel through the tokenizer, on the same ordered socket as the
request they cancel, so an abort can never overtake its request. ``Accepted`` is sent by the
engine on the same socket as the request's tokens, so it always arrives first.

Wire format: a message is a msgpack ``ExtType(MSG_EXT, [tag, field1, field2, ...])``; nested
messages (``StepInputs.adds``) are encoded the same way, so ``decode(encode(m)) == m`` for
every message type below. Per-step messages (`StepOutputs`, `DetokOutputs`) are columns of
plain values, never lists of nested messages, so one step costs one msgpack call each way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import msgpack
import numpy as np

MSG_EXT = 7  # msgpack ext type code of a message

M = TypeVar("M")


class _Codec:
    """Tag <-> dataclass table. Filled once at import time by ``@message``; read-only after."""

    def __init__(self) -> None:
        self.by_tag: dict[int, type] = {}
        self.by_type: dict[type, int] = {}
        self.names: dict[type, tuple[str, ...]] = {}

    def register(self, tag: int) -> Callable[[type[M]], type[M]]:
        def deco(cls: type[M]) -> type[M]:
            if tag in self.by_tag:
                raise KeyError(f"message tag {tag} used twice")
            self.by_tag[tag] = cls
            self.by_type[cls] = tag
            self.names[cls] = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
            return cls

        return deco


_CODEC = _Codec()
message = _CODEC.register


# ---- handshake and control ---------------------------------------------------------------------
@message(1)
@dataclass(slots=True)
class Ready:
    """A child finished starting. ``info`` carries what the launcher needs (engine: max_model_len,
    eos_token_ids, vocab_size, tokenizer_path, num_pages, page_size)."""

    role: str
    rank: int
    pid: int
    info: dict[str, Any] = field(default_factory=dict)


@message(2)
@dataclass(slots=True)
class StartFailed:
    """A child could not start (bad model path, out of memory, ...); the launcher reports it.
    ``user_error`` is the message of a `UserError` (a config the user can fix), else ''."""

    role: str
    rank: int
    pid: int
    error: str
    user_error: str = ""


# ---- requests going in -------------------------------------------------------------------------
@message(10)
@dataclass(slots=True)
class TokenizeRequest:
    """API server -> tokenizer: one generation request before tokenization.

    ``kind`` is "text" (``text``), "chat" (``messages``, rendered with the model's chat template)
    or "ids" (``token_ids`` as given). ``params`` holds `SamplingParams` fields except
    ``max_tokens``: ``max_tokens`` is the client's value or None, in which case the tokenizer uses
    ``default_max_tokens`` (None: the rest of the context). ``detok`` is passed through to the
    detokenizer untouched (stop strings, whether to decode text at all). ``prompt_field`` is the
    body field that held the prompt ("prompt", "messages", "input_ids"), for error messages.
    ``leads`` / ``after``: the first of a request's ``n`` outputs, and the others (``after`` =
    the first's rid), which the engine worker admits once the first has output (`GenerateRequest`).
    """

    rid: int
    kind: str
    text: str | None
    messages: list[dict[str, Any]] | None
    token_ids: list[int] | None
    params: dict[str, Any]
    max_tokens: int | None
    default_max_tokens: int | None
    detok: dict[str, Any]
    arrival: float
    priority: int = 0
    tenant: str = "default"
    prompt_field: str = "prompt"  # the request field errors about the prompt name
    leads: bool = False
    after: int | None = None


@message(11)
@dataclass(slots=True)
class GenerateRequest:
    """Tokenizer -> engine rank 0: a tokenized, length-checked request ready for the scheduler.

    ``after``: the rid of the first of the same prompt's ``n`` outputs (sent with ``leads``); the
    engine worker holds this request until that one has its first token, so that it finds the
    prompt's KV in the prefix cache."""

    rid: int
    prompt_ids: list[int]
    params: dict[str, Any]
    detok: dict[str, Any]
    arrival: float
    priority: int = 0
    tenant: str = "default"
    leads: bool = False
    after: int | None = None


@message(12)
@dataclass(slots=True)
class AbortRequest:
    """Cancel ``rid`` (client went away, or the detokenizer saw a stop string). Unknown ids are
    ignored."""

    rid: int
    reason: str = "abort"


@message(14)
@dataclass(slots=True)
class ReplicaDown:
    """API server -> tokenizer: engine replica ``replica`` died; route no request to it again."""

    replica: int
    reason: str = ""


@message(13)
@dataclass(slots=True)
class StepInputs:
    """The adds and aborts the engine worker applies, in order, before one engine step (inside
    the worker; tensor-parallel ranks get their step inputs from the engine, see engine/tp/)."""

    adds: list[GenerateRequest]
    aborts: list[int]
    stop: bool = False


# ---- results going out -------------------------------------------------------------------------
@message(20)
@dataclass(slots=True)
class Accepted:
    """The engine queued ``rid``; sent before any of its tokens, on the same socket.
    ``replica``: which engine replica holds it."""

    rid: int
    prompt_tokens: int
    detok: dict[str, Any]
    replica: int = 0


@message(21)
@dataclass(slots=True)
class ErrorReply:
    """``rid`` failed; the API server answers with ``status`` and an OpenAI-style error body."""

    rid: int
    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None


@message(22)
@dataclass(slots=True)
class TokenOutput:
    """New tokens of one request from one engine step. ``logprobs`` (requests that asked):
    per new token ``[logprob, [[id, logprob], ...]]``; ``prompt_logprobs`` (once, with the
    request's first output): the same for prompt tokens 1 .. P-1."""

    rid: int
    token_ids: list[int]
    finished: bool
    finish_reason: str | None
    prompt_tokens: int
    cached_tokens: int
    logprobs: list | None = None
    prompt_logprobs: list | None = None


@message(23)
@dataclass(slots=True)
class StepOutputs:
    """Engine -> detokenizer: every request's output of one step, column by column (one msgpack
    array per field: encoding stays cheap inside the engine's loop at large batch sizes).
    ``t`` is the engine's wall clock. ``logprobs`` / ``prompt_logprobs`` are None when no
    output of the step carries them, else one entry per output. Use `StepOutputs.of` / `items`
    to go from/to `TokenOutput`."""

    rids: list[int]
    token_ids: list[list[int]]
    finished: list[bool]
    finish_reasons: list[str | None]
    prompt_tokens: list[int]
    cached_tokens: list[int]
    t: float
    logprobs: list | None = None
    prompt_logprobs: list | None = None

    @classmethod
    def of(cls, outs: list[TokenOutput], t: float) -> "StepOutputs":
        lp = [o.logprobs for o in outs]
        plp = [o.prompt_logprobs for o in outs]
        return cls([o.rid for o in outs], [o.token_ids for o in outs], [o.finished for o in outs],
                   [o.finish_reason for o in outs], [o.prompt_tokens for o in outs],
                   [o.cached_tokens for o in outs], t,
                   lp if any(x is not None for x in lp) else None,
                   plp if any(x is not None for x in plp) else None)

    def items(self) -> list[TokenOutput]:
        n = len(self.rids)
        lp = self.logprobs or [None] * n
        plp = self.prompt_logprobs or [None] * n
        return [TokenOutput(*row) for row in zip(self.rids, self.token_ids, self.finished,
                                                  self.finish_reasons, self.prompt_tokens,
                                                  self.cached_tokens, lp, plp)]


@message(24)
@dataclass(slots=True)
class EngineStats:
    """Engine gauges of replica ``replica``, published periodically and whenever it goes idle."""

    stats: dict[str, Any]
    t: float
    replica: int = 0


@message(25)
@dataclass(slots=True)
class TextDelta:
    """The new text (stop strings removed) and token ids of one request from one step: a row of
    `DetokOutputs` (detokenizer -> API server), the unit the API server's streams consume. ``logprobs``: per token id ``[text, logprob, [[text, logprob], ...]]`` (requests
    that asked); ``prompt_text`` / ``prompt_logprobs`` (``echo``, on the first delta only): the
    prompt and, when asked, the same entries for its tokens (None for the first)."""

    rid: int
    text: str
    token_ids: list[int]
    finished: bool
    finish_reason: str | None
    prompt_tokens: int
    cached_tokens: int
    logprobs: list | None = None
    prompt_text: str | None = None
    prompt_logprobs: list | None = None


@message(26)
@dataclass(slots=True)
class DetokOutputs:
    """Detokenizer -> API server: all deltas produced from one `StepOutputs`, column by column
    (one msgpack array per field, like `StepOutputs`: one message per engine step stays cheap to
    encode and decode at large batch sizes). ``logprobs`` / ``prompt_texts`` /
    ``prompt_logprobs`` are None when no delta of the step carries them, else one entry per
    delta. Use `DetokOutputs.of` / `items` to go from/to `TextDelta`."""

    rids: list[int]
    texts: list[str]
    token_ids: list[list[int]]
    finished: list[bool]
    finish_reasons: list[str | None]
    prompt_tokens: list[int]
    cached_tokens: list[int]
    t: float
    logprobs: list | None = None
    prompt_texts: list | None = None
    prompt_logprobs: list | None = None

    @classmethod
    def of(cls, deltas: list[TextDelta], t: float) -> "DetokOutputs":
        def optional(col: list) -> list | None:
            return col if any(x is not None for x in col) else None

        return cls([d.rid for d in deltas], [d.text for d in deltas], [d.token_ids for d in deltas],
                   [d.finished for d in deltas], [d.finish_reason for d in deltas],
                   [d.prompt_tokens for d in deltas], [d.cached_tokens for d in deltas], t,
                   optional([d.logprobs for d in deltas]), optional([d.prompt_text for d in deltas]),
                   optional([d.prompt_logprobs for d in deltas]))

    def items(self) -> list[TextDelta]:
        n = len(self.rids)
        lp = self.logprobs or [None] * n
        pt = self.prompt_texts or [None] * n
        plp = self.prompt_logprobs or [None] * n
        return [TextDelta(*row) for row in zip(self.rids, self.texts, self.token_ids, self.finished,
                                                self.finish_reasons, self.prompt_tokens,
                                                self.cached_tokens, lp, pt, plp)]


@message(27)
@dataclass(slots=True)
class RequestTimes:
    """Engine -> detokenizer -> API server: where finished requests spent their time, in seconds
    of the engine's clock, one column per phase: waiting before first scheduled (``queue_s``),
    first scheduled to first token (``prefill_s``), first token to finish (``decode_s``)."""

    queue_s: list[float]
    prefill_s: list[float]
    decode_s: list[float]


# ---- codec ---------------------------------------------------------------------------------------
def _default(obj: Any) -> Any:
    cls = type(obj)
    tag = _CODEC.by_type.get(cls)
    if tag is not None:
        values = [tag]
        values.extend(getattr(obj, n) for n in _CODEC.names[cls])
        return msgpack.ExtType(MSG_EXT, msgpack.packb(values, default=_default))
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, (tuple, set, frozenset)):
        return list(obj)
    raise TypeError(f"cannot encode {type(obj).__name__}")


def _ext_hook(code: int, data: bytes) -> Any:
    if code != MSG_EXT:
        return msgpack.ExtType(code, data)
    tag, *values = msgpack.unpackb(data, ext_hook=_ext_hook, strict_map_key=False)
    cls = _CODEC.by_tag.get(tag)
    if cls is None:
        raise ValueError(f"unknown message tag {tag}")
    return cls(*values)


def encode(msg: Any) -> bytes:
    """Serialize one message (a registered dataclass) to bytes."""
    if type(msg) not in _CODEC.by_type:
        raise TypeError(f"{type(msg).__name__} is not a registered message")
    return msgpack.packb(msg, default=_default)


def decode(data: bytes) -> Any:
    """Inverse of `encode`; raises ``ValueError`` on bytes that are not a message."""
    try:
        obj = msgpack.unpackb(data, ext_hook=_ext_hook, strict_map_key=False)
    except (msgpack.UnpackException, ValueError, TypeError) as e:
        raise ValueError(f"undecodable message: {e}") from e
    if type(obj) not in _CODEC.by_type:
        raise ValueError(f"not a message: {type(obj).__name__}")
    return obj


def message_types() -> list[type]:
    """Every registered message class (tests round-trip all of them)."""
    return list(_CODEC.by_type)
