"""The test-only fault hook of the tensor-parallel follower (TWINSERVE_TP_FAULT)."""

from __future__ import annotations

import pytest

from twinserve.core.capture_schedule import CaptureItem
from twinserve.engine.tp.faults import FaultHook


def test_reverse_fault_reverses_sizes_within_each_kind_on_its_rank_only():
    items = [CaptureItem("decode", 4), CaptureItem("decode", 2), CaptureItem("full", 32), CaptureItem("full", 16)]
    hook = FaultHook.parse("rank=1,capture=reverse")
    assert hook.schedule(0, items) == items
    assert [(i.kind, i.size) for i in hook.schedule(1, items)] == [("decode", 2), ("decode", 4), ("full", 16),
                                                                    ("full", 32)]
    with pytest.raises(ValueError, match="unknown key"):
        FaultHook.parse("rnak=1")
    assert FaultHook.parse("") == FaultHook()
