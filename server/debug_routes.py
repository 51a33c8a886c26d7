"""``/debug/*``: internals for tests and operators, served only with ``server.debug=true``."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request


def register_debug_routes(app: FastAPI) -> None:
    @app.get("/debug/engine")
    async def debug_engine(request: Request) -> dict[str, Any]:
        """The engine's latest gauges (KV usage included), the API server's live requests, the
        server's process ids and IPC directory (tests check that shutdown leaves neither)."""
        st = request.app.state.ts
        return {"stats": st.client.stats, "stats_time": st.client.stats_time,
                "in_flight": len(st.client.live), "pids": st.pids, "ipc_dir": st.ipc_dir,
                "stalled": st.client.heartbeat.stalled, "down": st.client.down}
