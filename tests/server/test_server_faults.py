"""Overload, shutdown and crash behaviour of real server processes.

- 429 with Retry-After beyond the queue limit (one running slot, two queue places: exactly three
  of a burst are accepted);
- SIGTERM with a request in flight: the client gets an error, every child exits, the IPC dir goes;
- ``twinserve-serve`` (the Hydra console script): serves, then its engine worker is SIGKILLed:
  /health turns 503, the in-flight stream ends with an error, new requests get 503, and SIGTERM
  still cleans everything up.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest

from helpers_server import free_port


def _engine_config(model: str, **kw):
    from twinserve.engine.engine import EngineConfig

    return EngineConfig(model=model, device="cpu", max_model_len=256, cpu_kv_tokens=8192, **kw)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "zombie" in f.read()  # exited, not yet reaped by a dead parent's init
    except FileNotFoundError:
        return True


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if not _gone(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return [p for p in pids if not _gone(p)]


@pytest.fixture(scope="module")
def small_server(tiny_model: str):
    from twinserve.server.launch import start_server

    h = start_server(_engine_config(tiny_model, scheduler={"max_running": 1}), queue_limit=2,
                     debug=True, env={"OMP_NUM_THREADS": "1"})
    yield h
    h.stop()


def test_queue_limit_gives_429(small_server) -> None:
    async def one(c: httpx.AsyncClient, i: int) -> tuple[int, dict]:
        body = {"prompt": f"req {i}", "max_tokens": 100, "ignore_eos": True, "stream": True}
        async with c.stream("POST", f"{small_server.url}/v1/completions", json=body) as r:
            if r.status_code != 200:
                return r.status_code, (await r.aread()) and {**r.json(), "retry": r.headers.get("retry-after")}
            n = sum([1 async for ln in r.aiter_lines() if ln.startswith("data: {")])
            return 200, {"chunks": n}

    async def run() -> list:
        async with httpx.AsyncClient(timeout=60) as c:
            return await asyncio.gather(*(one(c, i) for i in range(8)))

    results = asyncio.run(run())
    codes = [s for s, _ in results]
    ok = [b for s, b in results if s == 200]
    over = [b for s, b in results if s == 429]
    assert len(ok) + len(over) == 8, codes
    assert len(ok) == 3, codes  # 1 running + 2 queued; the burst arrives before the first finishes
    assert all(b["chunks"] == 100 for b in ok)
    err = over[0]["error"]
    assert err["type"] == "rate_limit_error" and "queue is full" in err["message"]
    assert all(b["retry"] == "1" for b in over)
    assert httpx.get(f"{small_server.url}/health", timeout=5).status_code == 200


def test_sigterm_stops_every_process_and_removes_ipc(small_server) -> None:
    h = small_server
    info = httpx.get(f"{h.url}/debug/engine", timeout=5).json()
    pids = [p for k, p in info["pids"].items() if k != "api"]
    assert sorted(info["pids"]) == ["api", "detokenizer0", "engine0", "tokenizer0"]
    assert os.path.isdir(info["ipc_dir"]) and os.listdir(info["ipc_dir"])
    outcome: dict = {}

    def stream() -> None:
        c = openai.OpenAI(base_url=f"{h.url}/v1", api_key="x", max_retries=0, timeout=30)
        try:
            for _ in c.completions.create(model="tiny-llama", prompt="x", max_tokens=240, stream=True,
                                          extra_body={"ignore_eos": True}):
                outcome["chunks"] = outcome.get("chunks", 0) + 1
            outcome["end"] = "finished"
        except Exception as e:  # the stream must end with an error, not hang
            outcome["end"] = type(e).__name__

    t = threading.Thread(target=stream)
    t.start()
    deadline = time.monotonic() + 20
    while outcome.get("chunks", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    t0 = time.monotonic()
    os.kill(h.pid, signal.SIGTERM)
    code = h.process.wait(30)
    t.join(30)
    assert not t.is_alive() and outcome.get("end") not in (None, "finished"), outcome
    assert code == 0, h.log()
    assert time.monotonic() - t0 < 15
    assert _wait_gone(pids, 5) == []
    assert not os.path.exists(info["ipc_dir"])


def test_cli_server_engine_death_then_sigterm(tiny_model: str) -> None:
    port = free_port()
    cmd = [sys.executable, "-c", "from twinserve.server.launch import main; main()",
           f"model.path={tiny_model}", f"server.port={port}", "scheduler=lpm", "cache=radix",
           "backend.device=cpu", "model.max_model_len=256", "backend.cpu_kv_tokens=8192",
           "server.queue_limit=16", "server.debug=true"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "twinserve-serve did not come up"
            time.sleep(0.1)
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30)
        r = c.completions.create(model="tiny-llama", prompt="cli", max_tokens=3, extra_body={"ignore_eos": True})
        assert r.usage.completion_tokens == 3
        info = httpx.get(f"{url}/debug/engine", timeout=5).json()
        children = [p for k, p in info["pids"].items() if k != "api"]

        stream = c.completions.create(model="tiny-llama", prompt="die", max_tokens=240, stream=True,
                                      extra_body={"ignore_eos": True})
        next(iter(stream))
        os.kill(info["pids"]["engine0"], signal.SIGKILL)
        with pytest.raises(openai.APIError) as e:
            for _ in stream:
                pass
        assert "engine worker" in str(e.value)
        h = httpx.get(f"{url}/health", timeout=5)
        assert h.status_code == 503 and "engine" in h.json()["error"]["message"]
        m = httpx.get(f"{url}/metrics", timeout=5).text  # nothing reports the engine's gauges now
        for series in ("twinserve_http_requests_in_flight", "twinserve_num_requests_running",
                       "twinserve_kv_cache_usage_perc"):
            assert f'{series}{{model_name="tiny-llama"}} 0.0' in m, series
        with pytest.raises(openai.InternalServerError) as e2:
            c.completions.create(model="tiny-llama", prompt="after", max_tokens=2)
        assert e2.value.status_code == 503
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert re.search(r"serving tiny-llama at", out), out
    assert _wait_gone(children, 5) == []
    assert not os.path.exists(info["ipc_dir"])
