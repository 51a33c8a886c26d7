"""How long a burst of concurrent requests takes to reach the engine through the HTTP server.

    twinserve-bench burst-ingest --model /tmp/tiny --device cpu --threads 1 --requests 256
    twinserve-bench burst-ingest --model /tmp/tiny --stub-step-ms 5 --requests 256   # no model

Starts a server whose engine is `ingest_probe.IngestProbeEngine` (the real engine, or with
``--stub-step-ms`` a `stub_engine.StubEngine` whose steps sleep instead of computing, which
leaves the CPU to the server as a GPU would; recording when each request reaches it), sends ``--requests`` streaming ``/v1/completions`` calls at once (token
id prompts of ``--prompt-len``, ``max_tokens = --output-len``) and reports, in ms from the
client's first send (wall clock; every process runs on this host):

- ``client_last_call``: the last request handed to the HTTP client (the client's own cost);
- ``engine_first_add`` / ``engine_last_add``: the first and last request added to the engine:
  ``engine_last_add`` is the burst's *ingestion time*, ``/ requests`` its cost per request;
- ``headers_p50`` / ``headers_max``: responses whose headers arrived (the engine's ``Accepted``
  made it back), and ``ttft_mean`` / ``done``: first token, and the last stream's end.

The client (bench_transport, on uvloop when installed) opens its connections before the burst
unless ``--cold``. Each repeat waits for the server to be idle, so every burst is one window of
the probe.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from twinserve.bench.ingest_probe import WINDOW_GAP_S

PROBE = "twinserve.bench.ingest_probe:IngestProbeEngine"


@dataclass(slots=True)
class BurstTimes:
    """One request's wall-clock times (``time.time()``): handed to the client, headers, first
    data chunk, end of stream."""

    sent: float = 0.0
    headers: float = float("nan")
    first: float = float("nan")
    done: float = float("nan")
    error: str | None = None


@dataclass(slots=True)
class BurstResult:
    """One burst, in ms from the first send (see the module docstring)."""

    requests: int
    client_last_call: float
    engine_first_add: float
    engine_last_add: float
    per_request_ms: float
    headers_p50: float
    headers_max: float
    ttft_mean: float
    done: float
    errors: int = 0
    cpu_ms: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


async def _one(client: Any, body: dict[str, Any], t: BurstTimes) -> None:
    t.sent = time.time()
    try:
        async with client.stream("/v1/completions", body) as chunks:
            t.headers = time.time()
            async for raw in chunks:
                if t.first != t.first and b"data:" in raw:
                    t.first = time.time()
        t.done = time.time()
    except Exception as e:  # reported in the result, not raised: the burst's others still count
        t.error = f"{type(e).__name__}: {e}"


async def _burst(url: str, transport: str, bodies: list[bytes], warm: bool,
                 on_start: Callable[[], None]) -> list[BurstTimes]:
    """Send ``bodies`` at once (``on_start()`` just before, after the warm connections)."""
    from twinserve.server.bench_client import _warm
    from twinserve.server.bench_transport import TRANSPORTS, transport_name

    async with TRANSPORTS.create(transport_name(transport), base_url=url, timeout_s=600.0,
                                 max_connections=100_000, headers={}) as client:
        await client.get_json("/v1/models")
        if warm:
            await _warm([client], None, len(bodies))
        times = [BurstTimes() for _ in bodies]
        on_start()
        await asyncio.gather(*(_one(client, b, t) for b, t in zip(bodies, times)))
    return times


def _engine_stats(url: str) -> dict[str, Any]:
    import httpx

    return httpx.get(f"{url}/debug/engine", timeout=10).json()


def _wait_idle(url: str, want_adds: int | None, after: float = 0.0, timeout_s: float = 120.0) -> dict[str, Any]:
    """The engine's stats once it is idle, from a snapshot taken after ``after`` (``time.time()``:
    the engine worker publishes its stats periodically, so an earlier snapshot may still hold the
    previous window) with at least ``want_adds`` adds in its window."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = _engine_stats(url)
        st = info["stats"]
        idle = info["in_flight"] == 0 and not st.get("running") and not st.get("waiting")
        fresh = (info.get("stats_time") or 0.0) > after
        if idle and fresh and (want_adds is None or st.get("ingest_adds", 0) >= want_adds):
            return st
        if time.monotonic() > deadline:
            raise RuntimeError(f"server not idle after {timeout_s} s: {info}")
        time.sleep(0.05)


