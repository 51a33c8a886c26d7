"""`twinserve-serve` on a real model (SmolLM2-135M-Instruct) answers a chat request in English
through the model's chat template, on the CPU."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx

from helpers_server import free_port


def test_twinserve_serve_answers_a_chat_in_english(real_model_dir, tmp_path):
    port = free_port()
    log = open(tmp_path / "serve.log", "wb")
    cmd = [sys.executable, "-m", "twinserve.server.launch", f"model.path={real_model_dir}",
           "backend.device=cpu", "backend.cpu_kv_tokens=4096", "model.max_model_len=2048",
           f"server.port={port}", "server.served_model_name=smollm2"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text(errors="replace")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "server not healthy in 300 s"
            time.sleep(0.2)
        body = {"model": "smollm2", "temperature": 0, "max_tokens": 24,
                "messages": [{"role": "user", "content": "What is the capital of France?"}]}
        r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert "Paris" in choice["message"]["content"], choice
        assert choice["finish_reason"] == "stop", choice  # the model ends its turn: EOS from the checkpoint
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
