"""replay_workload: open-loop replay at arrival times, with step records on the trace clock."""

from __future__ import annotations

from twinserve.core.request import ReqState
from twinserve.core.workload import shared_prefix, synthetic
from twinserve.engine.config import EngineConfig
from twinserve.engine.replay import replay_workload


def test_replay_synthetic_open_loop(tiny_model_dir):
    w = synthetic(num_requests=6, rate=40.0, prompt_len=20, output_len=8, seed=3, vocab_size=32000)
    cfg = EngineConfig(model=str(tiny_model_dir("tiny-llama")), device="cpu", cpu_kv_tokens=2048)
    reqs, steps = replay_workload(cfg, w, progress=False)
    assert [r.rid for r in reqs] == [s.rid for s in w]
    for r, s in zip(reqs, w):
        assert r.state is ReqState.FINISHED and r.num_output == s.output_len
        assert r.arrival == s.arrival
        assert r.t_scheduled >= s.arrival  # never served before it arrived
        assert int(r.prompt.max()) < 1024  # folded into the model's vocabulary
    assert steps and all(b.start >= a.start for a, b in zip(steps, steps[1:]))
    assert sum(st.features.new_tokens for st in steps) == sum(s.prompt_len + s.output_len - 1 for s in w)
    assert all(st.duration > 0 for st in steps)


def test_replay_shared_prefix_hits_cache(tiny_model_dir):
    w = shared_prefix(num_groups=1, prefix_len=64, suffix_len=8, output_len=4, num_requests=4, rate=5.0,
                      seed=0)
    cfg = EngineConfig(model=str(tiny_model_dir("tiny-qwen3")), device="cpu", cpu_kv_tokens=2048)
    reqs, _ = replay_workload(cfg, w, progress=False)
    assert max(r.max_cached for r in reqs) >= 64 - 16
