"""`RequestLog`: finished requests turned into table rows as they finish (the Req objects go)."""

from __future__ import annotations

from typing import Iterable

import pandas as pd

from twinserve.core.metrics import COLUMNS, requests_frame
from twinserve.core.request import Req


class RequestLog:
    """Collects ended requests per replica and converts them to `requests_frame` rows every
    ``chunk`` requests, dropping the ``Req`` objects (their token buffers) so memory holds only
    the rows. ``frame()`` returns all rows sorted by ``rid``.
    """

    def __init__(self, chunk: int = 2048) -> None:
        self._chunk = chunk
        self._pending: dict[int, list[Req]] = {}
        self._frames: list[pd.DataFrame] = []
        self.count = 0

    def add(self, reqs: Iterable[Req], replica: int) -> None:
        buf = self._pending.setdefault(replica, [])
        for r in reqs:
            buf.append(r)
            self.count += 1
        if len(buf) >= self._chunk:
            self._flush(replica)

    def _flush(self, replica: int) -> None:
        buf = self._pending.get(replica)
        if buf:
            self._frames.append(requests_frame(buf, replica))
            self._pending[replica] = []

    def frame(self) -> pd.DataFrame:
        for rep in sorted(self._pending):
            self._flush(rep)
        frames = [f for f in self._frames if len(f)]
        if not frames:
            return requests_frame([], 0)
        df = pd.concat(frames, ignore_index=True)
        return df.sort_values("rid", kind="stable").reset_index(drop=True)[list(COLUMNS)]
