"""schemathesis against the running server's OpenAPI schema: no input may produce a 5xx.

Generated bodies are valid and invalid ones (schemathesis' positive and negative modes). Output
lengths are capped before sending (``max_tokens`` <= 4) so that every call finishes in well under
a second on CPU; everything else is sent as generated.
"""

from __future__ import annotations

import collections

import httpx
import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402


@pytest.fixture(scope="module")
def api_schema(server):
    config = schemathesis.Config()
    # examples + fuzzing (positive and negative data); the exhaustive coverage phase would send
    # hundreds of requests per operation
    config.projects.default.phases.update(phases=["examples", "fuzzing"])
    return schemathesis.openapi.from_url(f"{server.url}/openapi.json", config=config)


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.fixture(scope="module")
def calls() -> collections.Counter:
    return collections.Counter()


def _cap(body: object) -> None:
    if isinstance(body, dict):
        for key in ("max_tokens", "max_completion_tokens"):
            v = body.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 4:
                body[key] = 4
        if "max_tokens" not in body and "max_completion_tokens" not in body:
            body["max_tokens"] = 4


@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case, server, calls: collections.Counter) -> None:
    _cap(case.body)
    calls[case.operation.label] += 1
    case.call_and_validate(base_url=server.url, checks=[not_a_server_error], timeout=30)


def test_every_generation_endpoint_was_fuzzed(calls: collections.Counter) -> None:
    for op in ("POST /v1/completions", "POST /v1/chat/completions", "POST /generate"):
        assert calls[op] >= 10, calls


def test_schema_lists_every_endpoint(server) -> None:
    paths = httpx.get(f"{server.url}/openapi.json", timeout=5).json()["paths"]
    for p in ("/v1/completions", "/v1/chat/completions", "/generate", "/v1/models", "/health", "/metrics"):
        assert p in paths, p
