"""``twinserve-serve ... tp=2`` on CPU: one HTTP front, the engine worker (rank 0, which holds
the scheduler) and its rank-1 process.

- greedy /generate outputs equal offline TP=1 token for token, and so does a seeded sampled one;
- SIGKILL on rank 1 while a stream is in flight: the stream ends with an error, /health turns
  503 within a bounded time, and SIGTERM still stops every process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx

from twinserve.core.sampling import SamplingParams
from twinserve.engine.llm import LLM
from twinserve.engine.testing import random_prompts

BOUND_S = 15.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                pass
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return ""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait(cond, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def _generate(url: str, ids: list[int], **kw) -> list[int]:
    body = {"input_ids": ids, "max_tokens": 16, "temperature": 0.0, "ignore_eos": True, **kw}
    r = httpx.post(f"{url}/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["output_ids"]


def test_serve_tp2_matches_tp1_then_survives_a_dead_rank(tiny_dir):
    model = str(tiny_dir("tiny-llama"))
    prompts = random_prompts([7, 30, 55], seed=9)
    seeded = SamplingParams(temperature=0.8, top_k=40, max_tokens=16, ignore_eos=True, seed=123)
    with LLM(model, device="cpu", cpu_kv_tokens=4096) as ref:
        want = [o.token_ids for o in ref.generate(prompts, SamplingParams(temperature=0.0, max_tokens=16,
                                                                          ignore_eos=True), use_tqdm=False)]
        want_seeded = ref.generate([prompts[1]], seeded, use_tqdm=False)[0].token_ids

    port = _free_port()
    cmd = [sys.executable, "-c", "from twinserve.server.launch import main; main()",
           f"model.path={model}", f"server.port={port}", "tp=2", "backend.device=cpu",
           "model.max_model_len=512", "backend.cpu_kv_tokens=8192", "server.debug=true"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}"
    pids: list[int] = []
    try:
        assert _wait(lambda: proc.poll() is not None or _healthy(url), 120), "twinserve-serve did not come up"
        assert proc.poll() is None, proc.stdout.read()
        engine0 = httpx.get(f"{url}/debug/engine", timeout=5).json()["pids"]["engine0"]
        ranks = [p for p in _children(engine0) if "twinserve.engine.tp.follower" in _cmdline(p)]
        assert len(ranks) == 1, "expected one rank-1 process under the engine worker"
        pids = [engine0, ranks[0]]

        assert [_generate(url, p) for p in prompts] == want
        assert _generate(url, prompts[1], temperature=0.8, top_k=40, seed=123) == want_seeded

        body = {"input_ids": prompts[0], "max_tokens": 400, "temperature": 0.0, "ignore_eos": True,
                "stream": True}
        with httpx.stream("POST", f"{url}/generate", json=body, timeout=60) as s:
            lines = s.iter_lines()
            first = next(ln for ln in lines if ln.startswith("data: "))
            assert "output_ids" in first
            t0 = time.monotonic()
            os.kill(ranks[0], signal.SIGKILL)
            rest = [ln for ln in lines if ln.startswith("data: ")]
        assert time.monotonic() - t0 < BOUND_S
        assert rest[-1] == "data: [DONE]"
        err = json.loads(rest[-2][6:])
        assert "error" in err, rest[-3:]
        assert _wait(lambda: httpx.get(f"{url}/health", timeout=5).status_code == 503, BOUND_S)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "tensor-parallel rank 1" in out, out[-3000:]  # rank 0's error names the dead rank
    assert all(_wait(lambda p=p: _gone(p), 10) for p in pids)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
