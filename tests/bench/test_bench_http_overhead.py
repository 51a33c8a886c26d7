"""A CPU smoke run of `twinserve-bench http-overhead` (bench/http_overhead.py) on the tiny model:
both scenarios run both ways, every request completes, and the HTTP side reports the CPU time
per output token of each server process and of the client. No timing is asserted."""

from __future__ import annotations

import json
import math
import subprocess
import sys

from twinserve.bench.http_overhead import main


def test_http_overhead_smoke(tmp_path):
    model = tmp_path / "tiny"
    subprocess.run([sys.executable, "-m", "twinserve.engine.model_maker", "--shape", "tiny-llama", "--out",
                    str(model), "--dtype", "float32"], check=True, capture_output=True)
    out = tmp_path / "overhead.json"
    res = main(["--model", str(model), "--device", "cpu", "--threads", "1", "--prompt-len", "16",
                "--output-len", "4", "--num-requests", "4", "--saturate-requests", "6", "--out", str(out)])
    assert json.loads(out.read_text())["verdict"] == res["verdict"]
    for name, n in (("saturate", 6), ("moderate", 4)):
        sc = res["scenarios"][name]
        assert sc["inprocess"]["completed"] == sc["http"]["completed"] == n
        cpu = sc["http_cpu_us_per_token"]
        assert {"api", "engine0", "tokenizer0", "detokenizer0", "client"} <= set(cpu)
        assert set(sc["http_stack"]) == {"loop", "http"}  # what the API server ran on
        # /proc counts CPU time in clock ticks (10 ms): a process of so short a run may show 0
        assert all(math.isfinite(v) and v >= 0 for v in cpu.values()) and sum(cpu.values()) > 0, cpu
    assert res["scenarios"]["moderate"]["scenario"]["rate"] > 0  # derived from the saturated run


def test_verdict_names_each_target_and_what_did_not_run():
    from twinserve.bench.http_overhead import _table, verdict

    sat = {"throughput_loss": 0.03, "added_mean_ttft_ms": 25.0, "added_median_ttft_ms": 5.0, "added_mean_itl_ms": 0.0}
    mod = {"throughput_loss": 0.0, "added_mean_ttft_ms": 4.0, "added_median_ttft_ms": 11.0, "added_mean_itl_ms": 0.0}
    assert verdict({"saturate": {"compare": sat}}) == {"throughput_ok": True, "saturated_ttft_ok": False, "ttft_ok": None}
    assert verdict({"moderate": {"compare": mod}})["ttft_ok"] is False  # the median counts too
    line = _table({"scenarios": {}, "verdict": verdict({})}).splitlines()[-1]
    assert line.count("not run") == 3