def run_burst(url: str, n: int, prompt_len: int, output_len: int, vocab: int, transport: str,
              seed: int, pids: dict[str, int] | None = None, warm: bool = True) -> BurstResult:
    """One burst of ``n`` requests (``warm``: over ``n`` connections opened before it; else each
    request opens its own); ``pids`` (name -> pid): the processes whose CPU time the result
    reports (``cpu_ms``, with this client's as ``client``)."""
    import numpy as np

    from twinserve.bench.http_overhead import _cpu_s
    from twinserve.server.bench_transport import run_client

    rng = np.random.default_rng(seed)
    bodies = [json.dumps({"prompt": rng.integers(0, vocab, prompt_len).tolist(), "max_tokens": output_len,
                          "temperature": 0.0, "ignore_eos": True, "stream": True,
                          "stream_options": {"include_usage": True}}).encode() for _ in range(n)]
    _wait_idle(url, None)
    time.sleep(2 * WINDOW_GAP_S)  # the burst opens a new window of the probe
    before: dict[str, float] = {}

    def start() -> None:
        before.update({k: _cpu_s(p) for k, p in (pids or {}).items()}, client=time.process_time())

    times = run_client(_burst(url, transport, bodies, warm, start))
    cpu = {k: 1e3 * (_cpu_s(p) - before[k]) for k, p in (pids or {}).items()}
    cpu["client"] = 1e3 * (time.process_time() - before["client"])
    st = _wait_idle(url, n, after=max((t.done for t in times if t.done == t.done), default=time.time()))
    t0 = min(t.sent for t in times)
    ms = lambda x: 1e3 * (x - t0)  # noqa: E731
    ok = [t for t in times if t.error is None]
    heads = sorted(ms(t.headers) for t in ok)
    return BurstResult(
        n, ms(max(t.sent for t in times)), ms(st["ingest_first_add"]), ms(st["ingest_last_add"]),
        ms(st["ingest_last_add"]) / n, heads[len(heads) // 2] if heads else float("nan"),
        heads[-1] if heads else float("nan"),
        statistics.fmean(ms(t.first) for t in ok) if ok else float("nan"),
        max(ms(t.done) for t in ok) if ok else float("nan"), len(times) - len(ok), cpu,
        {"first_error": next((t.error for t in times if t.error), None), "window_adds": st["ingest_adds"]})


def _table(results: list[BurstResult]) -> str:
    keys = ("client_last_call", "engine_first_add", "engine_last_add", "per_request_ms", "headers_p50",
            "headers_max", "ttft_mean", "done")
    lines = [f"{'run':<5}{'requests':>9}" + "".join(f"{k:>18}" for k in keys) + f"{'errors':>8}"]
    for i, r in enumerate(results):
        lines.append(f"{i:<5}{r.requests:>9}" + "".join(f"{getattr(r, k):>18.2f}" for k in keys)
                     + f"{r.errors:>8}")
    med = {k: statistics.median(getattr(r, k) for r in results) for k in keys}
    lines.append(f"{'med':<5}{results[0].requests:>9}" + "".join(f"{med[k]:>18.2f}" for k in keys))
    cpu = {k: statistics.median(r.cpu_ms[k] for r in results) for k in results[0].cpu_ms}
    lines.append("CPU ms per burst (median): " + ", ".join(f"{k} {v:.0f}" for k, v in cpu.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[BurstResult]:
    ap = argparse.ArgumentParser(prog="twinserve-bench burst-ingest", description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="model dir (twinserve-make-model writes one)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--load-format", default="safetensors")
    ap.add_argument("--max-model-len", type=int, default=1024)
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--stub-step-ms", type=float, default=None,
                    help="serve a StubEngine whose steps sleep this long instead of the model")
    ap.add_argument("--transport", default="auto", help="bench client transport: httpx, aiohttp, auto")
    ap.add_argument("--cold", action="store_true",
                    help="every request opens its connection during the burst (default: opened before)")
    ap.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of the server's processes")
    ap.add_argument("--engine-kwargs", default='{"cpu_kv_tokens": 65536}', help="extra EngineConfig fields (JSON)")
    ap.add_argument("--py-spy", default=None, metavar="DIR",
                    help="sample every server process with py-spy during the bursts (DIR/burst-{process}.txt)")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    a = ap.parse_args(argv)

    import contextlib

    from twinserve.bench.py_spy import py_spy_record
    from twinserve.bench.stub_engine import StubEngineConfig
    from twinserve.engine.config import EngineConfig
    from twinserve.server.launch import start_server

    env = {"OMP_NUM_THREADS": str(a.threads)} if a.threads else None
    if a.stub_step_ms is not None:
        ecfg: Any = StubEngineConfig(a.model, a.max_model_len, a.stub_step_ms / 1e3)
    else:
        ecfg = EngineConfig(model=a.model, device=a.device, load_format=a.load_format,
                            max_model_len=a.max_model_len, **json.loads(a.engine_kwargs))
    with open(os.path.join(a.model, "config.json")) as f:
        vocab = int(json.load(f)["vocab_size"])
    with start_server(ecfg, queue_limit=None, request_timeout_s=None, debug=True, engine_factory=PROBE,
                      env=env) as h:
        run_burst(h.url, min(16, a.requests), a.prompt_len, a.output_len, vocab, a.transport, 99)  # warm-up
        pids = _engine_stats(h.url)["pids"]
        spy = py_spy_record(pids, a.py_spy, "burst") if a.py_spy else contextlib.nullcontext()
        with spy:
            results = [run_burst(h.url, a.requests, a.prompt_len, a.output_len, vocab, a.transport, i, pids, not a.cold)
                       for i in range(a.repeats)]
    print(f"burst of {a.requests} requests (prompt {a.prompt_len}, output {a.output_len}), ms from the first send:")
    print(_table(results))
    if a.out:
        with open(a.out, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=2)
    return results


if __name__ == "__main__":
    main()
