"""The host-steps benchmark's fixed step shapes (`bench.host_steps`) and the engine's ``launch_cpu_s`` column, on CPU."""

from __future__ import annotations

import math

from twinserve.engine.config import EngineConfig
from twinserve.engine.engine import Engine
from twinserve.bench.host_steps import host_bench


def test_series_hold_their_shape_and_report_the_launch_cpu_time(tiny_model_dir):
    eng = Engine(EngineConfig(model=str(tiny_model_dir("tiny-llama")), device="cpu", cpu_kv_tokens=4096,
                              page_size=16, cache="none"))
    stats, table = host_bench(eng, decodes=4, ctx=40, prompt=24, steps=6, cprofile_top=5)
    by = {s.kind: s for s in stats}
    # every step of each series has the asked shape: 4 decodes, plus one 24-token prefill when mixed
    assert by["decode"].n == 6 and by["mixed"].n == 6
    for s in stats:
        assert s.launch_s > 0 and s.duration > 0 and s.launch_cpu_s > 0
        assert math.isnan(s.post_s)  # no graph replay on CPU
    # on CPU the forward runs inside the launch call: its CPU time exceeds the preparation part
    assert by["mixed"].launch_cpu_s > by["mixed"].launch_s
    assert "function calls" in table and "tottime" in table
    assert all(math.isfinite(r.extra["launch_cpu_s"]) for r in eng.steps)
    # the series leave the engine idle and its requests aborted
    assert not eng.has_work()
    eng.shutdown()


def test_the_cli_runs_one_series_per_paired_step_shape(tiny_model_dir, tmp_path, capsys):
    import json

    import pytest

    from twinserve.bench.host_steps import main

    model = str(tiny_model_dir("tiny-llama"))
    out = tmp_path / "host.jsonl"
    main(["--model", model, "--device", "cpu", "--decodes", "2", "1", "--prompt", "24", "40", "--ctx", "40",
          "--steps", "4", "--repeats", "1", "--json", str(out)])
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["decodes"], r["prompt"], r["kind"]) for r in rows] == [
        (2, 24, "decode"), (2, 24, "mixed"), (1, 40, "decode"), (1, 40, "mixed")]
    assert all(r["n"] == 4 and r["piecewise_max_tokens"] == 2048 for r in rows)
    assert "repeat 0 1+40: mixed" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--model", model, "--device", "cpu", "--decodes", "2", "1", "--prompt", "24"])
