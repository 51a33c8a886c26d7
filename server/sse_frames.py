"""`TextFrames`: the server-sent events of plain text deltas, framed from byte templates.

A streamed token is one SSE event whose JSON differs from the stream's previous one only in the
choice index, the text and the finish reason. `TextFrames` serializes the constant parts once
and JSON-encodes only the text per event; the bytes are exactly what
`sse.sse_data(chunk)` writes for the same chunk (the formats' tests compare the two).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from twinserve.server.sse import json_text


@dataclass(slots=True)
class TextFrames:
    """Events ``data: {<base>,"choices":[{"index":I<between><text><after><reason>}]}\\n\\n``.

    ``base`` is the chunk's fields before ``choices`` (JSON object members, without braces);
    ``between`` / ``after``: the JSON text between the index and the text, and between the text
    and the finish reason's value; ``close``: what closes the choice after the reason. Invariant:
    the cached heads and tails depend only on the index and the reason."""

    base: str
    between: str
    after: str
    close: str = "}]}"
    _heads: dict[int, bytes] = field(default_factory=dict)
    _tails: dict[str | None, bytes] = field(default_factory=dict)

    def frame(self, index: int, text: str, finish_reason: str | None) -> bytes:
        head = self._heads.get(index)
        if head is None:
            head = f'data: {{{self.base},"choices":[{{"index":{index}{self.between}'.encode()
            self._heads[index] = head
        tail = self._tails.get(finish_reason)
        if tail is None:
            tail = f"{self.after}{json_text(finish_reason)}{self.close}\n\n".encode()
            self._tails[finish_reason] = tail
        return head + json_text(text).encode() + tail


def base_members(**fields: object) -> str:
    """``"k":v`` JSON members of ``fields`` in order (the chunk's fields before ``choices``)."""
    return ",".join(f"{json_text(k)}:{json_text(v)}" for k, v in fields.items())
