"""Every rank follows rank 0's capture schedule: the group checks it at startup (gloo, tp=2).

On the CPU nothing is captured (graphs need CUDA), so what is compared is the schedule each
rank's plan gives; a rank made to follow another order (the ``capture=reverse`` fault) fails
the group with a TPGroupError naming it and the first difference.
"""

from __future__ import annotations

import json

import pytest

from twinserve.core.capture_schedule import CaptureRecord, records_of
from twinserve.engine.engine import Engine, EngineConfig
from twinserve.engine.tp.errors import TPGroupError
from twinserve.engine.tp.faults import ENV


def _cfg(d) -> EngineConfig:
    return EngineConfig(model=str(d), device="cpu", cpu_kv_tokens=1024, tp_size=2, max_graph_bs=16)


def test_ranks_report_the_same_schedule(tiny_dir, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    eng = Engine(_cfg(tiny_dir("tiny-llama")))
    try:
        mine = [CaptureRecord.planned(i) for i in eng.executor.capture_log.schedule]
        assert [r.size for r in mine] == [16, 8, 4, 2, 1]
        assert records_of(json.loads(eng.tp.store.get("schedule/1"))) == mine
        assert eng.tp.store.get("schedule") == b"ok"
        assert records_of(json.loads(eng.tp.store.get("captured/1"))) == eng.executor.capture_log.records == []
    finally:
        eng.shutdown()


def test_other_order_on_one_rank_fails_the_group_naming_it(tiny_dir, monkeypatch):
    monkeypatch.setenv(ENV, "rank=1,capture=reverse")
    with pytest.raises(TPGroupError) as info:
        Engine(_cfg(tiny_dir("tiny-llama")))
    msg = str(info.value)
    assert "tensor-parallel rank 1's capture schedule differs from rank 0's at position 0" in msg
    assert "rank 0 has decode 16, rank 1 has decode 1" in msg
