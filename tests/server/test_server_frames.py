"""The hand-framed SSE events of text deltas are byte for byte the serialized chunks."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from twinserve.server.formats import ChatFormat, CompletionFormat, GenerateFormat
from twinserve.server.messages import TextDelta
from twinserve.server.sse import sse_data

# no lone surrogates: a tokenizer's text is valid Unicode, and neither path can encode them
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
REASONS = st.sampled_from([None, "stop", "length", "abort", 'odd "reason"'])


@st.composite
def deltas(draw: st.DrawFn) -> TextDelta:
    finished = draw(st.booleans())
    ids = draw(st.lists(st.integers(0, 50_000), max_size=3))
    lp = draw(st.one_of(st.none(), st.just([["x", -0.5, [["x", -0.5]]] for _ in ids])))
    return TextDelta(1, draw(TEXT), ids, finished, draw(REASONS) if finished else None, 5, 0, lp,
                     draw(st.one_of(st.none(), TEXT)), None)


def _formats(model: str, echo: bool) -> list:
    return [CompletionFormat("cmpl-1", model, echo=echo, created=1700000000),
            ChatFormat("chatcmpl-1", model, created=1700000000), GenerateFormat("gen-1", model)]


@settings(max_examples=300, deadline=None)
@given(st.lists(deltas(), min_size=1, max_size=4), st.integers(0, 20), TEXT, st.booleans())
def test_events_equal_the_serialized_chunks(ds: list[TextDelta], index: int, model: str, echo: bool) -> None:
    for fast, slow in zip(_formats(model, echo), _formats(model, echo)):
        for d in ds:
            chunk = slow.delta(d, index)
            want = None if chunk is None else sse_data(chunk)
            assert fast.event(d, index) == want


def test_a_plain_delta_is_framed_and_parses() -> None:
    fmt = ChatFormat("chatcmpl-1", "m\u00e9", created=5)
    ev = fmt.event(TextDelta(3, 'a "q"\n\u4e2d', [9], True, "length", 4, 0), 2)
    assert fmt._frames is not None  # the template path, not the fallback
    assert ev is not None and ev.startswith(b"data: ") and ev.endswith(b"\n\n")
    obj = json.loads(ev[6:])
    assert obj["model"] == "m\u00e9"
    assert obj["choices"] == [{"index": 2, "delta": {"content": 'a "q"\n\u4e2d'}, "logprobs": None,
                               "finish_reason": "length"}]
