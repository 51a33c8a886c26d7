"""Response bodies of each generation endpoint, streamed and not (OpenAI wire shapes).

Every format serves a request's ``n`` choices: ``delta(d, index)`` renders one choice's delta as
one chunk, ``event(d, index)`` the same chunk as a server-sent event (bytes, None when there is
no chunk), ``full(choices, usage)`` the whole answer (`openai_fields.Choice` per output). The
text formats frame a plain text delta (no log-probabilities, no echoed prompt) from byte
templates (`sse_frames.TextFrames`); every other delta is serialized as its chunk.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from twinserve.server.messages import TextDelta
from twinserve.server.openai_fields import Choice, CompletionLogprobs, chat_logprobs
from twinserve.server.sse import sse_data
from twinserve.server.sse_frames import TextFrames, base_members


def _event(chunk: dict[str, Any] | None) -> bytes | None:
    return None if chunk is None else sse_data(chunk)


@dataclass(slots=True)
class CompletionFormat:
    """``/v1/completions``: ``text_completion`` objects; each token delta is one chunk. With
    ``echo`` the prompt's text (and, with logprobs, its tokens' logprobs) comes first."""

    id: str
    model: str
    echo: bool = False
    created: int = field(default_factory=lambda: int(time.time()))
    object: str = "text_completion"
    _lp: dict[int, CompletionLogprobs] = field(default_factory=dict)
    _frames: TextFrames | None = None

    def _base(self) -> dict[str, Any]:
        return {"id": self.id, "object": self.object, "created": self.created, "model": self.model}

    def start(self, n: int = 1) -> list[dict[str, Any]]:
        return []

    def _logprobs(self, index: int, entries: list | None, prompt: list | None) -> dict[str, Any] | None:
        if entries is None and prompt is None:
            return None
        lp = self._lp.setdefault(index, CompletionLogprobs())
        return lp.render((prompt or []) + (entries or []))

    def delta(self, d: TextDelta, index: int = 0) -> dict[str, Any] | None:
        prompt = d.prompt_text if self.echo else None
        if not (d.text or d.token_ids or d.finished or prompt):
            return None
        text = (prompt or "") + d.text
        lp = self._logprobs(index, d.logprobs, d.prompt_logprobs if self.echo else None)
        return {**self._base(), "choices": [{"index": index, "text": text, "logprobs": lp,
                                             "finish_reason": d.finish_reason if d.finished else None}]}

    def event(self, d: TextDelta, index: int = 0) -> bytes | None:
        plain = d.logprobs is None and not (self.echo and (d.prompt_text or d.prompt_logprobs is not None))
        if not plain or not (d.text or d.token_ids or d.finished):
            return _event(self.delta(d, index))
        if self._frames is None:
            self._frames = TextFrames(base_members(**self._base()), ',"text":', ',"logprobs":null,"finish_reason":')
        return self._frames.frame(index, d.text, d.finish_reason if d.finished else None)

    def usage(self, usage: dict[str, Any]) -> dict[str, Any]:
        return {**self._base(), "choices": [], "usage": usage}

    def full(self, choices: list[Choice], usage: dict[str, Any]) -> dict[str, Any]:
        out = []
        for c in choices:
            prompt = (c.prompt_text or "") if self.echo else ""
            lp = self._logprobs(c.index, c.logprobs, c.prompt_logprobs if self.echo else None)
            out.append({"index": c.index, "text": prompt + "".join(c.text), "logprobs": lp,
                        "finish_reason": c.finish_reason})
        return {**self._base(), "choices": out, "usage": usage}


@dataclass(slots=True)
class ChatFormat:
    """``/v1/chat/completions``: a first chunk with the role per choice, then content deltas."""

    id: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))
    _frames: TextFrames | None = None

    def _base(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def start(self, n: int = 1) -> list[dict[str, Any]]:
        return [{**self._base("chat.completion.chunk"), "choices": [
            {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
             "finish_reason": None}]} for i in range(n)]

    def delta(self, d: TextDelta, index: int = 0) -> dict[str, Any] | None:
        if not (d.text or d.token_ids or d.finished):
            return None
        delta = {"content": d.text} if (d.text or d.token_ids) else {}
        return {**self._base("chat.completion.chunk"), "choices": [
            {"index": index, "delta": delta, "logprobs": chat_logprobs(d.logprobs),
             "finish_reason": d.finish_reason if d.finished else None}]}

    def event(self, d: TextDelta, index: int = 0) -> bytes | None:
        if d.logprobs is not None or not (d.text or d.token_ids):
            return _event(self.delta(d, index))
        if self._frames is None:
            self._frames = TextFrames(base_members(**self._base("chat.completion.chunk")),
                                      ',"delta":{"content":', '},"logprobs":null,"finish_reason":')
        return self._frames.frame(index, d.text, d.finish_reason if d.finished else None)

    def usage(self, usage: dict[str, Any]) -> dict[str, Any]:
        return {**self._base("chat.completion.chunk"), "choices": [], "usage": usage}

    def full(self, choices: list[Choice], usage: dict[str, Any]) -> dict[str, Any]:
        return {**self._base("chat.completion"), "choices": [
            {"index": c.index, "message": {"role": "assistant", "content": "".join(c.text)},
             "logprobs": chat_logprobs(c.logprobs), "finish_reason": c.finish_reason}
            for c in choices], "usage": usage}


@dataclass(slots=True)
class GenerateFormat:
    """``/generate``: token ids only (one output)."""

    id: str
    model: str

    def start(self, n: int = 1) -> list[dict[str, Any]]:
        return []

    def delta(self, d: TextDelta, index: int = 0) -> dict[str, Any] | None:
        if not (d.token_ids or d.finished):
            return None
        return {"id": self.id, "output_ids": d.token_ids,
                "finish_reason": d.finish_reason if d.finished else None}

    def event(self, d: TextDelta, index: int = 0) -> bytes | None:
        return _event(self.delta(d, index))

    def usage(self, usage: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.id, "output_ids": [], "finish_reason": None, "usage": usage}

    def full(self, choices: list[Choice], usage: dict[str, Any]) -> dict[str, Any]:
        c = choices[0]
        return {"id": self.id, "output_ids": c.ids, "finish_reason": c.finish_reason, "usage": usage}
