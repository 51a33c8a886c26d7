"""A CPU dry run of `twinserve-bench spec` (bench/spec.py), the entry point of
bench/scripts/gpu_spec.sh, at tiny sizes on SmolLM2: every run completes, speculation emits
the plain tokens, a draft of all 30 layers accepts every proposal, the counter files it writes
are acceptance files the simulator reads, and a failing run becomes a row with its error."""

from __future__ import annotations

import json

from twinserve.bench.spec import main
from twinserve.core.spec_accept import AcceptanceModel


def test_spec_bench_dry_run(real_model_dir, tmp_path):
    rows = main(["--model", str(real_model_dir), "--requests", "2", "--max-output", "6", "--num-tokens", "3",
                 "--ngram-batch", "1", "--layers", "30", "99", "--layers-batch", "1", "--device", "cpu",
                 "--out", str(tmp_path)])
    by = {(r["spec"], r["batch"]): r for r in rows}
    assert set(by) == {("none", 1), ("ngram", 1), ("layers:30", 1), ("layers:99", 1)}
    assert "1 <= N <= 30" in by["layers:99", 1]["error"]
    for key in (("ngram", 1), ("layers:30", 1)):
        assert by[key]["same_tokens"] is True and by[key]["mean_tpot_ms"] > 0, by[key]
    assert by["layers:30", 1]["acceptance_rate"] == 1.0
    assert json.loads((tmp_path / "runs_code_edit.json").read_text())[-1]["spec"] == "layers:99"
    m = AcceptanceModel.from_config({"acceptance_file": str(tmp_path / "spec_code_edit_layers30_b1.json")}, 3)
    assert m.rates == (1.0, 1.0, 1.0)


def test_plan_runs_one_ngram_variant_per_k_and_min():
    from twinserve.bench.spec import plan

    runs = plan([1], [], [1], 4, 0, [{"num_tokens": 8, "ngram_min": 1}, {"num_tokens": 12, "ngram_min": 3}])
    assert [(r.label, r.batch) for r in runs] == [("none", 1), ("ngram-num_tokens8-min1", 1),
                                                  ("ngram-num_tokens12-min3", 1)]
    assert runs[2].spec == {"method": "ngram", "num_tokens": 12, "max_batch_size": 0, "ngram_min": 3}
    assert [r.label for r in plan([1], [], [1], 4)] == ["none", "ngram"]
