"""Request bodies of the HTTP API (pydantic, strict: a wrong JSON type is a 400, not a coercion).

These models are also the server's OpenAPI schema, and it admits only what the server does: an
unknown field is a 400, and so is a value of an OpenAI field we do not implement (tools,
``best_of > 1``, a ``suffix``); the schema's bounds say so (``maxItems: 0`` for ``tools``). The
OpenAI fields that have no effect here (``metadata``, ``store``, ``service_tier``,
``parallel_tool_calls``) are accepted and listed as such in docs/serving.md.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from twinserve.server.config import MAX_N_LIMIT
from twinserve.server.errors import APIError

TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]
StopStr = Annotated[str, Field(max_length=1024)]
INT32 = 2**31 - 1
MAX_N = MAX_N_LIMIT  # the schema's bound on n; the served schema shows the configured server.max_n
MAX_TOP_LOGPROBS = 20
TOKEN_KEY = r"^(0|[1-9][0-9]{0,9})$"
NO_TOOLS = "tool calling is not supported by this server"
Penalty = Annotated[float, Field(ge=-2.0, le=2.0, allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class StreamOptions(_Strict):
    include_usage: bool = False


class JsonSchemaSpec(_Strict):
    """``response_format.json_schema``: ``schema`` is the JSON schema the output must validate
    against (absent: any JSON object); ``name``, ``description`` and ``strict`` have no effect
    (the output always follows the schema)."""

    name: str = Field(max_length=64)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class TextFormat(_Strict):
    type: Literal["text"]


class JsonObjectFormat(_Strict):
    type: Literal["json_object"]


class JsonSchemaFormat(_Strict):
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


ResponseFormat = Annotated[TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")]
ANY_OBJECT = '{"type": "object"}'


class SamplingFields(_Strict):
    """Sampling and stopping fields shared by every generation endpoint (docs/serving.md,
    "Request fields", says what each does)."""

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1, le=INT32)
    temperature: float | None = Field(None, ge=0.0, le=2.0, allow_inf_nan=False)
    top_p: float | None = Field(None, gt=0.0, le=1.0, allow_inf_nan=False)
    top_k: int | None = Field(None, ge=-1, le=INT32, description="-1 or 0: off")
    seed: int | None = Field(None, ge=-(2**63), le=2**64 - 1)
    stop: StopStr | Annotated[list[StopStr], Field(max_length=16)] | None = None
    stop_token_ids: list[TokenId] | None = Field(None, max_length=256)
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=MAX_N, description="at most server.max_n")
    priority: int = Field(0, ge=-INT32, le=INT32)
    user: str | None = Field(None, max_length=256, description="also used as the tenant")
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: float | None = Field(None, gt=0.0, le=10.0, allow_inf_nan=False)
    min_p: float | None = Field(None, ge=0.0, le=1.0, allow_inf_nan=False)
    logit_bias: dict[Annotated[str, Field(pattern=TOKEN_KEY)],
                     Annotated[float, Field(ge=-100.0, le=100.0, allow_inf_nan=False)]] | None = Field(
        None, max_length=1024, json_schema_extra={"propertyNames": {"pattern": TOKEN_KEY}},
        description="token id (a decimal string) -> bias added to its logit")
    min_tokens: int = Field(0, ge=0, le=INT32)
    response_format: ResponseFormat | None = None
    metadata: dict[str, Annotated[str, Field(max_length=512)]] | None = Field(
        None, max_length=16, description="no effect")
    store: bool | None = Field(None, description="no effect")
    service_tier: str | None = Field(None, max_length=64, description="no effect")

    def check_supported(self, max_n: int = MAX_N) -> None:
        if self.n > max_n:
            raise APIError(400, f"n must be <= {max_n} (server.max_n)", param="n")
        if self.stream_options is not None and not self.stream:
            raise APIError(400, "stream_options is only allowed when stream is true",
                           param="stream_options")

    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def json_schema(self) -> str | None:
        """The JSON schema text the output must follow, or None (``response_format`` text/absent)."""
        rf = self.response_format
        if rf is None or isinstance(rf, TextFormat):
            return None
        if isinstance(rf, JsonObjectFormat) or rf.json_schema.schema_ is None:
            return ANY_OBJECT
        return json.dumps(rf.json_schema.schema_)

    def logprobs_k(self) -> int | None:
        """How many alternatives per output token to report (None: no logprobs)."""
        return None

    def sampling_params(self) -> dict[str, Any]:
        """`SamplingParams` fields except ``max_tokens`` (the tokenizer fills it in) and ``n``
        (the handler sends ``n`` requests)."""
        out: dict[str, Any] = {
            "temperature": 1.0 if self.temperature is None else float(self.temperature),
            "top_p": 1.0 if self.top_p is None else float(self.top_p),
            "top_k": -1 if self.top_k in (None, 0) else int(self.top_k),
            "ignore_eos": bool(self.ignore_eos),
            "stop_token_ids": list(self.stop_token_ids or ()),
            "seed": self.seed,
        }
        optional = {"presence_penalty": self.presence_penalty, "frequency_penalty": self.frequency_penalty,
                    "repetition_penalty": self.repetition_penalty, "min_p": self.min_p,
                    "json_schema": self.json_schema(), "logprobs": self.logprobs_k()}
        out.update({k: v for k, v in optional.items() if v is not None})
        if self.min_tokens:
            out["min_tokens"] = int(self.min_tokens)
        if self.logit_bias:
            out["logit_bias"] = {int(k): float(v) for k, v in self.logit_bias.items()}
        return out

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(SamplingFields):
    """``POST /v1/completions``. ``prompt`` is a string or a list of token ids (a one-element list
    of either is accepted too; several prompts in one request are not)."""

    prompt: str | list[TokenId] | list[str] | list[list[TokenId]]
    echo: bool = Field(False, description="prepend the prompt (and its logprobs) to the output")
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    best_of: int | None = Field(None, ge=1, le=1, description="only 1")
    suffix: Annotated[str, Field(max_length=0)] | None = Field(None, description="not supported: empty only")

    def logprobs_k(self) -> int | None:
        return self.logprobs

    def prompt_logprobs_k(self) -> int | None:
        """Alternatives per prompt token (``echo`` with ``logprobs``), or None."""
        return self.logprobs if self.echo else None

    def sampling_params(self) -> dict[str, Any]:
        out = super().sampling_params()
        if self.prompt_logprobs_k() is not None:
            out["prompt_logprobs"] = self.prompt_logprobs_k()
        return out

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


def _no_tools(v: Any) -> Any:
    if v:
        raise ValueError(NO_TOOLS)
    return v


def _no_tools_field() -> Any:
    return Field(None, json_schema_extra={"maxItems": 0}, description=NO_TOOLS)


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_call_id: str | None = Field(None, description="passed to the chat template")
    tool_calls: list[dict[str, Any]] | None = _no_tools_field()

    _tools = field_validator("tool_calls")(_no_tools)

    def as_template_input(self) -> dict[str, Any]:
        c = self.content
        text = "" if c is None else c if isinstance(c, str) else "\n".join(p.text for p in c)
        d: dict[str, Any] = {"role": self.role, "content": text}
        if self.name is not None:
            d["name"] = self.name
        if self.tool_call_id is not None:
            d["tool_call_id"] = self.tool_call_id
        return d


class ChatCompletionRequest(SamplingFields):
    """``POST /v1/chat/completions``; ``max_completion_tokens`` is the newer name of ``max_tokens``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=INT32)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS, description="needs logprobs=true")
    add_generation_prompt: bool = True
    tools: list[dict[str, Any]] | None = _no_tools_field()
    functions: list[dict[str, Any]] | None = _no_tools_field()
    tool_choice: Literal["none"] | None = Field(None, description=NO_TOOLS + ": only \"none\"")
    function_call: Literal["none"] | None = Field(None, description=NO_TOOLS + ": only \"none\"")
    parallel_tool_calls: bool | None = Field(None, description="no effect")

    _tools = field_validator("tools", "functions")(_no_tools)

    def check_supported(self, max_n: int = MAX_N) -> None:
        super().check_supported(max_n)
        if self.top_logprobs is not None and not self.logprobs:
            raise APIError(400, "top_logprobs needs logprobs=true", param="top_logprobs")

    def logprobs_k(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    @model_validator(mode="after")
    def _merge_max(self) -> "ChatCompletionRequest":
        if self.max_tokens is None and self.max_completion_tokens is not None:
            self.max_tokens = self.max_completion_tokens
        return self


class GenerateRequestBody(SamplingFields):
    """``POST /generate``: token ids in, token ids out (no text is decoded)."""

    input_ids: list[TokenId] = Field(min_length=1)
    n: int = Field(1, ge=1, le=1, description="one output per request")
