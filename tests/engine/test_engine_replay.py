"""replay_workload: open-loop replay at arrival times, with step records on the trace clock."""

from __future__ import annotations

import pytest

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


def _replay_turn_after_turn(cfg, w, answers: bool = True):
    """Replay ``w`` (sessions), its clock stretched until every turn arrived after the session's
    previous turn had finished: how far depends on the host's speed (a loaded machine needs a
    longer think time), what the test checks does not."""
    for stretch in (1.0, 4.0, 16.0, 64.0):
        ws = w.scale_time(stretch)
        reqs, _ = replay_workload(cfg, ws, progress=False, answers=answers)
        done = {r.rid: r.t_finish for r in reqs}
        turns: dict[int, list] = {}
        for spec in ws:
            turns.setdefault(spec.session, []).append(spec)
        if all(done[a.rid] <= b.arrival for t in turns.values() for a, b in zip(t, t[1:])):
            return reqs
    pytest.fail("even with a 64x think time a turn arrived before the previous one finished")


def test_replay_emits_the_trace_answers_so_later_turns_hit_them(tiny_model_dir):
    from twinserve.core.workload import sessions

    w = sessions(num_sessions=2, turns=2, question_len=16, output_len=17, think_time=0.3, rate=20.0,
                 seed=1, vocab_size=1024)
    cfg = EngineConfig(model=str(tiny_model_dir("tiny-llama")), device="cpu", cpu_kv_tokens=4096,
                       page_size=16)
    reqs = _replay_turn_after_turn(cfg, w)
    by = {s.rid: s for s in w}
    for r in reqs:
        assert r.output_ids.tolist() == (w.output_tokens(by[r.rid]) % 1024).tolist()
    # a second turn = first prompt (16) + first answer (17, of which 16 have KV) + question (16):
    # with the trace's answers emitted, both pages before the question are cached; with sampled
    # ones only the first
    second = [r.rid for r in reqs if r.prompt_len == 49]
    assert second
    plain = _replay_turn_after_turn(cfg, w, answers=False)
    cached = {r.rid: r.max_cached for r in reqs}
    cached_plain = {r.rid: r.max_cached for r in plain}
    assert all(cached[i] == 32 and cached_plain[i] == 16 for i in second)


def test_a_step_after_the_engine_sat_idle_records_how_late_it_woke(tiny_model_dir):
    """Requests over 0.4 s apart with 3 tokens each: every one finds the engine idle, so the step
    that prefills it carries ``wake_s`` (arrival to that step's ``step()`` call) and no other
    step does."""
    w = synthetic(num_requests=3, rate=4.0, prompt_len=20, output_len=3, seed=1, vocab_size=32000)
    specs = list(w)
    assert all(b.arrival - a.arrival > 0.4 for a, b in zip(specs, specs[1:]))
    cfg = EngineConfig(model=str(tiny_model_dir("tiny-llama")), device="cpu", cpu_kv_tokens=2048)
    reqs, steps = replay_workload(cfg, w, progress=False)
    woke = [st for st in steps if "wake_s" in st.extra]
    assert len(woke) == len(reqs) == 3
    assert all(st.features.num_prefills == 1 and st.features.num_decodes == 0 for st in woke)
    for st, r in zip(woke, reqs):
        assert st.extra["iter_start"] == pytest.approx(r.arrival + st.extra["wake_s"], abs=1e-9)
        assert 0.0 <= st.extra["wake_s"] < 0.25
