"""Helpers the server tests share (imported by name: tests/server/conftest.py puts this folder on the path)."""

from __future__ import annotations

import socket

import httpx

MODEL_NAME = "tiny-llama"  # the served model's name in the tests' servers


def metric(url: str, name: str, **labels: str) -> float:
    """The value of one series of ``/metrics`` of the server at ``url``, with the served model's
    ``model_name`` label and ``labels`` (0.0 if absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in {"model_name": MODEL_NAME, **labels}.items())
    for ln in httpx.get(f"{url}/metrics", timeout=5).text.splitlines():
        if ln.startswith(f"{name}{{") and ln.split("}")[0][len(name) + 1:] == want:
            return float(ln.rsplit(" ", 1)[1])
    return 0.0


def free_port() -> int:
    """A local TCP port that was free a moment ago (nothing listens there)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
