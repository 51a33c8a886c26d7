"""JSON-schema constrained decoding through llguidance (the ``grammar`` optional extra).

`GrammarCompiler` is built once per engine from the model's ``tokenizer.json``; each request
with a ``json_schema`` gets a `GrammarMatcher`, which follows the request's output tokens and
gives the bitmask of the tokens allowed next.
"""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

import numpy as np

# the layout of generated JSON: json.dumps' separators and no other whitespace (free
# whitespace lets a weak model pad the value until it runs out of tokens)
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
GRAMMAR_CACHE = 256  # compiled schemas kept per engine (a client reusing a schema skips the compile)


def _llguidance() -> Any:
    try:
        import llguidance
    except ImportError as e:  # pragma: no cover - the extra is part of the dev install
        raise ValueError("json_schema / response_format needs llguidance: pip install "
                         "'twinserve[grammar]'") from e
    return llguidance


class GrammarMatcher:
    """One request's grammar state. Contract: ``bitmask(outputs)`` first consumes the outputs
    it has not seen (``outputs`` is the request's whole output so far), then returns the int32
    bitmask ([ceil(V / 32)], bit set = allowed) of the next token. Once the grammar is complete
    and admits nothing more, only EOS is allowed; a token the grammar refused (it cannot be
    sampled under the mask) leaves the matcher in error, and then only EOS is allowed too."""

    def __init__(self, matcher: Any, words: int, eos: Sequence[int]) -> None:
        self.m = matcher
        self.words = words
        self.eos = tuple(eos)
        self.consumed = 0

    def bitmask(self, outputs: np.ndarray) -> np.ndarray:
        if outputs.size > self.consumed and not self.m.is_error():
            self.m.consume_tokens([int(t) for t in outputs[self.consumed:]])
        self.consumed = int(outputs.size)
        if self.m.is_error() or self.m.is_stopped():
            bits = np.zeros(self.words, dtype=np.int32)
            for t in self.eos:
                if t < 32 * self.words:
                    bits[t // 32] |= np.int32(np.uint32(1 << (t % 32)).view(np.int32))
            return bits
        bits = np.frombuffer(self.m.compute_bitmask(), dtype=np.int32)[: self.words]
        if bits.size < self.words:  # a tokenizer smaller than the model's vocabulary
            bits = np.concatenate([bits, np.zeros(self.words - bits.size, np.int32)])
        return bits.copy()


class GrammarCompiler:
    """Compiles JSON schemas for one model (tokenizer at ``tokenizer_path``, ``vocab_size``
    logits, ``eos_token_ids``). ``matcher(schema)`` raises ``ValueError`` with the grammar
    engine's message for a schema it cannot use."""

    def __init__(self, tokenizer_path: str, vocab_size: int, eos_token_ids: Sequence[int]) -> None:
        llg = _llguidance()
        file = tokenizer_path if tokenizer_path.endswith(".json") else os.path.join(tokenizer_path, "tokenizer.json")
        if not os.path.exists(file):
            raise ValueError(f"json_schema needs the model's tokenizer.json ({file} is missing)")
        with open(file) as f:
            text = f.read()
        self.eos = tuple(int(t) for t in eos_token_ids)
        self.vocab = int(vocab_size)
        eos = list(self.eos) or None
        try:
            self.tok = llg.LLTokenizer(text, n_vocab=self.vocab, eos_token=eos)
        except ValueError:  # the tokenizer has more ids than the model's logits
            self.tok = llg.LLTokenizer(text, eos_token=eos)
        self.words = (self.vocab + 31) // 32
        self._grammars: dict[str, str] = {}

    def matcher(self, schema: str) -> GrammarMatcher:
        llg = _llguidance()
        grammar = self._grammars.get(schema)
        if grammar is None:
            try:
                json.loads(schema)
                grammar = llg.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_LAYOUT)
            except (ValueError, TypeError) as e:
                raise ValueError(f"json_schema is not a usable JSON schema: {e}") from None
            err = llg.LLMatcher.validate_grammar(grammar, self.tok)
            if err and not err.startswith("WARNING"):
                raise ValueError(f"json_schema is not a usable JSON schema: {err}")
            if len(self._grammars) >= GRAMMAR_CACHE:
                self._grammars.clear()
            self._grammars[schema] = grammar
        m = llg.LLMatcher(self.tok, grammar, log_level=0)
        if m.is_error():
            raise ValueError(f"json_schema is not a usable JSON schema: {m.get_error()}")
        return GrammarMatcher(m, self.words, self.eos)
