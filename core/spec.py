"""Speculative decoding's backend-free parts: its config, draft proposers (`PROPOSERS`) and
greedy acceptance.

A proposer looks at one request's known tokens (prompt and outputs so far) and proposes up to
``k`` tokens that may come next; the target model then scores the last known token and the
proposed ones in one forward of ``1 + len(draft)`` positions, and `accept_greedy` keeps the
longest prefix of the draft that the target's choices agree with, plus the target's next token
after it: every verify step emits between 1 and ``len(draft) + 1`` tokens. For a greedy request
the choices are the target's argmax, so the tokens are exactly the ones greedy decoding without
speculation would have emitted; for a sampled one they come from rejection sampling
(engine/spec_sampler.py), which keeps the target's output distribution.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping, Protocol

import numpy as np

from twinserve.core.errors import UserError
from twinserve.core.registry import Registry
from twinserve.core.spec_ngram import NgramIndex

SPEC_METHODS = ("none", "ngram", "draft")
AUTO_MAX_BATCH = -1  # spec.max_batch_size=auto: the engine measures where speculation pays
MODEL_METHODS = ("draft",)  # methods whose proposer runs a model: the engine builds it (engine/spec_draft.py)


@dataclass(frozen=True)
class SpecConfig:
    """``method``: "none", a `PROPOSERS` name or "draft" (a draft model, which only an engine
    can run); ``num_tokens``: k, the most tokens proposed per request and step (>= 1 when a
    method is set); ``ngram_min`` / ``ngram_max``: the n-gram lengths prompt lookup tries,
    longest first; ``draft``: with method=draft, ``layers:N`` (the target's first N layers,
    final norm and head: self-speculation) or a checkpoint folder with the target's vocabulary. ``acceptance`` / ``acceptance_file``: the
    simulator's acceptance model (`core.spec_accept.AcceptanceModel`); engines ignore them.
    ``max_batch_size``: no request speculates in a step formed while more than this many
    requests run (0: no limit), for batches where a verify step costs more than it saves;
    ``auto`` (stored as `AUTO_MAX_BATCH`, -1): an engine finds it from its own measured step
    costs (core/spec_cutoff.py)."""

    method: str = "none"
    num_tokens: int = 0
    ngram_min: int = 3
    ngram_max: int = 4
    draft: str = ""
    acceptance: Any = None
    acceptance_file: str = ""
    max_batch_size: int = 0

    @property
    def enabled(self) -> bool:
        return self.method != "none" and self.num_tokens > 0

    @property
    def auto_batch(self) -> bool:
        return self.max_batch_size == AUTO_MAX_BATCH

    def validate(self) -> None:
        if self.method != "none" and self.method not in PROPOSERS and self.method not in MODEL_METHODS:
            known = ", ".join(["none", *PROPOSERS.names(), *MODEL_METHODS])
            raise UserError(f"unknown spec.method '{self.method}'; known: {known}", "spec.method")
        if self.method in MODEL_METHODS and not self.draft:
            raise UserError(f"spec.method={self.method} needs spec.draft (layers:N or a checkpoint folder)", "spec.draft")
        if self.draft and self.method not in MODEL_METHODS:
            raise UserError(f"spec.draft is set but spec.method is '{self.method}'; use spec.method=draft", "spec.method")
        if self.method != "none" and self.num_tokens < 1:
            raise UserError(f"spec.num_tokens must be >= 1 with spec.method={self.method}, got {self.num_tokens}",
                            "spec.num_tokens")
        if self.max_batch_size < AUTO_MAX_BATCH:
            raise UserError(f"spec.max_batch_size must be >= 0 (0: no limit) or auto, got {self.max_batch_size}",
                            "spec.max_batch_size")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise UserError(f"need 1 <= spec.ngram_min <= spec.ngram_max, got {self.ngram_min}, {self.ngram_max}",
                            "spec.ngram_min")

    def proposer(self) -> "Proposer":
        if self.method in MODEL_METHODS:
            raise ValueError(f"spec.method={self.method} runs a model: only an engine builds its proposer")
        return PROPOSERS.create(self.method, cfg=self)

    @classmethod
    def of(cls, value: "SpecConfig | Mapping[str, Any] | None") -> "SpecConfig":
        """A SpecConfig from itself, a mapping of its fields (a run config's ``spec`` node; a
        None value: the field's default) or None (off); validated. ValueError names unknown keys."""
        if isinstance(value, SpecConfig):
            cfg = value
        else:
            values = {k: v for k, v in dict(value or {}).items() if v is not None}
            unknown = set(values) - {f.name for f in fields(cls)}
            if unknown:
                raise UserError(f"unknown spec keys {sorted(unknown)}; known: {[f.name for f in fields(cls)]}", "spec")
            if values.get("max_batch_size") == "auto":
                values["max_batch_size"] = AUTO_MAX_BATCH
            cfg = cls(**values)
        cfg.validate()
        return cfg


class Proposer(Protocol):
    """``propose(tokens, k)``: up to ``k`` ids likely to follow ``tokens`` (int array, maybe empty)."""

    def propose(self, tokens: np.ndarray, k: int) -> np.ndarray: ...


PROPOSERS: Registry[Proposer] = Registry("speculative proposer")


@PROPOSERS.register("ngram")
class NgramProposer:
    """Prompt lookup: for n from ``ngram_max`` down to ``ngram_min``, find the latest earlier
    place where the last n tokens occurred, and propose the (up to) ``k`` tokens that followed
    it. No match for any n: an empty proposal. ``propose`` is a pure function of ``tokens``
    (a scan); ``propose_for(key, tokens, k)`` gives the same answer from an `NgramIndex` kept
    per ``key`` (a request id), whose ``tokens`` only grow between calls; ``retain(keys)`` drops
    the indexes of every other key. ``may_propose_after(key, tokens)``: whether ``propose_for``
    could find a match once one more (unknown) token follows ``tokens``."""

    def __init__(self, cfg: SpecConfig | None = None, ngram_min: int | None = None,
                 ngram_max: int | None = None) -> None:
        cfg = cfg if cfg is not None else SpecConfig()
        self.min_n = cfg.ngram_min if ngram_min is None else ngram_min
        self.max_n = cfg.ngram_max if ngram_max is None else ngram_max
        self._indexes: dict[int, NgramIndex] = {}

    def propose_for(self, key: int, tokens: np.ndarray, k: int) -> np.ndarray:
        idx = self._indexes.get(key)
        if idx is None:
            idx = self._indexes[key] = NgramIndex(self.min_n, self.max_n)
        return idx.lookup(np.asarray(tokens), k)

    def may_propose_after(self, key: int, tokens: np.ndarray) -> bool:
        idx = self._indexes.get(key)
        if idx is None:
            idx = self._indexes[key] = NgramIndex(self.min_n, self.max_n)
        return idx.may_match_after(np.asarray(tokens))

    def retain(self, keys: "set[int]") -> None:
        for key in self._indexes.keys() - keys:
            del self._indexes[key]

    def propose(self, tokens: np.ndarray, k: int) -> np.ndarray:
        toks = np.asarray(tokens)
        size = toks.size
        for n in range(min(self.max_n, size - 1), self.min_n - 1, -1):
            # windows starting at 0 .. size-n-1: every occurrence but the suffix itself
            win = np.lib.stride_tricks.sliding_window_view(toks[:size - 1], n)
            hits = np.flatnonzero((win == toks[size - n:]).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + n
                return toks[start:start + k].copy()
        return toks[:0].copy()


def layer_draft_depth(draft: str, num_layers: int) -> int | None:
    """N of a ``layers:N`` draft (``spec.draft``) of a model of ``num_layers`` layers; None for
    any other draft; `UserError` unless ``1 <= N <= num_layers``."""
    kind, _, arg = draft.partition(":")
    if kind != "layers":
        return None
    if not arg.isdigit() or not 1 <= int(arg) <= num_layers:
        raise UserError(f"spec.draft=layers:N needs 1 <= N <= {num_layers} (the model's layers), got '{draft}'",
                        key="spec.draft")
    return int(arg)


def accept_greedy(draft: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The tokens a verify step emits: ``target`` holds the target model's greedy token at each
    of the ``len(draft) + 1`` positions (after the last known token, then after each draft
    token); the result is ``target[:a + 1]`` where ``a`` drafts match ``target`` from the start."""
    t = np.asarray(target)
    d = np.asarray(draft).tolist()  # a handful of tokens: a list walk beats array ops
    if t.size != len(d) + 1:
        raise ValueError(f"accept_greedy: {t.size} target tokens for a draft of {len(d)}")
    tl = t.tolist()
    a = 0
    while a < len(d) and d[a] == tl[a]:
        a += 1
    return t[:a + 1]
