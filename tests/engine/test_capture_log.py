"""CaptureLog follows a schedule and records each capture's collectives."""

from __future__ import annotations

import pytest

from twinserve.core.capture_schedule import CaptureItem, CaptureRecord
from twinserve.engine.capture_log import CaptureLog


def test_order_follows_the_schedule_and_rejects_other_sizes():
    log = CaptureLog([CaptureItem("decode", 2), CaptureItem("decode", 8), CaptureItem("full", 16)])
    assert log.order("decode", [8, 2]) == [2, 8]
    with pytest.raises(ValueError, match="decode sizes"):
        log.order("decode", [1, 2, 8])


def test_capturing_records_collective_deltas_and_check():
    totals = [0, 0]
    seen = []
    log = CaptureLog([CaptureItem("decode", 4), CaptureItem("decode", 2)], lambda: tuple(totals), seen.append)
    with log.capturing("decode", 4):
        totals[0] += 5
        totals[1] += 1
    with pytest.raises(RuntimeError, match="not the capture schedule"):
        log.check()
    with log.capturing("decode", 2):
        totals[0] += 3
    log.check()
    assert log.records == [CaptureRecord("decode", 4, 5, 1), CaptureRecord("decode", 2, 3, 0)]
    assert seen == [CaptureItem("decode", 4), CaptureItem("decode", 2)]

