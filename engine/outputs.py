"""`StepOutput`: what one engine step tells its caller about one request."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class StepOutput:
    """New output tokens of one request since its previous StepOutput.

    ``finished`` is true exactly once per request, on its last StepOutput, with
    ``finish_reason`` "stop" | "length" | "abort". ``prompt_tokens`` and ``cached_tokens``
    (prefix-cache hits at its latest admission) are repeated on every output. ``logprobs``
    (requests with ``SamplingParams.logprobs`` set, else None) has one entry per new token:
    (its log-probability, [(token id, log-probability)] of the most likely tokens).
    ``prompt_logprobs`` (``SamplingParams.prompt_logprobs`` set): the same for prompt tokens
    1 .. P-1, once, on the request's first output.
    """

    rid: int
    new_token_ids: list[int] = field(default_factory=list)
    finished: bool = False
    finish_reason: str | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    logprobs: list[tuple[float, list[tuple[int, float]]]] | None = None
    prompt_logprobs: list[tuple[float, list[tuple[int, float]]]] | None = None
