"""Request bodies of the HTTP API (pydantic, strict: a wrong JSON type is a 400, not a coercion).

These models are also the server's OpenAPI schema. Unknown fields are ignored (OpenAI clients
send extras such as ``user`` metadata); fields we do not implement (``n > 1``, ``logprobs``,
``echo``, ``best_of``, ``suffix``) are rejected with a 400 rather than silently ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from twinserve.server.errors import APIError

TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]
StopStr = Annotated[str, Field(max_length=1024)]
INT32 = 2**31 - 1


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class StreamOptions(_Strict):
    include_usage: bool = False


class SamplingFields(_Strict):
    """Sampling and stopping fields shared by every generation endpoint."""

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1, le=INT32)
    temperature: float | None = Field(None, ge=0.0, le=2.0, allow_inf_nan=False)
    top_p: float | None = Field(None, gt=0.0, le=1.0, allow_inf_nan=False)
    top_k: int | None = Field(None, ge=-1, le=INT32, description="-1 or 0: off")
    seed: int | None = Field(None, ge=-(2**63), le=2**63 - 1)
    stop: StopStr | Annotated[list[StopStr], Field(max_length=16)] | None = None
    stop_token_ids: list[TokenId] | None = Field(None, max_length=256)
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=INT32)
    priority: int = Field(0, ge=-INT32, le=INT32)
    user: str | None = Field(None, max_length=256, description="also used as the tenant")

    def check_supported(self) -> None:
        if self.n != 1:
            raise APIError(400, "only n=1 is supported", param="n")
        if self.stream_options is not None and not self.stream:
            raise APIError(400, "stream_options is only allowed when stream is true",
                           param="stream_options")

    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def sampling_params(self) -> dict[str, Any]:
        """`SamplingParams` fields except ``max_tokens`` (the tokenizer fills it in)."""
        return {
            "temperature": 1.0 if self.temperature is None else float(self.temperature),
            "top_p": 1.0 if self.top_p is None else float(self.top_p),
            "top_k": -1 if self.top_k in (None, 0) else int(self.top_k),
            "ignore_eos": bool(self.ignore_eos),
            "stop_token_ids": list(self.stop_token_ids or ()),
            "seed": self.seed,
        }

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(SamplingFields):
    """``POST /v1/completions``. ``prompt`` is a string or a list of token ids (a one-element list
    of either is accepted too; several prompts in one request are not)."""

    prompt: str | list[TokenId] | list[str] | list[list[TokenId]]
    echo: bool = False
    logprobs: int | None = None
    best_of: int | None = None
    suffix: str | None = None

    def check_supported(self) -> None:
        super().check_supported()
        for name, off in (("echo", False), ("logprobs", None), ("suffix", None)):
            if getattr(self, name) != off:
                raise APIError(400, f"{name} is not supported", param=name)
        if self.best_of not in (None, 1):
            raise APIError(400, "best_of is not supported", param="best_of")

    def single_prompt(self) -> str | list[int]:
        p = self.prompt
        if isinstance(p, list) and p and isinstance(p[0], (str, list)):
            if len(p) != 1:
                raise APIError(400, "several prompts in one request are not supported; send one "
                               "request per prompt", param="prompt")
            return p[0]  # type: ignore[return-value]
        return p  # type: ignore[return-value]


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def as_template_input(self) -> dict[str, Any]:
        c = self.content
        text = "" if c is None else c if isinstance(c, str) else "\n".join(p.text for p in c)
        d: dict[str, Any] = {"role": self.role, "content": text}
        if self.name is not None:
            d["name"] = self.name
        return d


class ChatCompletionRequest(SamplingFields):
    """``POST /v1/chat/completions``; ``max_completion_tokens`` is the newer name of ``max_tokens``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=INT32)
    logprobs: bool = False
    add_generation_prompt: bool = True

    def check_supported(self) -> None:
        super().check_supported()
        if self.logprobs:
            raise APIError(400, "logprobs is not supported", param="logprobs")

    @model_validator(mode="after")
    def _merge_max(self) -> "ChatCompletionRequest":
        if self.max_tokens is None and self.max_completion_tokens is not None:
            self.max_tokens = self.max_completion_tokens
        return self


class GenerateRequestBody(SamplingFields):
    """``POST /generate``: token ids in, token ids out (no text is decoded)."""

    input_ids: list[TokenId] = Field(min_length=1)
