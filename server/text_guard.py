"""Text the pipeline cannot carry: lone UTF-16 surrogates anywhere, NUL in identifiers.

JSON may spell a lone surrogate (``"\\ud800"``); Python parses it into a ``str`` that has no
UTF-8 encoding, so the tokenizer, the wire format and every error body that quotes it would fail.
`check_text` finds the first such string in a validated request body and raises a 400 naming
its field, before anything else reads the body.
"""

from __future__ import annotations

from typing import Any, Iterator

from pydantic import BaseModel

from twinserve.server.errors import APIError

# fields whose values are names, not text: NUL has no business there (logs, labels, templates)
IDENTIFIER_FIELDS = frozenset({"model", "user", "name", "role"})


def _strings(obj: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str]]:
    if isinstance(obj, str):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _strings(v, (*path, str(k)))
    elif isinstance(obj, (list, tuple)):
        if obj and isinstance(obj[0], (int, float)) and not isinstance(obj[0], bool):
            return  # a validated body's number lists are homogeneous (token ids): nothing to check
        for i, v in enumerate(obj):
            yield from _strings(v, (*path, str(i)))


def text_problem(value: str, identifier: bool) -> str | None:
    """Why ``value`` cannot be carried, or None."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            return (f"holds a lone UTF-16 surrogate (U+{ord(value[e.start]):04X}) at character "
                    f"{e.start}, which is not valid Unicode text")
    if identifier and "\x00" in value:
        return "holds a NUL character"
    return None


def find_bad_text(data: Any) -> tuple[str, str] | None:
    """(dotted path, problem) of the first string in ``data`` that cannot be carried, or None."""
    for path, s in _strings(data, ()):
        why = text_problem(s, bool(path) and path[-1] in IDENTIFIER_FIELDS)
        if why is not None:
            return ".".join(path), why
    return None


def check_text(body: BaseModel) -> None:
    """Raise a 400 `APIError` for the first string of ``body`` that cannot be carried."""
    bad = find_bad_text(body.model_dump(exclude_defaults=True))
    if bad is not None:
        path, why = bad
        raise APIError(400, f"{path} {why}", param=path.split(".")[0], code="invalid_text")
