"""Tokenizer files of a model directory: encoding, chat templates, streaming decode.

Uses the ``tokenizers`` library directly (no transformers import: the workers start in well under
a second) and renders chat templates with a sandboxed jinja2 environment configured like HF's
(``trim_blocks``, ``lstrip_blocks``, ``raise_exception``, ``tojson``).
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any

import jinja2
import jinja2.sandbox
from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream


class TemplateError(ValueError):
    """The chat template refused the messages (e.g. roles out of order)."""


def _token_text(v: Any) -> str | None:
    if isinstance(v, dict):
        return v.get("content")
    return v


def _raise(message: str) -> None:
    raise TemplateError(message)


class TextTokenizer:
    """One model's tokenizer.

    Contract: ``encode(text)`` adds the tokenizer's own special tokens (BOS) like HF does for a
    completion prompt; ``render_chat(messages)`` returns the template's text, which already holds
    any BOS, so chat prompts are encoded with ``add_special=False``. Raises `TemplateError` for
    messages the template rejects and ``ValueError`` when the model has no chat template.
    """

    def __init__(self, path: str) -> None:
        file = path if path.endswith(".json") else os.path.join(path, "tokenizer.json")
        self.dir = os.path.dirname(file)
        self.tok = Tokenizer.from_file(file)
        cfg_path = os.path.join(self.dir, "tokenizer_config.json")
        self.config: dict[str, Any] = {}
        if os.path.exists(cfg_path):
            with open(cfg_path) as f:
                self.config = json.load(f)
        self.chat_template = self._load_template()
        self.bos_token = _token_text(self.config.get("bos_token"))
        self.eos_token = _token_text(self.config.get("eos_token"))
        self._compiled: jinja2.Template | None = None

    def _load_template(self) -> str | None:
        jinja_file = os.path.join(self.dir, "chat_template.jinja")
        if os.path.exists(jinja_file):
            with open(jinja_file) as f:
                return f.read()
        tpl = self.config.get("chat_template")
        if isinstance(tpl, list):  # [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in tpl if isinstance(t, dict)}
            tpl = named.get("default") or next(iter(named.values()), None)
        return tpl

    @property
    def vocab_size(self) -> int:
        return int(self.tok.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=add_special).ids)

    def count(self, text: str) -> int:
        """Tokens of ``text`` without special tokens."""
        return len(self.tok.encode(text, add_special_tokens=False))

    def num_special(self) -> int:
        """Special tokens ``encode(text)`` adds around a completion prompt (BOS, ...)."""
        return int(self.tok.num_special_tokens_to_add(False))

    def longest_token_chars(self) -> int:
        """The most characters any one vocabulary entry (added tokens included) spans."""
        return max((len(t) for t in self.tok.get_vocab(with_added_tokens=True)), default=1)

    def decode(self, ids: list[int], skip_special: bool = True) -> str:
        return self.tok.decode(ids, skip_special_tokens=skip_special)

    def render_chat(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        if not self.chat_template:
            raise ValueError("this model has no chat template; use /v1/completions")
        if self._compiled is None:
            env = jinja2.sandbox.ImmutableSandboxedEnvironment(
                trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
            env.filters["tojson"] = lambda x, indent=None, **kw: json.dumps(x, indent=indent,
                                                                           ensure_ascii=False)
            env.globals["raise_exception"] = _raise
            env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
            self._compiled = env.from_string(self.chat_template)
        try:
            return self._compiled.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                         bos_token=self.bos_token or "", eos_token=self.eos_token or "")
        except TemplateError:
            raise
        except jinja2.TemplateError as e:
            raise TemplateError(f"chat template failed: {e}") from e
        except (TypeError, KeyError, AttributeError, ValueError) as e:
            raise TemplateError(f"chat template could not render these messages: {e}") from e

    def stream(self, prefix_ids: list[int] | None = None) -> "TextStream":
        return TextStream(self.tok, prefix_ids)


class TextStream:
    """Incremental decode of one request's outputs; ``prefix_ids`` (the prompt's last few ids)
    give the decoder the left context so leading spaces come out right."""

    def __init__(self, tok: Tokenizer, prefix_ids: list[int] | None) -> None:
        self.tok = tok
        self.ds = DecodeStream(ids=list(prefix_ids) if prefix_ids else None, skip_special_tokens=True)

    def step(self, token_id: int) -> str:
        try:
            piece = self.ds.step(self.tok, int(token_id))
        except Exception:  # an id the tokenizer does not know (model vocab > tokenizer vocab)
            return ""
        return piece or ""
