"""Speculative decoding (prompt lookup) on the CPU engine: greedy output with speculation equals
greedy output without it, token for token, across batch mixes; the page invariant holds after
every step; drafts are proposed and accepted."""

from __future__ import annotations

import numpy as np
import pytest

from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams


def _run(model, prompts, params, spec=None, **kw):
    from twinserve.engine.engine import Engine, EngineConfig

    eng = Engine(EngineConfig(model=str(model), device="cpu", checked=True, spec=spec or {}, **kw))
    try:
        reqs = [Req(i, p, params[i] if isinstance(params, list) else params, arrival=0.0)
                for i, p in enumerate(prompts)]
        got = {r.rid: [] for r in reqs}
        for r in reqs:
            eng.add(r)
        while eng.has_work():
            for out in eng.step():
                got[out.rid].extend(out.new_token_ids)
            eng.scheduler.check_invariants()
        free, used, cached = eng.scheduler.page_counts()
        assert used == 0  # nothing leaked once everything finished
        return [got[i] for i in range(len(prompts))], eng.stats()
    finally:
        eng.shutdown()


def _repetitive(rng, n, period, vocab):
    base = rng.integers(3, vocab, size=period)
    return np.tile(base, -(-n // period))[:n].astype(np.int32)


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(0)
    return [_repetitive(rng, n, p, 1024) for n, p in ((40, 7), (75, 5), (23, 23), (130, 9))]


GREEDY = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
SPEC = {"method": "ngram", "num_tokens": 4, "ngram_min": 1}  # the random model repeats no longer n-grams


@pytest.mark.parametrize("mix", ["one", "batch", "chunked", "preempt"])
def test_ngram_greedy_equals_plain(tiny_model_dir, prompts, mix):
    model = tiny_model_dir("tiny-llama")
    kw = dict(cpu_kv_tokens=4096)
    ps = prompts[:1] if mix == "one" else prompts
    if mix == "chunked":  # prefill chunks of 24 tokens share steps with verify rows
        kw["scheduler"] = {"max_num_batched_tokens": 24, "chunked_prefill": True, "chunk_size": 24}
    if mix == "preempt":  # 20 pages of 16 tokens for 4 requests of up to 170 tokens: recompute
        kw = dict(num_pages=20)
    want, base_stats = _run(model, ps, GREEDY, **kw)
    got, stats = _run(model, ps, GREEDY, SPEC, **kw)
    assert got == want
    assert all(len(g) == GREEDY.max_tokens for g in got)
    assert stats["spec_decode_num_draft_tokens"] > 0
    assert "spec_decode_num_draft_tokens" not in base_stats


def test_sampled_requests_speculate_beside_greedy_ones(tiny_model_dir, prompts):
    """Sampled requests verify drafts by rejection sampling (engine/spec_sampler.py, whose
    distribution tests are in test_engine_spec_sampler.py); the greedy ones beside them keep
    their plain outputs, and a seeded sampled run repeats itself."""
    model = tiny_model_dir("tiny-llama")
    hot = SamplingParams(temperature=0.8, seed=5, max_tokens=40, ignore_eos=True)
    params = [GREEDY, hot] * 2
    want, _ = _run(model, prompts, params, cpu_kv_tokens=4096)
    got, stats = _run(model, prompts, params, SPEC, cpu_kv_tokens=4096)
    again, _ = _run(model, prompts, params, SPEC, cpu_kv_tokens=4096)
    assert got[0::2] == want[0::2]
    assert got == again
    assert all(len(g) == 40 for g in got)
    _, hot_stats = _run(model, prompts[1::2], hot, SPEC, cpu_kv_tokens=4096)
    assert hot_stats["spec_decode_num_draft_tokens"] > 0


@pytest.mark.parametrize("spec_cfg", [SPEC, {"method": "draft", "draft": "layers:1", "num_tokens": 4}],
                         ids=["ngram", "layers1"])
def test_prefix_cache_holds_only_accepted_tokens(tiny_model_dir, prompts, spec_cfg):
    """A second request whose prompt is the first's prompt and output hits the cache for
    exactly the first's known tokens, and decodes the same continuation as without speculation
    (the layer draft then reads cached prefix pages)."""
    from twinserve.engine.engine import Engine, EngineConfig

    model = tiny_model_dir("tiny-llama")
    outs = []
    for spec in ({}, spec_cfg):
        eng = Engine(EngineConfig(model=str(model), device="cpu", checked=True, spec=spec, cpu_kv_tokens=4096))
        first = Req(0, prompts[3], GREEDY, arrival=0.0)
        eng.add(first)
        while eng.has_work():
            eng.step()
        cache = eng.scheduler.cache
        known = np.concatenate([prompts[3], first.output_ids])
        # every full page of the known tokens with KV is cached, and nothing else is: a page
        # holding a rejected draft would be a branch off that path
        tree_tokens = cache.match(known).num_tokens
        assert tree_tokens == (len(known) - 1) // 16 * 16
        assert cache.num_pages * 16 == tree_tokens
        second = Req(1, known, GREEDY, arrival=eng.now())
        eng.add(second)
        while eng.has_work():
            eng.step()
            eng.scheduler.check_invariants()
        outs.append((first.output_ids.tolist(), second.output_ids.tolist(), second.num_cached))
        eng.shutdown()
    assert outs[0] == outs[1]
    assert outs[1][2] > 0


def test_spec_refuses_bad_config(tiny_model_dir):
    from twinserve.engine.engine import Engine, EngineConfig

    model = str(tiny_model_dir("tiny-llama"))
    with pytest.raises(ValueError, match="unknown spec.method"):
        Engine(EngineConfig(model=model, device="cpu", spec={"method": "eagle", "num_tokens": 2}, cpu_kv_tokens=1024))


def _layers(n):
    return {"method": "draft", "draft": f"layers:{n}", "num_tokens": 3}


@pytest.mark.parametrize("spec,min_accepted", [(SPEC, 8), (_layers(30), 14), (_layers(12), 0)],
                         ids=["ngram", "layers30", "layers12"])
def test_real_model_code_echo_accepts_drafts(real_model_dir, spec, min_accepted):
    """SmolLM2 asked to repeat a function echoes it, with the same output as without
    speculation: prompt lookup's drafts are accepted; a draft of all 30 layers is the target
    and has every draft accepted (its forward over the shared pages is right); 12 layers
    (a poor early exit for this model: no token accepted) still leave the output unchanged."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(real_model_dir)
    code = "def area(width, height):\n    result = width * height\n    return result\n"
    msgs = [{"role": "user", "content": f"Repeat this function exactly:\n```python\n{code}```"}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    params = SamplingParams(temperature=0.0, max_tokens=32)
    kw = dict(cpu_kv_tokens=1024, dtype="float32")
    want, _ = _run(real_model_dir, [ids], params, **kw)
    got, stats = _run(real_model_dir, [ids], params, spec, **kw)
    assert got == want
    assert "width * height" in tok.decode(got[0])
    assert stats["spec_decode_num_accepted_tokens"] >= min_accepted, stats
    if spec is not SPEC and min_accepted:
        assert stats["spec_decode_num_accepted_tokens"] == stats["spec_decode_num_draft_tokens"]


@pytest.mark.parametrize("layers", [1, 2])
def test_layer_draft_greedy_equals_plain(tiny_model_dir, prompts, layers):
    """draft=layers:N proposes with the target's first N layers over the target's own KV pages;
    greedy output equals plain decoding across a batch, chunked prefill and preemption."""
    model = tiny_model_dir("tiny-llama")
    spec = {"method": "draft", "draft": f"layers:{layers}", "num_tokens": 3}
    for kw in (dict(cpu_kv_tokens=4096),
               dict(cpu_kv_tokens=4096, scheduler={"max_num_batched_tokens": 24, "chunked_prefill": True,
                                                    "chunk_size": 24}),
               dict(num_pages=20)):
        want, _ = _run(model, prompts, GREEDY, **kw)
        got, stats = _run(model, prompts, GREEDY, spec, **kw)
        assert got == want
        assert stats["spec_decode_num_draft_tokens"] > 0


def test_layer_draft_of_all_layers_is_the_target(tiny_model_dir, prompts):
    """With every layer the draft is the target itself: (nearly) every draft token is accepted,
    which checks the draft's forward over the shared KV pages."""
    from twinserve.engine.model_config import ModelConfig

    model = tiny_model_dir("tiny-llama")
    n = ModelConfig.from_dir(str(model)).num_layers
    spec = {"method": "draft", "draft": f"layers:{n}", "num_tokens": 4}
    got, stats = _run(model, prompts, GREEDY, spec, cpu_kv_tokens=4096, dtype="float32")
    want, _ = _run(model, prompts, GREEDY, cpu_kv_tokens=4096, dtype="float32")
    assert got == want
    assert stats["spec_decode_num_accepted_tokens"] >= 0.95 * stats["spec_decode_num_draft_tokens"] > 0, stats


def test_layer_draft_config_errors(tiny_model_dir):
    from twinserve.core.errors import UserError
    from twinserve.engine.engine import Engine, EngineConfig

    model = str(tiny_model_dir("tiny-llama"))
    for draft, msg in (("layers:99", "1 <= N"), ("eagle:3", "not a checkpoint folder")):
        with pytest.raises(UserError, match=msg):
            Engine(EngineConfig(model=model, device="cpu", cpu_kv_tokens=1024,
                                spec={"method": "draft", "draft": draft, "num_tokens": 2}))
    with pytest.raises(ValueError, match="needs spec.draft"):
        Engine(EngineConfig(model=model, device="cpu", cpu_kv_tokens=1024, spec={"method": "draft", "num_tokens": 2}))


def test_layer_draft_batch_equals_one_by_one(tiny_model_dir, prompts):
    """Proposals drafted for a step's decodes in one padded batch equal each request's own,
    and the step's drafts come from that batch."""
    from twinserve.engine.engine import Engine, EngineConfig

    eng = Engine(EngineConfig(model=str(tiny_model_dir("tiny-llama")), device="cpu", cpu_kv_tokens=4096,
                              spec={"method": "draft", "draft": "layers:2", "num_tokens": 3}))
    try:
        reqs = [Req(i, p, GREEDY, arrival=0.0) for i, p in enumerate(prompts)]
        for r in reqs:
            eng.add(r)
        for _ in range(3):
            eng.step()
        draft = eng.scheduler.spec.propose
        live = [r for r in reqs if r.num_tokens - r.num_computed == 1]
        assert len(live) == 4 and len({r.num_computed for r in live}) > 1  # different context lengths
        together = draft.propose(live, 3)
        alone = np.concatenate([draft.propose([r], 3) for r in live])
        assert (together == alone).all()
        calls = []
        one = draft.propose
        draft.propose = lambda rs, k: calls.append(len(rs)) or one(rs, k)
        eng.step()
        assert calls == [4]  # one batch for the step, no request proposed for alone
        assert eng.steps[-1].extra["spec_draft_s"] > 0  # the proposals' time is in the step record
        assert eng.stats()["spec_decode_draft_s_per_step"] > 0  # and its mean, for the simulator
    finally:
        eng.shutdown()


def test_draft_checkpoint_greedy_equals_plain(tiny_model_dir, prompts):
    """spec.draft=PATH: a separate checkpoint with its own KV pool. The target's own checkpoint
    as the draft accepts (nearly) every proposal; another model (other weights) leaves the
    output unchanged; both across a batch, chunked prefill and preemption (pool pages freed)."""
    from twinserve.core.model_shapes import get_shape
    from twinserve.engine.model_maker import make_model

    model = tiny_model_dir("tiny-llama")
    other = make_model(get_shape("tiny-llama"), model.parent / "other-draft", seed=7, dtype="float32")
    for kw in (dict(cpu_kv_tokens=4096),
               dict(cpu_kv_tokens=4096, scheduler={"max_num_batched_tokens": 24, "chunked_prefill": True,
                                                    "chunk_size": 24}),
               dict(num_pages=20)):
        want, _ = _run(model, prompts, GREEDY, **kw)
        same, s1 = _run(model, prompts, GREEDY, {"method": "draft", "draft": str(model), "num_tokens": 3}, **kw)
        diff, s2 = _run(model, prompts, GREEDY, {"method": "draft", "draft": str(other), "num_tokens": 3}, **kw)
        assert same == want and diff == want
        assert s1["spec_decode_num_accepted_tokens"] >= 0.95 * s1["spec_decode_num_draft_tokens"] > 0, s1
        assert s2["spec_decode_num_draft_tokens"] > 0
        assert s2["spec_decode_num_accepted_tokens"] < 0.5 * s2["spec_decode_num_draft_tokens"], s2


def test_draft_checkpoint_pool_pages_are_returned(tiny_model_dir, prompts):
    """The draft's own pool: after every step its free pages and the requests' pages partition
    it (preemption under 20 pages included); once all requests finished, every page is free."""
    from twinserve.engine.engine import Engine, EngineConfig

    model = tiny_model_dir("tiny-llama")
    eng = Engine(EngineConfig(model=str(model), device="cpu", num_pages=20, checked=True,
                              spec={"method": "draft", "draft": str(model), "num_tokens": 3}))
    try:
        for i, p in enumerate(prompts):
            eng.add(Req(i, p, GREEDY, arrival=0.0))
        dm = eng.scheduler.spec.propose
        while eng.has_work():
            eng.step()
            held = [p for st in dm._kv.values() for p in st.pages]
            assert sorted(held + dm._free) == list(range(dm.pool.geom.num_pages))
        dm.prepare([], 3)
        assert len(dm._free) == dm.pool.geom.num_pages
    finally:
        eng.shutdown()


def test_auto_max_batch_size_measures_the_engine(tiny_model_dir, prompts):
    """``spec.max_batch_size=auto``: the engine times plain and verify steps at batch 1, 2, 4
    (max_running 4), leaves no trace of the measurement, sets the cutoff by the rule from those
    costs, and its greedy output still equals plain decoding."""
    from twinserve.core.spec_cutoff import spec_batch_cutoff
    from twinserve.engine.engine import Engine, EngineConfig

    model = tiny_model_dir("tiny-llama")
    kw = dict(cpu_kv_tokens=4096, scheduler={"max_running": 4})
    eng = Engine(EngineConfig(model=str(model), device="cpu", spec={**SPEC, "max_batch_size": "auto"}, **kw))
    try:
        sp = eng.scheduler.spec
        assert sorted(sp.costs.decode_s) == [1, 2, 4]
        assert all(v > 0 for v in (*sp.costs.decode_s.values(), *sp.costs.verify_s.values()))
        assert eng.steps == [] and sp.num_drafts == 0 and not eng.has_work()
        assert eng.scheduler.page_counts()[1] == 0
        assert eng.stats()["spec_max_batch_size"] == spec_batch_cutoff(sp.costs, SPEC["num_tokens"] + 1.0)
    finally:
        eng.shutdown()
    want, _ = _run(model, prompts, GREEDY, **kw)
    got, _ = _run(model, prompts, GREEDY, {**SPEC, "max_batch_size": "auto"}, **kw)
    assert got == want


@pytest.mark.parametrize("cap", [1, 2])
def test_overlap_runs_the_steps_that_do_not_speculate(tiny_model_dir, prompts, cap):
    """With overlap scheduling, steps formed while more than ``spec.max_batch_size`` requests
    run overlap (a step stays in flight while the next is scheduled), verify steps settle at
    once; greedy output equals plain decoding and both kinds of step occur."""
    model = tiny_model_dir("tiny-llama")
    kw = dict(cpu_kv_tokens=4096, overlap=True)
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (12, 40, 20, 30)]
    want, _ = _run(model, prompts, params, **kw)  # requests end one by one: the batch shrinks
    got, stats = _run(model, prompts, params, {**SPEC, "max_batch_size": cap}, **kw)
    assert got == want
    assert stats["spec_decode_num_drafts"] > 0


def test_warmup_leaves_no_speculation_counters(tiny_model_dir):
    from twinserve.engine.engine import Engine, EngineConfig

    eng = Engine(EngineConfig(model=str(tiny_model_dir("tiny-llama")), device="cpu", spec=SPEC, cpu_kv_tokens=4096))
    try:
        sp = eng.scheduler.spec
        seen: list[int] = []
        reset = sp.reset_counters
        sp.reset_counters = lambda: (seen.append(sp.num_drafts), reset())[1]
        eng.warmup(prompt_lens=(16, 128), decodes=8)
        assert seen and seen[0] > 0  # the throw-away requests did speculate
        assert eng.stats()["spec_decode_num_drafts"] == 0 and sp.proposed_len.sum() == 0
    finally:
        eng.shutdown()


def _steps(model, prompt, params, spec):
    from twinserve.engine.engine import Engine, EngineConfig

    eng = Engine(EngineConfig(model=str(model), device="cpu", spec=spec, cpu_kv_tokens=4096, overlap=True))
    try:
        eng.add(Req(0, prompt, params, arrival=0.0))
        out = []
        while eng.has_work():
            for o in eng.step():
                out.extend(o.new_token_ids)
        return out, [(rec.extra["overlapped"], rec.extra.get("spec_num_draft_tokens", 0.0)) for rec in eng.steps]
    finally:
        eng.shutdown()


def test_overlap_keeps_steps_after_which_no_request_can_draft(tiny_model_dir, prompts):
    """Speculation allowed at every batch size: with ``spec.ngram_min=3`` a plain step stays in
    flight while the next is scheduled when the request's last two known tokens never occurred
    before (no trigram can match whatever token is pending; the random model's outputs do not
    repeat its prompt's period); with ``ngram_min=1`` some step has verify rows and nothing
    launches behind one. Greedy output equals plain decoding in both."""
    model = tiny_model_dir("tiny-llama")
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    want, _ = _run(model, prompts[:1], params, cpu_kv_tokens=4096, overlap=True)
    got3, rows3 = _steps(model, prompts[0], params, {**SPEC, "ngram_min": 3})
    got1, rows1 = _steps(model, prompts[0], params, {**SPEC, "ngram_min": 1})
    assert [got3] == want and [got1] == want
    assert sum(o for o, _ in rows3) > len(rows3) // 2
    assert any(d > 0 for _, d in rows1)
    for (o, d), (o_next, _) in zip(rows1, rows1[1:]):
        assert not (d > 0 and o_next == 1.0)
