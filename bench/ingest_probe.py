"""`IngestProbeEngine`: an engine (the real one, or `StubEngine` for a `StubEngineConfig`), plus the wall-clock times at which requests reach it.

Serve it with ``engine_factory="twinserve.bench.ingest_probe:IngestProbeEngine"``; its
``stats()`` (so ``/debug/engine``) then carry the current *window*: the adds since the first
add that came more than `WINDOW_GAP_S` after the one before it. A burst sent after a longer
pause is one window, so ``ingest_last_add - <client's first send>`` is how long the whole burst
took to reach the engine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from twinserve.bench.stub_engine import StubEngine, StubEngineConfig

WINDOW_GAP_S = 0.25  # an add this long after the one before it starts a window


@dataclass(slots=True)
class IngestWindow:
    """Adds since the latest gap of more than `WINDOW_GAP_S` between two adds: how many, and the
    first and last ``time.time()``."""

    adds: int = 0
    first_add: float = 0.0
    last_add: float = 0.0

    def record(self, t: float) -> None:
        if self.adds == 0 or t - self.last_add > WINDOW_GAP_S:
            self.adds, self.first_add = 0, t
        self.adds += 1
        self.last_add = t

    def stats(self) -> dict[str, float]:
        return {"ingest_adds": float(self.adds), "ingest_first_add": self.first_add,
                "ingest_last_add": self.last_add}


class IngestProbeEngine:
    """Delegates everything to the engine built from ``cfg`` (`StubEngine` for a
    `StubEngineConfig`, else `Engine`); ``add`` also records its time in
    an `IngestWindow`, which ``stats()`` reports. Behaviour is otherwise the engine's own."""

    def __init__(self, cfg: Any) -> None:
        if isinstance(cfg, StubEngineConfig):
            self._engine: Any = StubEngine(cfg)
        else:
            from twinserve.engine.engine import Engine

            self._engine = Engine(cfg)
        self._window = IngestWindow()

    def add(self, req: Any) -> None:
        self._engine.add(req)
        self._window.record(time.time())

    def stats(self) -> dict[str, Any]:
        return {**self._engine.stats(), **self._window.stats()}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)
