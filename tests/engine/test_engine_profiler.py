"""The profiler's grid cases on the CPU engine: shared-prefix decode batches."""

from __future__ import annotations

import pandas as pd

from twinserve.engine.config import EngineConfig
from twinserve.engine.engine import Engine
from twinserve.engine.profiler import Case, ProfileGrid, _Driver, grid_cases, run_case


def test_a_shared_case_decodes_over_one_cached_prefix(tiny_model_dir):
    """8 prompts of one 64-token prefix plus 8 own tokens: once they all decode, their KV reads
    of the prefix's 4 pages (page size 16) are counted once, and the mixed chunks hit the
    prefix in the cache."""
    grid = ProfileGrid.tiny()
    eng = Engine(EngineConfig(model=str(tiny_model_dir("tiny-llama")), device="cpu", cpu_kv_tokens=4096,
                              page_size=16))
    run_case(_Driver(eng, 0), Case("shared", 1, 64, 8), grid)
    df = pd.DataFrame([s.as_row() for s in eng.steps])
    full = df[(df["num_prefills"] == 0) & (df["num_decodes"] == 8)]
    assert len(full) >= 3
    assert (full["decode_ctx"] - full["decode_unique_ctx"] == 7 * 64).all()
    mixed = df[(df["num_prefills"] > 0) & (df["num_decodes"] > 0)]
    assert len(mixed) >= 1 and (mixed["prefill_ctx"] - mixed["prefill_tokens"] >= 64).all()
    # the grid lists shared cases beside the others
    cases, _ = grid_cases(grid, 100_000, 4096)
    assert {c.kind for c in cases} == {"prefill", "decode", "shared"}
    eng.shutdown()
