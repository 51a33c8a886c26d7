"""`server` backend: replay against an OpenAI-compatible server through the bench client."""

from __future__ import annotations

from typing import Any

import pandas as pd

from twinserve.core.metrics import requests_frame
from twinserve.core.workload import Workload
from twinserve.experiments.backends.base import BACKENDS, Backend, BackendResult, RunContext


def _as_requests(x: Any) -> pd.DataFrame:
    if isinstance(x, pd.DataFrame):
        return x
    return requests_frame(list(x), 0)


@BACKENDS.register("server")
class ServerBackend(Backend):
    """Calls ``twinserve.server.bench_client.run_bench(cfg, workload)`` (imported when run).

    Accepted results: a requests DataFrame, a list of Req, or a tuple (requests, steps DataFrame
    or None[, meta dict]). A server shows no steps, so steps.parquet is usually empty.
    """

    def run(self, ctx: RunContext, workload: Workload) -> BackendResult:
        from twinserve.server.bench_client import run_bench

        out = run_bench(ctx.cfg, workload)
        steps: pd.DataFrame | None = None
        meta: dict[str, Any] = {}
        if isinstance(out, tuple):
            reqs = _as_requests(out[0])
            steps = out[1] if len(out) > 1 else None
            meta = dict(out[2]) if len(out) > 2 and out[2] else {}
        else:
            reqs = _as_requests(out)
        return BackendResult(reqs, steps if steps is not None else pd.DataFrame(), [], meta)
