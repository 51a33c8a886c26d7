"""`EngineHeartbeat`: the API server's view of whether the engine loop is still turning.

The engine worker's loop publishes ``EngineStats`` at least every ``stats_interval_s``, idle or
busy, from the loop itself (a hung step, a deadlock or a stopped process sends nothing); the
detokenizer forwards them. Each one that reaches the API server is a beat.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class EngineHeartbeat:
    """Invariant: ``stalled`` is set (the reason) from the first `check` that finds no beat for
    ``stall_s`` seconds until the next `beat`. ``stall_s=None`` never stalls."""

    stall_s: float | None
    last: float = field(default_factory=time.monotonic)
    stalled: str | None = None

    def beat(self, now: float | None = None) -> bool:
        """Record a beat; True if it ends a stall."""
        self.last = time.monotonic() if now is None else now
        ended = self.stalled is not None
        self.stalled = None
        return ended

    def check(self, now: float | None = None) -> str | None:
        """The reason, the first time a stall is seen (None otherwise, also while it lasts)."""
        if self.stall_s is None or self.stalled is not None:
            return None
        quiet = (time.monotonic() if now is None else now) - self.last
        if quiet < self.stall_s:
            return None
        self.stalled = (f"the engine has sent no heartbeat for {quiet:.1f} s (server.engine_stall_s="
                        f"{self.stall_s:g}): it is stalled; in-flight requests were failed")
        return self.stalled
