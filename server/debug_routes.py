"""``/debug/*``: internals for tests and operators, served only with ``server.debug=true``."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

from fastapi import FastAPI, Request


def register_debug_routes(app: FastAPI) -> None:
    @app.get("/debug/engine")
    async def debug_engine(request: Request) -> dict[str, Any]:
        """The engine's latest gauges (KV usage included; merged over the replicas, and each
        replica's under ``replicas``), the API server's live requests, the server's process ids
        and IPC directory (tests check that shutdown leaves neither), the replicas out of rotation."""
        st = request.app.state.ts
        return {"stats": st.client.stats, "stats_time": st.client.stats_time,
                "replicas": {str(k): v for k, v in sorted(st.client.replica_stats.items())},
                "replicas_down": {str(k): v for k, v in sorted(st.client.replicas_down.items())},
                "in_flight": len(st.client.live), "pids": st.pids, "ipc_dir": st.ipc_dir,
                "stalled": st.client.heartbeat.stalled, "down": st.client.down, "http_stack": http_stack()}


def http_stack() -> dict[str, str]:
    """The API server's event loop and HTTP parser: ``uvloop`` / ``asyncio`` and ``httptools`` /
    ``h11`` (uvicorn takes httptools when it is installed; ``uvicorn[standard]`` brings both)."""
    loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
    return {"loop": loop, "http": "httptools" if importlib.util.find_spec("httptools") else "h11"}
