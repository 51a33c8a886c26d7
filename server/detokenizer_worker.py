"""Detokenizer worker: token ids -> text deltas, with stop strings applied here.

Contract per request (state created by its ``Accepted``, dropped when it finishes):

- text is decoded incrementally (UTF-8 pieces split across tokens are held until complete);
- the text of a stop token (``stop_token_ids``) that ended the request is not emitted;
- a stop string ends the request: the text before it is emitted, the stop string and everything
  after are not, ``finish_reason`` is "stop", and an ``AbortRequest`` tells the engine to free
  the request now; any later output of that request is dropped;
- text that might be the start of a stop string is held back until it is not, or until the
  request ends (then it is flushed);
- stop strings are looked for only once the request has ``min_tokens`` outputs;
- log-probabilities get each token's text (the token decoded alone, special tokens included);
  an ``echo`` request's first delta carries the prompt's text and its prompt log-probabilities;
- outputs of unknown requests (already ended) are dropped; ``Accepted``, ``ErrorReply``,
  ``EngineStats`` and ``RequestTimes`` pass through to the API server unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from twinserve.server.ipc import pull_socket, push_socket, recv_all, send
from twinserve.server.messages import (
    AbortRequest, Accepted, DetokOutputs, EngineStats, ErrorReply, RequestTimes, StepOutputs,
    TextDelta, TokenOutput,
)
from twinserve.server.outbox import Outbox
from twinserve.server.proc import ChildContext
from twinserve.server.tokenization import TextStream, TextTokenizer


@dataclass(slots=True)
class DetokenizerWorkerConfig:
    """The tokenizer to decode with; ``replicas``: the engine replicas a stop-string abort goes
    to (each ignores a request it does not hold)."""

    tokenizer_path: str
    replicas: int = 1


def held_suffix(text: str, stops: list[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of some stop string."""
    best = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:k]):
                best = k
                break
    return best


def find_stop(text: str, stops: list[str]) -> int:
    """Index of the earliest stop string in ``text``, or -1."""
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else -1


@dataclass(slots=True)
class DetokState:
    """One live request: its decoder, stop strings and the text held back."""

    stream: TextStream | None
    stops: list[str]
    stop_ids: frozenset[int] = frozenset()
    held: str = ""
    min_tokens: int = 0
    seen: int = 0
    echo_ids: list[int] | None = None

    def feed(self, out: TokenOutput) -> tuple[str, bool, str | None]:
        """Returns (text to emit, finished, finish_reason) for one engine output."""
        finished, reason = out.finished, out.finish_reason
        if self.stream is None:
            return "", finished, reason
        ids = out.token_ids
        if finished and reason == "stop" and ids and ids[-1] in self.stop_ids:
            ids = ids[:-1]  # like vLLM: a stop token's text is not part of the output
        text = self.held + "".join(self.stream.step(t) for t in ids)
        self.seen += len(out.token_ids)
        if self.stops and self.seen > self.min_tokens:
            cut = find_stop(text, self.stops)
            if cut >= 0:
                self.held = ""
                return text[:cut], True, "stop"
            if not finished:
                k = held_suffix(text, self.stops)
                self.held = text[len(text) - k:] if k else ""
                return text[: len(text) - k], False, None
        self.held = ""
        return text, finished, reason


class Detokenizer:
    """The worker's state machine, separate from its sockets so tests drive it directly."""

    def __init__(self, tok: TextTokenizer) -> None:
        self.tok = tok
        self.live: dict[int, DetokState] = {}
        self._pieces: dict[int, str] = {}  # token id -> its text alone (logprobs)

    def accept(self, msg: Accepted) -> None:
        d = msg.detok
        stream = self.tok.stream(d.get("prompt_tail")) if d.get("detokenize", True) else None
        self.live[msg.rid] = DetokState(stream, [s for s in d.get("stop") or [] if s],
                                        frozenset(int(t) for t in d.get("stop_token_ids") or ()),
                                        min_tokens=int(d.get("min_tokens") or 0),
                                        echo_ids=d.get("echo_ids"))

    def piece(self, tid: int) -> str:
        p = self._pieces.get(tid)
        if p is None:
            try:
                p = self.tok.decode([int(tid)], skip_special=False)
            except Exception:  # an id the tokenizer does not know (model vocab > tokenizer vocab)
                p = ""
            self._pieces[tid] = p
        return p

    def entries(self, ids: list[int], lps: list | None) -> list | None:
        """``[text, logprob, [[text, logprob], ...]]`` per token of ``ids`` (None if ``lps`` is)."""
        if lps is None:
            return None
        return [None if e is None else [self.piece(t), e[0], [[self.piece(a), b] for a, b in e[1]]]
                for t, e in zip(ids, lps)]

    def outputs(self, msg: StepOutputs) -> tuple[list[TextDelta], list[int]]:
        """Deltas for the API server and rids the engine must abort (stop strings)."""
        deltas: list[TextDelta] = []
        aborts: list[int] = []
        for out in msg.items():
            st = self.live.get(out.rid)
            if st is None:
                continue
            text, finished, reason = st.feed(out)
            if finished:
                del self.live[out.rid]
                if not out.finished:
                    aborts.append(out.rid)
            d = TextDelta(out.rid, text, out.token_ids, finished, reason, out.prompt_tokens,
                          out.cached_tokens, self.entries(out.token_ids, out.logprobs))
            if st.echo_ids is not None:
                ids, st.echo_ids = st.echo_ids, None
                d.prompt_text = self.tok.decode(ids)
                if out.prompt_logprobs is not None:
                    d.prompt_logprobs = [None] + (self.entries(ids[1:], out.prompt_logprobs) or [])
            deltas.append(d)
        return deltas, aborts


def run(cfg: DetokenizerWorkerConfig, ctx: ChildContext) -> None:
    """Child entry: load the tokenizer, bind the input socket, handshake, serve until SIGTERM."""
    detok = Detokenizer(TextTokenizer(cfg.tokenizer_path))
    inbox = pull_socket(ctx.zmq_ctx, ctx.paths.detokenizer)
    to_api = push_socket(ctx.zmq_ctx, ctx.paths.api)
    to_engines = [push_socket(ctx.zmq_ctx, ctx.paths.engine_of(r)) for r in range(max(1, cfg.replicas))]
    api = Outbox(to_api)  # what one round produces goes to the API server as one message
    try:
        ctx.announce()
        while True:
            for msg in recv_all(inbox, 1000):
                if isinstance(msg, StepOutputs):
                    deltas, aborts = detok.outputs(msg)
                    for rid in aborts:
                        for sock in to_engines:
                            send(sock, AbortRequest(rid, "stop"))
                    if deltas:
                        send(api, DetokOutputs.of(deltas, msg.t))
                elif isinstance(msg, Accepted):
                    detok.accept(msg)
                    send(api, msg)
                elif isinstance(msg, (ErrorReply, EngineStats, RequestTimes)):
                    send(api, msg)
            api.flush()
    finally:
        for s in (inbox, to_api, *to_engines):
            s.close(linger=0)
