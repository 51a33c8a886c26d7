"""The profile's speculative phase (`engine.profile_spec`): verify steps in the step records."""

from __future__ import annotations

import pytest

from twinserve.core.errors import UserError
from twinserve.engine.config import EngineConfig
from twinserve.engine.profile_spec import parse_spec, spec_replay_rows


def test_the_spec_is_method_colon_k() -> None:
    assert parse_spec("ngram:8") == {"method": "ngram", "num_tokens": 8}
    for bad in ("ngram", "ngram:", ":4", "ngram:0", "ngram:x"):
        with pytest.raises(UserError, match="METHOD:K"):
            parse_spec(bad)


def test_a_shape_name_has_no_text_to_replay() -> None:
    with pytest.raises(UserError, match="model directory with a tokenizer"):
        spec_replay_rows(EngineConfig(model="tiny", device="cpu"), "ngram:4")


def test_a_code_edit_replay_with_prompt_lookup_records_verify_steps(real_model_dir) -> None:
    cfg = EngineConfig(model=str(real_model_dir), device="cpu", dtype="float32", cpu_kv_tokens=8192)
    rows = spec_replay_rows(cfg, "ngram:4", kwargs_json='{"num_requests": 2, "rate": 1000, "max_output": 40}',
                            progress=False)
    assert rows and {r["phase"] for r in rows} == {"spec"}
    verify = [r for r in rows if r["verify_rows"] > 0]
    assert verify, "the model echoes the function: prompt lookup drafts"
    assert all(r["spec_num_draft_tokens"] > 0 for r in verify)
    assert all(r["verify_rows"] <= r["num_seqs"] for r in rows)
    assert all(r.get("spec_num_draft_tokens", 0) == 0 for r in rows if r["verify_rows"] == 0)


def test_a_workload_gets_only_its_own_default_kwargs(real_model_dir) -> None:
    """code_edit's output cap is not passed to another workload's builder."""
    cfg = EngineConfig(model=str(real_model_dir), device="cpu", dtype="float32", cpu_kv_tokens=8192)
    rows = spec_replay_rows(cfg, "ngram:4", "questions", '{"num_requests": 2, "rate": 1000, "output_len": 8}',
                            progress=False)
    assert rows and {r["phase"] for r in rows} == {"spec"}
