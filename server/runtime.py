"""`serve()`: run one server in this process (API server) plus its children, until a signal.

Order: make the private IPC dir, bind the HTTP socket, start the engine workers
(``server_cfg.replicas``, one per replica) and wait for their ``Ready`` (replica 0's reports
max_model_len, EOS ids and the tokenizer path), start the tokenizer (which routes over the
replicas) and
detokenizer with those facts and wait for them, then serve HTTP with uvicorn. SIGINT/SIGTERM at
any point end in the same ``finally``: live requests fail with 503, every child is stopped
(SIGTERM, then SIGKILL), the IPC dir is removed. A monitor task marks the server down (503 on
/health, every live request failed) as soon as any child dies, except an engine replica while
another is alive: that one is taken out of rotation (`EngineClient.replica_down`).

`twinserve.server.serve` is the light entry module that runs this one in a child process;
`http_server.run_http` is the API server's part.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from typing import Any

from twinserve.core.config import scheduler_default
from twinserve.server.config import ServerConfig
from twinserve.server.detokenizer_worker import DetokenizerWorkerConfig
from twinserve.server.engine_worker import EngineWorkerConfig
from twinserve.server.ipc import IpcPaths
from twinserve.server.supervisor import Supervisor
from twinserve.server.tokenizer_worker import TokenizerWorkerConfig


def _raise_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _listen(host: str, port: int) -> socket.socket:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must say TCP: asyncio sets TCP_NODELAY on accepted connections only then (without it,
    # Nagle + delayed ACKs add ~40 ms to every response on a kept-alive connection)
    s = socket.socket(fam, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(2048)
    s.set_inheritable(False)
    return s


def _vocab_size(info: dict[str, Any], model_dir: str | None, fallback: int) -> int:
    if "vocab_size" in info:
        return int(info["vocab_size"])
    for d in (model_dir, info.get("tokenizer_path")):
        cfg = os.path.join(str(d), "config.json") if d else ""
        if cfg and os.path.exists(cfg):
            with open(cfg) as f:
                v = json.load(f).get("vocab_size")
            if isinstance(v, int):
                return v
    return fallback


def serve(engine_cfg: Any, server_cfg: ServerConfig, ready_file: str | None = None) -> None:
    """Run the server until SIGINT/SIGTERM (see the module docstring)."""
    server_cfg.validate()
    old = {s: signal.signal(s, _raise_exit) for s in (signal.SIGINT, signal.SIGTERM)}
    paths = IpcPaths.create()
    sup: Supervisor | None = None
    try:
        sup = Supervisor(paths)
        sock = _listen(server_cfg.host, server_cfg.port)
        port = sock.getsockname()[1]
        n = server_cfg.replicas
        engines = [sup.start("engine", r, "twinserve.server.engine_worker:run", EngineWorkerConfig(
            engine_cfg, server_cfg.engine_factory, server_cfg.queue_limit, server_cfg.stats_interval_s,
            replicas=n)) for r in range(n)]
        t0 = time.perf_counter()
        from twinserve.server.http_server import HttpSpec, ModelInfo, run_http  # overlaps the engine's start

        info = sup.wait_ready(engines, server_cfg.startup_timeout_s)["engine0"]
        t1 = time.perf_counter()
        tok_path = str(info["tokenizer_path"])
        model_dir = getattr(engine_cfg, "model", None)
        det = sup.start("detokenizer", 0, "twinserve.server.detokenizer_worker:run",
                        DetokenizerWorkerConfig(tok_path, n))
        vocab = _vocab_size(info, model_dir, 0)
        if vocab <= 0:
            raise RuntimeError("could not determine the model's vocabulary size (no config.json)")
        page_size = int(info.get("page_size", scheduler_default("page_size")))  # engines without a scheduler report none
        tok = sup.start("tokenizer", 0, "twinserve.server.tokenizer_worker:run",
                        TokenizerWorkerConfig(tok_path, int(info["max_model_len"]), vocab, n, server_cfg.router,
                                              dict(server_cfg.router_kwargs), page_size))
        sup.wait_ready([tok, det], server_cfg.startup_timeout_s)
        print(f"twinserve: {n} engine{'s' if n > 1 else ''} ready in {t1 - t0:.1f} s, tokenizer and "
              f"detokenizer {time.perf_counter() - t1:.1f} s later", flush=True)
        name = server_cfg.served_model_name or os.path.basename(os.path.normpath(str(model_dir or tok_path)))
        model = ModelInfo(name, str(model_dir or tok_path), int(info["max_model_len"]), int(time.time()))
        host = server_cfg.host if server_cfg.host not in ("0.0.0.0", "::") else "127.0.0.1"
        run_http(HttpSpec(sock, f"http://{host}:{port}", paths, sup, server_cfg, model,
                          info.get("stats") or {}, ready_file))
    finally:
        for sig in old:  # a second Ctrl-C must not interrupt the cleanup
            signal.signal(sig, signal.SIG_IGN)
        try:
            if sup is not None:
                sup.stop(server_cfg.shutdown_timeout_s)
        finally:
            paths.remove()
            for s, h in old.items():
                signal.signal(s, h)
