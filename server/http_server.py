"""`run_http`: the API server's event loop (uvicorn + the app + the pipeline client).

Imported by `runtime.serve` only after the engine worker has been spawned, so that these heavy
imports (fastapi, uvicorn, prometheus) overlap with the engine's start-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

import uvicorn
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from twinserve.engine.heap import settle_heap
from twinserve.server.api_server import GENERATION_ROUTES, AppState, ModelInfo, build_app, cancel_tasks
from twinserve.server.config import ServerConfig
from twinserve.server.engine_client import EngineClient
from twinserve.server.guards import guarded
from twinserve.server.ipc import IpcPaths
from twinserve.server.metrics import ServerMetrics
from twinserve.server.supervisor import Supervisor


class _ExitHook:
    """Lets uvicorn's signal handler fail live requests at once instead of after the grace time."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.fn: Callable[[], None] | None = None

    def fire(self) -> None:
        if self.loop is not None and self.fn is not None:
            self.loop.call_soon_threadsafe(self.fn)


class _Uvicorn(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, hook: _ExitHook) -> None:
        super().__init__(config)
        self._hook = hook

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        self._hook.fire()


async def _monitor(sup: Supervisor, client: EngineClient) -> None:
    """Fail everything as soon as any child has died or the engine's heartbeat stops; an engine
    replica that died while another is alive is taken out of rotation instead."""
    engines = [c for c in sup.children if c.role == "engine"]
    while True:
        await asyncio.sleep(0.2)
        dead = sup.dead()
        if dead and client.down is None:
            fatal = [c for c in dead if c.role != "engine"]
            if fatal or all(c.process.exitcode is not None for c in engines):
                c = (fatal or dead)[0]
                client.fail_all(503, f"the {c.role} worker (rank {c.rank}) died with exit code "
                                     f"{c.process.exitcode}; the server must be restarted")
            else:
                for c in dead:
                    await client.replica_down(c.rank, f"engine replica {c.rank} died with exit code "
                                                      f"{c.process.exitcode}; it is out of rotation")
        stalled = client.heartbeat.check() if client.down is None else None
        if stalled is not None:
            await client.fail_stalled(stalled)


def _write_ready(path: str, info: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.replace(tmp, path)


@dataclass(slots=True)
class HttpSpec:
    """What the API server needs from the launcher."""

    sock: socket.socket
    url: str
    paths: IpcPaths
    sup: Supervisor
    cfg: ServerConfig
    model: ModelInfo
    engine_stats: dict[str, Any]
    ready_file: str | None


def run_http(spec: HttpSpec) -> None:
    """Serve until uvicorn sees SIGINT/SIGTERM; live requests then fail with 503 at once."""
    hook = _ExitHook()

    @contextlib.asynccontextmanager
    async def make_state() -> AsyncIterator[AppState]:
        metrics = ServerMetrics(spec.model.name)
        metrics.update_engine(spec.engine_stats)
        client = EngineClient(spec.paths, metrics, spec.cfg.request_timeout_s,
                              spec.cfg.engine_stall_s, spec.cfg.retry_after_s)
        tasks = [asyncio.create_task(client.run_reader()), asyncio.create_task(_monitor(spec.sup, client))]
        hook.loop = asyncio.get_running_loop()
        hook.fn = lambda: client.fail_all(503, "the server is shutting down")
        pids = {"api": os.getpid(), **spec.sup.pids()}
        if spec.ready_file:
            port = spec.sock.getsockname()[1]
            _write_ready(spec.ready_file, {"url": spec.url, "port": port, "pid": os.getpid(),
                                           "children": spec.sup.pids(), "ipc_dir": spec.paths.root})
        print(f"twinserve: serving {spec.model.name} at {spec.url} "
              f"(max_model_len {spec.model.max_model_len})", flush=True)
        settle_heap()  # started: later collections scan only the requests' objects
        try:
            yield AppState(client, metrics, spec.model, pids, spec.paths.root, spec.cfg.max_n, spec.cfg.replicas)
        finally:
            client.fail_all(503, "the server is shutting down")
            await cancel_tasks(*tasks)
            client.close()

    app = build_app(make_state)
    front = guarded(app, spec.cfg, GENERATION_ROUTES)
    config = uvicorn.Config(front, log_level=spec.cfg.log_level, timeout_graceful_shutdown=3,
                            lifespan="on", access_log=False, proxy_headers=False)
    # uvicorn's proxy-header handling (X-Forwarded-*, from the hosts it trusts) stays in front of
    # the app's own routes, the only readers of the client address and scheme
    front.fallback = ProxyHeadersMiddleware(app, trusted_hosts=config.forwarded_allow_ips)
    _Uvicorn(config, hook).run(sockets=[spec.sock])
