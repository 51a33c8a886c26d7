"""`FaultHook`: faults a test injects into one follower rank (off unless ``TWINSERVE_TP_FAULT`` is set).

``TWINSERVE_TP_FAULT="rank=1,sleep_step=3,sleep_s=30"`` makes rank 1 sleep 30 s at the start of
the forward of step 3 (1-based); ``"rank=1,capture=reverse"`` makes rank 1 follow its capture
schedule with each kind's sizes backwards. The follower reads the variable at startup (it inherits rank 0's
environment); unset, every hook is a no-op.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, fields
from typing import Sequence

from twinserve.core.capture_schedule import CaptureItem

ENV = "TWINSERVE_TP_FAULT"
CAPTURE_FAULTS = ("none", "reverse")


@dataclass(frozen=True, slots=True)
class FaultHook:
    """The faults for ``rank`` (-1: none): ``sleep_s`` seconds before the forward of step
    ``sleep_step`` (0: never), and ``capture`` one of `CAPTURE_FAULTS`."""

    rank: int = -1
    sleep_step: int = 0
    sleep_s: float = 0.0
    capture: str = "none"

    def __post_init__(self) -> None:
        if self.capture not in CAPTURE_FAULTS:
            raise ValueError(f"{ENV}: capture must be one of {CAPTURE_FAULTS}, got {self.capture!r}")

    @classmethod
    def parse(cls, text: str) -> "FaultHook":
        """``"key=value,..."`` of this class's fields; "" is no fault."""
        types = {f.name: f.type for f in fields(cls)}
        kw: dict[str, object] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, _, value = part.partition("=")
            if key not in types:
                raise ValueError(f"{ENV}: unknown key {key!r} (known: {sorted(types)})")
            kw[key] = {"int": int, "float": float}.get(str(types[key]), str)(value)
        return cls(**kw)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls) -> "FaultHook":
        return cls.parse(os.environ.get(ENV, ""))

    def schedule(self, rank: int, items: Sequence[CaptureItem]) -> list[CaptureItem]:
        """The capture schedule ``rank`` follows ("reverse": each kind's sizes smallest first)."""
        if rank != self.rank or self.capture != "reverse":
            return list(items)
        kinds = list(dict.fromkeys(it.kind for it in items))
        return [it for k in kinds for it in reversed([i for i in items if i.kind == k])]

    def before_forward(self, rank: int, step: int) -> None:
        if rank == self.rank and step == self.sleep_step:
            time.sleep(self.sleep_s)
