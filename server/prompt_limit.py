"""Prompt length checks that run before, or instead of, tokenizing a whole prompt.

- Characters bound tokens: no token of a tokenizer spans more than ``token_chars`` characters (its
  longest vocabulary entry), so a text of more than ``max_model_len * token_chars`` characters
  cannot fit and is refused without tokenizing (a tokenizer whose normalizer deletes characters
  could in principle fit more; the serving models' byte-level and sentencepiece tokenizers keep
  every character).
- A long text is counted in chunks of about ``CHUNK_CHARS`` characters, cut before a space where
  possible, and refused as soon as the count passes the context with a margin of
  ``BOUNDARY_SLACK`` tokens per cut (a cut can change the tokens next to it). Only a text that
  may fit is then tokenized whole, so the cost of one prompt is bounded by the context, not by
  the prompt, and each chunk is a point where the tokenizer worker serves other requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

CHUNK_CHARS = 16384
BOUNDARY_SLACK = 4


def spans(text: str, size: int = CHUNK_CHARS) -> Iterator[tuple[int, int]]:
    """``(start, end)`` pieces of ``text`` of at most ``size`` characters, each cut just before a
    space or newline in the second half of its window when there is one."""
    start, n = 0, len(text)
    while start < n:
        end = min(n, start + size)
        if end < n:
            lo = start + size // 2
            cut = max(text.rfind(" ", lo, end), text.rfind("\n", lo, end))
            if cut > start:
                end = cut
        yield start, end
        start = end


@dataclass(frozen=True, slots=True)
class PromptLimit:
    """The context and the tokenizer's longest token; every count below is in tokens."""

    max_model_len: int
    token_chars: int

    @property
    def max_chars(self) -> int:
        return self.max_model_len * max(1, self.token_chars)

    def chars_problem(self, n_chars: int) -> str | None:
        """Why a text of ``n_chars`` characters cannot fit, or None."""
        if n_chars <= self.max_chars:
            return None
        return (f"This model's maximum context length is {self.max_model_len} tokens, but the prompt "
                f"has {n_chars} characters, more than {self.max_model_len} tokens can hold (a token "
                f"spans at most {self.token_chars} characters).")

    def count_chunks(self, text: str, count: Callable[[str], int], special: int) -> Iterator[int | str]:
        """Count ``text`` chunk by chunk: yields the running count after each chunk, and a final
        message (str) if the text surely exceeds the context (then stops)."""
        total, cuts = special, -1
        for start, end in spans(text):
            total += count(text[start:end])
            cuts += 1
            if total - BOUNDARY_SLACK * cuts >= self.max_model_len:
                yield (f"This model's maximum context length is {self.max_model_len} tokens, but the "
                       f"prompt has at least {total - BOUNDARY_SLACK * cuts} tokens (at least one token "
                       "must be left for the output).")
                return
            yield total
