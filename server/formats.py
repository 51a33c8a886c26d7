"""Response bodies of each generation endpoint, streamed and not (OpenAI wire shapes)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from twinserve.server.messages import TextDelta


@dataclass(slots=True)
class CompletionFormat:
    """``/v1/completions``: ``text_completion`` objects; each token delta is one chunk."""

    id: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))
    object: str = "text_completion"

    def _base(self) -> dict[str, Any]:
        return {"id": self.id, "object": self.object, "created": self.created, "model": self.model}

    def start(self) -> list[dict[str, Any]]:
        return []

    def delta(self, d: TextDelta) -> dict[str, Any] | None:
        if not (d.text or d.token_ids or d.finished):
            return None
        return {**self._base(), "choices": [{"index": 0, "text": d.text, "logprobs": None,
                                             "finish_reason": d.finish_reason if d.finished else None}]}

    def usage(self, usage: dict[str, Any]) -> dict[str, Any]:
        return {**self._base(), "choices": [], "usage": usage}

    def full(self, text: str, ids: list[int], reason: str | None, usage: dict[str, Any]) -> dict[str, Any]:
        return {**self._base(), "choices": [{"index": 0, "text": text, "logprobs": None,
                                             "finish_reason": reason}], "usage": usage}


@dataclass(slots=True)
class ChatFormat:
    """``/v1/chat/completions``: a first chunk with the role, then content deltas."""

    id: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))

    def _base(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def start(self) -> list[dict[str, Any]]:
        return [{**self._base("chat.completion.chunk"), "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
             "finish_reason": None}]}]

    def delta(self, d: TextDelta) -> dict[str, Any] | None:
        if not (d.text or d.token_ids or d.finished):
            return None
        delta = {"content": d.text} if (d.text or d.token_ids) else {}
        return {**self._base("chat.completion.chunk"), "choices": [
            {"index": 0, "delta": delta, "logprobs": None,
             "finish_reason": d.finish_reason if d.finished else None}]}

    def usage(self, usage: dict[str, Any]) -> dict[str, Any]:
        return {**self._base("chat.completion.chunk"), "choices": [], "usage": usage}

    def full(self, text: str, ids: list[int], reason: str | None, usage: dict[str, Any]) -> dict[str, Any]:
        return {**self._base("chat.completion"), "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
             "finish_reason": reason}], "usage": usage}


@dataclass(slots=True)
class GenerateFormat:
    """``/generate``: token ids only."""

    id: str
    model: str

    def start(self) -> list[dict[str, Any]]:
        return []

    def delta(self, d: TextDelta) -> dict[str, Any] | None:
        if not (d.token_ids or d.finished):
            return None
        return {"id": self.id, "output_ids": d.token_ids,
                "finish_reason": d.finish_reason if d.finished else None}

    def usage(self, usage: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.id, "output_ids": [], "finish_reason": None, "usage": usage}

    def full(self, text: str, ids: list[int], reason: str | None, usage: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.id, "output_ids": ids, "finish_reason": reason, "usage": usage}
