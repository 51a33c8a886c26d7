"""`EngineConfig.check`: a Python API user's engine config that no engine can take is one
`UserError` naming the field, raised by `Engine` before it loads anything."""

from __future__ import annotations

import pytest

from twinserve.core.errors import UserError
from twinserve.engine.config import EngineConfig
from twinserve.engine.engine import Engine


@pytest.mark.parametrize("field, value, says", [
    ("page_size", 0, "page_size=0: allowed: >= 1"),
    ("mem_fraction", 1.5, "mem_fraction=1.5: allowed: > 0 and <= 1"),
    ("num_pages", 0, "num_pages=0: allowed: >= 1, or None"),
    ("tp_size", 0, "tp_size=0: allowed: >= 1"),
    ("dtype", "int3", "unknown dtype backend.dtype=int3"),
    ("device", "gpu", "backend.device=gpu: allowed: auto, cpu, cuda or cuda:N"),
])
def test_engine_refuses_a_config_no_engine_can_take(field: str, value: object, says: str, tiny_model_dir) -> None:
    cfg = EngineConfig(model=str(tiny_model_dir("tiny-llama")), **{"device": "cpu", field: value})
    with pytest.raises(UserError, match=says):
        Engine(cfg)


def test_a_config_in_range_passes() -> None:
    EngineConfig(model="m", device="cuda:1", dtype="bf16", page_size=64, mem_fraction=1.0, num_pages=8).check()
