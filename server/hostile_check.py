"""The server's client checks under hostile input, against one real model (CPU or GPU):

    python -m twinserve.server.hostile_check --model DIR [--device cuda] [--out checks.json]
    # CPU, tiny model:
    python -m twinserve.server.hostile_check --model /tmp/tiny --device cpu --threads 1 --max-model-len 4096

Starts one server with an API key, ``max_body_bytes`` of 32 MiB (so that a 10 MB prompt reaches
the prompt checks) and ``engine_stall_s`` of 2 s, then checks, with httpx only:

- ``bad_text``: lone surrogates in prompt / messages / name / model are 400s, the in-flight
  gauge returns to 0;
- ``auth``: no key or a wrong key is 401, the key is 200; ``/debug/engine`` is 404; ``/v1/models``
  names no path;
- ``body_limit``: a body over the limit is 413;
- ``huge_prompt``: a 10 MB prompt, and one just under the character bound (counted in chunks),
  each sent while 1-token requests run: their latency against the idle one (bar: within 1 s)
  and the tokenizer process's resident memory before, at its peak and after (bar: back within
  100 MB of the start);
- ``metrics``: the vLLM-style series are present with a ``model_name`` label;
- ``stall``: the engine process is SIGSTOPped with a stream in flight: the stream ends with an
  error, ``/health`` is 503, then SIGCONT and ``/health`` is 200 again.

Prints one line per check and writes every number as JSON (``--out``); exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import threading
import time
from typing import Any, Callable

import httpx

KEY = "hostile-check-key"
AUTH = {"Authorization": f"Bearer {KEY}", "content-type": "application/json"}
BODY_LIMIT = 32 * 1024 * 1024
STALL_S = 2.0


def _rss_mb(pid: int) -> dict[str, float]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            k, _, v = ln.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) / 1024
    return out


def _post(url: str, body: bytes | dict, timeout: float = 120.0) -> tuple[int, float, dict]:
    t0 = time.perf_counter()
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(url, content=data, headers=AUTH, timeout=timeout)
    try:
        js = r.json()
    except ValueError:
        js = {"text": r.text[:200]}
    return r.status_code, time.perf_counter() - t0, js


def _metric(url: str, name: str) -> float | None:
    for ln in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if ln.startswith(name + "{"):
            return float(ln.rsplit(" ", 1)[1])
    return None


def check_bad_text(url: str) -> dict[str, Any]:
    bodies = ['{"prompt": "ab\\ud800cd", "max_tokens": 2}',
              '{"messages": [{"role": "user", "content": "x\\ud800"}], "max_tokens": 2}',
              '{"messages": [{"role": "user", "content": "x", "name": "\\udfff"}], "max_tokens": 2}',
              '{"prompt": "x", "model": "m\\ud800", "max_tokens": 2}']
    eps = ["/v1/completions", "/v1/chat/completions", "/v1/chat/completions", "/v1/completions"]
    codes = [_post(f"{url}{ep}", b.encode())[0] for ep, b in zip(eps, bodies)]
    in_flight = _metric(url, "twinserve_http_requests_in_flight")
    return {"ok": all(c == 400 for c in codes) and in_flight == 0.0, "statuses": codes, "in_flight": in_flight}


def check_auth(url: str, model_dir: str) -> dict[str, Any]:
    body = json.dumps({"prompt": "x", "max_tokens": 1}).encode()
    none = httpx.post(f"{url}/v1/completions", content=body, timeout=30).status_code
    wrong = httpx.post(f"{url}/v1/completions", content=body, timeout=30,
                       headers={"Authorization": "Bearer nope"}).status_code
    right = _post(f"{url}/v1/completions", body)[0]
    debug = httpx.get(f"{url}/debug/engine", headers=AUTH, timeout=10).status_code
    models = httpx.get(f"{url}/v1/models", headers=AUTH, timeout=10).text
    ok = (none, wrong, right, debug) == (401, 401, 200, 404) and os.path.abspath(model_dir) not in models
    return {"ok": ok, "no_key": none, "wrong_key": wrong, "key": right, "debug": debug,
            "models_show_path": os.path.abspath(model_dir) in models}


def check_body_limit(url: str) -> dict[str, Any]:
    status, s, _ = _post(f"{url}/v1/completions", {"prompt": "a" * (BODY_LIMIT + 1), "max_tokens": 1})
    return {"ok": status == 413, "status": status, "seconds": s}


def _during(url: str, big: bytes, tok_pid: int, idle_s: float) -> dict[str, Any]:
    """Send ``big`` and, meanwhile, 1-token requests; the slowest of them against ``idle_s``."""
    res: dict[str, Any] = {}
    peak = [0.0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _rss_mb(tok_pid)["VmRSS"])
            time.sleep(0.01)

    def send() -> None:
        res["status"], res["seconds"], js = _post(f"{url}/v1/completions", big)
        res["error"] = (js.get("error") or {}).get("message", "")[:160]

    before = _rss_mb(tok_pid)["VmRSS"]
    w = threading.Thread(target=watch)
    w.start()
    t = threading.Thread(target=send)
    t.start()
    small = []
    while t.is_alive() or not small:
        small.append(_post(f"{url}/v1/completions", {"prompt": "hi", "max_tokens": 1})[1])
    t.join()
    time.sleep(0.5)
    stop.set()
    w.join()
    after = _rss_mb(tok_pid)["VmRSS"]
    worst = max(small)
    return {**res, "concurrent_requests": len(small), "concurrent_max_s": worst,
            "concurrent_median_s": statistics.median(small), "idle_s": idle_s,
            "latency_bar_ok": worst <= idle_s + 1.0, "tok_rss_mb": {"before": before, "peak": peak[0],
                                                                   "after": after},
            "memory_bar_ok": after - before <= 100.0}


def check_huge_prompt(url: str, tok_pid: int, model_dir: str, max_model_len: int) -> dict[str, Any]:
    from twinserve.server.tokenization import TextTokenizer

    idle = statistics.median(_post(f"{url}/v1/completions", {"prompt": "hi", "max_tokens": 1})[1]
                             for _ in range(7))
    bound = max_model_len * TextTokenizer(model_dir).longest_token_chars()
    word = "lorem ipsum "
    ten_mb = json.dumps({"prompt": word * (10_000_000 // len(word)), "max_tokens": 1}).encode()
    under = json.dumps({"prompt": (word * (bound // len(word) + 1))[: bound - 1], "max_tokens": 1}).encode()
    cases = {"10MB": _during(url, ten_mb, tok_pid, idle),
             "under_char_bound": _during(url, under, tok_pid, idle)}
    ok = all(c["status"] == 400 and c["latency_bar_ok"] and c["memory_bar_ok"] for c in cases.values())
    return {"ok": ok, "char_bound": bound, "prompt_bytes": {"10MB": len(ten_mb), "under_char_bound": len(under)},
            **cases}


def check_metrics(url: str) -> dict[str, Any]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    names = ["twinserve_num_preemptions_total", "twinserve_prefix_cache_queries_total",
             "twinserve_prefix_cache_hits_total", "twinserve_request_queue_time_seconds_bucket",
             "twinserve_request_prefill_time_seconds_bucket", "twinserve_request_decode_time_seconds_bucket",
             "twinserve_request_aborted_total", "twinserve_http_requests_total",
             "twinserve_time_to_first_token_seconds_bucket"]
    missing = [n for n in names if n not in text]
    unlabelled = [ln for ln in text.splitlines() if ln.startswith("twinserve_") and "model_name=" not in ln]
    return {"ok": not missing and not unlabelled, "missing": missing, "unlabelled": unlabelled[:5]}


def check_stall(url: str, engine_pid: int, max_model_len: int) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def stream() -> None:
        body = {"prompt": "x", "max_tokens": max_model_len - 8, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{url}/v1/completions", json=body, headers=AUTH, timeout=60) as s:
            last = ""
            for ln in s.iter_lines():
                if ln.startswith("data: {"):
                    last = ln
                    out.setdefault("first", time.monotonic())
            out["status"], out["last"], out["end"] = s.status_code, last[:200], time.monotonic()

    t = threading.Thread(target=stream)
    t.start()
    deadline = time.monotonic() + 60
    while "first" not in out and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(engine_pid, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        t.join(STALL_S + 10)
        health = httpx.get(f"{url}/health", timeout=10).status_code
    finally:
        os.kill(engine_pid, signal.SIGCONT)
    back = None
    while time.monotonic() - t0 < 30:
        if httpx.get(f"{url}/health", timeout=10).status_code == 200:
            back = time.monotonic() - t0
            break
        time.sleep(0.05)
    failed_after = out["end"] - t0 if "end" in out else None
    ok = (failed_after is not None and "heartbeat" in out.get("last", "") and health == 503
          and back is not None)
    return {"ok": ok, "stall_s": STALL_S, "stream_failed_after_s": failed_after, "health": health,
            "healthy_again_after_s": back, "status": out.get("status"), "last_event": out.get("last")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m twinserve.server.hostile_check",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for the server")
    ap.add_argument("--engine-kwargs", default="{}", help="extra EngineConfig fields as JSON")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    from twinserve.engine.config import EngineConfig
    from twinserve.server.launch import start_server

    env = {"TWINSERVE_API_KEY": KEY, **({"OMP_NUM_THREADS": str(a.threads)} if a.threads else {})}
    ecfg = EngineConfig(model=a.model, device=a.device, max_model_len=a.max_model_len,
                        **json.loads(a.engine_kwargs))
    results: dict[str, Any] = {}
    with start_server(ecfg, max_body_bytes=BODY_LIMIT, engine_stall_s=STALL_S, env=env) as h:
        url = h.url
        checks: dict[str, Callable[[], dict[str, Any]]] = {
            "bad_text": lambda: check_bad_text(url),
            "auth": lambda: check_auth(url, a.model),
            "body_limit": lambda: check_body_limit(url),
            "huge_prompt": lambda: check_huge_prompt(url, h.children["tokenizer0"], a.model, a.max_model_len),
            "metrics": lambda: check_metrics(url),
            "stall": lambda: check_stall(url, h.children["engine0"], a.max_model_len),
        }
        for name, fn in checks.items():
            try:
                results[name] = fn()
            except Exception as e:  # one broken check must not hide the others' numbers
                results[name] = {"ok": False, "exception": f"{type(e).__name__}: {e}"}
            print(f"{name}: {'PASS' if results[name]['ok'] else 'FAIL'} {json.dumps(results[name])}", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
