"""OpenAI-style error bodies and the exception that carries one through a handler."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          413: "invalid_request_error", 429: "rate_limit_error", 500: "server_error",
          503: "service_unavailable", 504: "timeout_error"}


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """The body of every non-2xx answer: ``{"error": {"message", "type", "param", "code"}}``."""

    error: ErrorInfo


def error_body(status: int, message: str, type: str | None = None, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type or _TYPES.get(status, "server_error"),
                      "param": param, "code": code}}


class APIError(Exception):
    """Raised inside a handler; the app turns it into ``status`` + `error_body` (+ ``headers``)."""

    def __init__(self, status: int, message: str, type: str | None = None, param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = error_body(status, message, type, param, code)
        self.headers = headers


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorResponse, "description": d}
    for s, d in ((400, "Invalid request"), (401, "Missing or wrong API key"), (404, "Unknown model"),
                 (413, "Request body too large"), (429, "Request queue full"),
                 (503, "Engine unavailable or stalled"), (504, "Request timed out"))
}
