"""Fixtures of the server tests: one tiny model per session, one shared healthy server.

The shared server runs on CPU with a small context (``MAX_MODEL_LEN``) so that every request,
even one without ``max_tokens``, finishes quickly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # helpers_server

MAX_MODEL_LEN = 384
# one torch thread per engine: CI has 2 cores shared by 4 server processes and the test process,
# and oversubscribed OpenMP threads make a tiny model's steps ~20x slower
SERVER_ENV = {"OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("models") / "tiny-llama"
    subprocess.run([sys.executable, "-m", "twinserve.engine.model_maker", "--shape", "tiny-llama",
                    "--out", str(out), "--dtype", "float32"], check=True, capture_output=True)
    return str(out)


def engine_config(model: str, **kw):
    from twinserve.engine.engine import EngineConfig

    base = dict(model=model, device="cpu", max_model_len=MAX_MODEL_LEN, cpu_kv_tokens=16384, seed=0)
    base.update(kw)
    return EngineConfig(**base)


@pytest.fixture(scope="session")
def server(tiny_model: str):
    from twinserve.server.launch import start_server

    h = start_server(engine_config(tiny_model), queue_limit=64, request_timeout_s=60.0, debug=True,
                     env=SERVER_ENV)
    try:
        yield h
    finally:
        code = h.stop()
        assert code == 0, h.log()
        assert not os.path.exists(h.ipc_dir)


@pytest.fixture(scope="module")
def two_servers(tiny_model: str):
    """The URLs of two tiny servers (one module's worth of tests)."""
    from twinserve.server.launch import start_server

    hs = [start_server(engine_config(tiny_model), request_timeout_s=60.0, env=SERVER_ENV) for _ in range(2)]
    yield [h.url for h in hs]
    for h in hs:
        assert h.stop() == 0, h.log()
