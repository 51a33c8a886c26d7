"""Per-request sampling parameters, shared by every backend."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

SEED_MIN = -(2**63)
SEED_MAX = 2**64 - 1
MAX_LOGPROBS = 20  # the most alternatives a request may ask for per position (OpenAI's limit)


def seed64(seed: int) -> int:
    """A seed as the signed 64-bit integer with the same low 64 bits (``-1`` and ``2**64 - 1``
    are one seed)."""
    s = int(seed) & (2**64 - 1)
    return s - 2**64 if s >= 2**63 else s


@dataclass(slots=True)
class SamplingParams:
    """How one request's tokens are chosen and when it stops.

    Contract: ``temperature == 0`` means greedy; ``top_k <= 0``, ``top_p == 1`` and ``min_p == 0``
    switch those filters off; a request stops after ``max_tokens`` output tokens, on an EOS token
    unless ``ignore_eos``, or on any of ``stop_token_ids``, but never before ``min_tokens`` outputs
    (EOS and stop tokens are masked until then). ``seed`` (any integer of 64 bits) makes a sampled
    request reproducible.

    The logits of a row are processed in this order: ``logit_bias`` added (token id -> bias),
    the min-tokens mask, the ``json_schema`` grammar mask, ``repetition_penalty`` (every token
    seen in the prompt or the output: a positive logit divided by it, a negative one multiplied),
    ``frequency_penalty`` * count and ``presence_penalty`` * (count > 0) subtracted for the
    output's tokens; then temperature, ``min_p`` (tokens below ``min_p`` times the top token's
    probability dropped), top-k and top-p. ``logprobs`` (None: off; k >= 0: the sampled token's
    log-probability and the k most likely alternatives) and ``prompt_logprobs`` (the same for
    every prompt token after the first) are taken from the model's own distribution
    (log-softmax of the raw logits). ``json_schema``: the output must be JSON that validates
    against this schema (JSON text). ``n``: independent outputs of the prompt; the offline `LLM`
    and the server expand it into ``n`` engine requests (an `Engine` takes ``n == 1`` only).
    ``validate()`` raises ``ValueError`` with a user-facing message for out-of-range values.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 16
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)
    seed: int | None = None
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    json_schema: str | None = None
    n: int = 1

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def penalized(self) -> bool:
        """Whether a penalty reads the request's token history."""
        return (self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
                or self.repetition_penalty != 1.0)

    @property
    def needs_history(self) -> bool:
        """Whether sampling a token needs every earlier output token's value on the host
        (penalties, grammar): the engine then completes a step before launching the next."""
        return self.json_schema is not None or self.penalized

    @property
    def has_extras(self) -> bool:
        """Whether any option beyond temperature, top-k, top-p and the seed is set."""
        return (self.needs_history or bool(self.logit_bias) or self.min_tokens > 0 or self.min_p > 0.0
                or self.logprobs is not None or self.prompt_logprobs is not None)

    def validate(self) -> None:
        if not (self.temperature >= 0.0) or math.isinf(self.temperature):
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"top_k must be -1 (off) or >= 1, got {self.top_k}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if any(t < 0 for t in self.stop_token_ids):
            raise ValueError("stop_token_ids must be non-negative token ids")
        if self.seed is not None and not (SEED_MIN <= self.seed <= SEED_MAX):
            raise ValueError(f"seed must fit in 64 bits, got {self.seed}")
        if not (0.0 <= self.min_p <= 1.0):
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            if not (-2.0 <= v <= 2.0):
                raise ValueError(f"{name} must be in [-2, 2], got {v}")
        if not (0.0 < self.repetition_penalty <= 10.0):
            raise ValueError(f"repetition_penalty must be in (0, 10], got {self.repetition_penalty}")
        for t, b in self.logit_bias.items():
            if int(t) < 0:
                raise ValueError(f"logit_bias keys must be non-negative token ids, got {t}")
            if not (-100.0 <= b <= 100.0):
                raise ValueError(f"logit_bias values must be in [-100, 100], got {b} for token {t}")
        if not (0 <= self.min_tokens <= self.max_tokens):
            raise ValueError(f"min_tokens must be in [0, max_tokens={self.max_tokens}], got {self.min_tokens}")
        for name in ("logprobs", "prompt_logprobs"):
            v = getattr(self, name)
            if v is not None and not (0 <= v <= MAX_LOGPROBS):
                raise ValueError(f"{name} must be in [0, {MAX_LOGPROBS}] or None, got {v}")
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
