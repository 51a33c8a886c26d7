"""`twinserve-bench burst-ingest` (bench/burst_ingest.py): its stub engine, the probe's window, and
a small run against a stub-engine server. No timing is asserted."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

from twinserve.bench.burst_ingest import main
from twinserve.bench.ingest_probe import WINDOW_GAP_S, IngestWindow
from twinserve.bench.stub_engine import StubEngine, StubEngineConfig


def _req(rid: int, n: int) -> SimpleNamespace:
    return SimpleNamespace(rid=rid, prompt=[5, 6, 7], params=SimpleNamespace(max_tokens=n))


def test_the_stub_engine_gives_one_token_per_step_and_one_finishing_output(tmp_path) -> None:
    (tmp_path / "config.json").write_text('{"vocab_size": 100}')
    eng = StubEngine(StubEngineConfig(str(tmp_path), step_s=0.0))
    eng.add(_req(1, 2))
    eng.add(_req(2, 5))
    first, second = eng.step(), eng.step()
    assert [(o.rid, o.new_token_ids, o.finished) for o in first] == [(1, [5], False), (2, [5], False)]
    assert [(o.rid, o.new_token_ids, o.finish_reason) for o in second] == [(1, [6], "length"), (2, [6], None)]
    assert eng.abort(2) and not eng.abort(1)
    assert [(o.rid, o.finish_reason) for o in eng.step()] == [(2, "abort")] and not eng.has_work()


def test_the_probe_window_restarts_only_after_a_gap_between_adds() -> None:
    w = IngestWindow()
    w.record(10.0)
    w.record(10.1)
    w.record(10.2)
    assert (w.adds, w.first_add, w.last_add) == (3, 10.0, 10.2)
    w.record(10.2 + 2 * WINDOW_GAP_S)
    assert (w.adds, w.first_add) == (1, 10.2 + 2 * WINDOW_GAP_S)


def test_burst_ingest_smoke_on_a_stub_engine(tmp_path) -> None:
    model = tmp_path / "tiny"
    subprocess.run([sys.executable, "-m", "twinserve.engine.model_maker", "--shape", "tiny-llama", "--out",
                    str(model), "--dtype", "float32"], check=True, capture_output=True)
    rs = main(["--model", str(model), "--stub-step-ms", "2", "--requests", "24", "--output-len", "3",
               "--repeats", "3"])
    for r in rs:  # every repeat reads its own window, not a stale snapshot of the one before
        assert r.errors == 0 and r.extra["window_adds"] == 24
        assert 0 <= r.engine_first_add <= r.engine_last_add <= r.done
        assert {"api", "engine0", "tokenizer0", "detokenizer0", "client"} <= set(r.cpu_ms)
