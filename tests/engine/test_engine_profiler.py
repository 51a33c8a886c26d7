"""The profiler's grid cases on the CPU engine: shared-prefix decode batches, and decode batches
that decode together."""

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


def test_a_decode_case_decodes_its_whole_batch_together(tiny_model_dir):
    """16 prompts of 512 tokens (8,192 in all) with a 1,024-token step budget: prefilled cold
    they would take 8 steps and the first ones would finish their 9 tokens before the last
    started; warmed into the cache first, all 16 decode in the same steps, each reading its own
    512-token context."""
    grid = ProfileGrid.tiny()
    eng = Engine(EngineConfig(model=str(tiny_model_dir("tiny-llama")), device="cpu", cpu_kv_tokens=16384,
                              page_size=16, scheduler={"max_num_batched_tokens": 1024, "chunk_size": 1024}))
    run_case(_Driver(eng, 0), Case("decode", 1, 512, 16), grid)
    df = pd.DataFrame([s.as_row() for s in eng.steps])
    full = df[(df["num_prefills"] == 0) & (df["num_decodes"] == 16)]
    assert len(full) >= grid.decode_steps - 3  # the mixed steps hold the rest
    assert (full["decode_ctx"] >= 16 * 512).all() and (full["decode_unique_ctx"] == full["decode_ctx"]).all()
    eng.shutdown()


def test_the_long_grid_reaches_long_contexts_within_the_pool_and_model_length():
    """The long grid keeps the full grid's shapes and adds prefill chunks over, and decodes of,
    up to 28,672-token contexts; a 32,768-token model with a 750k-token pool keeps them, an
    8,192-token one drops every case past its length."""
    full, long = grid_cases(ProfileGrid(), 750_000, 32_768)[0], grid_cases(ProfileGrid.long(), 750_000, 32_768)[0]
    assert set(full) < set(long)
    assert max(c.ctx for c in long if c.kind == "prefill") == 28_672
    assert max(c.ctx for c in long if c.kind == "decode") == 28_672
    short, dropped = grid_cases(ProfileGrid.long(), 750_000, 8_192)
    assert dropped > 0 and max(c.ctx + c.tokens // c.seqs for c in short) < 8_192
