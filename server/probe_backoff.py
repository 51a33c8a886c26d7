"""`ProbeBackoff`: when a server that stopped answering is asked again whether it is back."""

from __future__ import annotations

import math
from dataclasses import dataclass

PROBE_FIRST_S = 1.0  # the first probe of a URL that went down, this long after
PROBE_MAX_S = 10.0  # the longest wait between two probes


@dataclass(slots=True)
class ProbeBackoff:
    """Exponential back-off of the health probes of one down URL.

    `start` (the URL just went down) schedules the first probe ``first_s`` later; each `failed`
    probe doubles the wait, up to ``max_s``; `reset` (the URL is back) stops probing.
    Invariant: while probing, ``first_s <= wait <= max_s``; ``next_at`` is infinite when not probing.
    """

    first_s: float = PROBE_FIRST_S
    max_s: float = PROBE_MAX_S
    wait: float = 0.0
    next_at: float = math.inf

    def __post_init__(self) -> None:
        if not (0 < self.first_s <= self.max_s):
            raise ValueError(f"probe back-off needs 0 < first_s <= max_s, got {self.first_s}, {self.max_s}")

    def start(self, now: float) -> None:
        self.wait = self.first_s
        self.next_at = now + self.wait

    def failed(self, now: float) -> None:
        self.wait = min(self.max_s, 2.0 * self.wait)
        self.next_at = now + self.wait

    def reset(self) -> None:
        self.wait = 0.0
        self.next_at = math.inf

    def due(self, now: float) -> bool:
        return now >= self.next_at
