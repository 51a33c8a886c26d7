"""Greedy generation through the whole engine matches transformers.generate token for token
(float32, CPU): one continuous batch, chunked prefill, overlap scheduling, a prefix-cache hit,
and preemption by recompute."""

from __future__ import annotations

import pytest

from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.engine.engine import Engine, EngineConfig
from twinserve.engine.llm import LLM
from twinserve.engine.testing import hf_greedy, random_prompts

N_OUT = 32
GREEDY = SamplingParams(temperature=0.0, max_tokens=N_OUT, ignore_eos=True)
LENGTHS = (5, 17, 40, 63, 100)


@pytest.fixture(scope="module")
def reference(tiny_model_dir, hf_model):
    """``reference(shape, prompt) -> 32 greedy transformers tokens`` (cached)."""
    cache: dict = {}

    def get(shape: str, prompt: list[int]) -> list[int]:
        key = (shape, tuple(prompt))
        if key not in cache:
            cache[key] = hf_greedy(hf_model(tiny_model_dir(shape)), prompt, N_OUT)
        return cache[key]

    return get


def _check(llm: LLM, shape: str, prompts, reference) -> list:
    outs = llm.generate(prompts, GREEDY, use_tqdm=False)
    for p, o in zip(prompts, outs):
        assert o.finish_reason == "length"
        assert o.token_ids == reference(shape, p), f"prompt of {len(p)} tokens diverged"
    llm.engine.scheduler.check_invariants()
    return outs


@pytest.mark.parametrize("shape,extra", [
    ("tiny-llama", {}),
    ("tiny-qwen3", {}),
    ("tiny-llama", {"scheduler": {"chunk_size": 16, "max_num_batched_tokens": 40}}),
    ("tiny-qwen3", {"overlap": True}),
    ("tiny-mistral", {"overlap": True, "scheduler": {"chunk_size": 8, "max_num_batched_tokens": 24},
                      "page_size": 4}),
], ids=["batch-llama", "batch-qwen3", "chunked", "overlap", "overlap-chunked-page4"])
def test_continuous_batch_matches_transformers(shape, extra, tiny_model_dir, reference):
    llm = LLM(str(tiny_model_dir(shape)), device="cpu", cpu_kv_tokens=4096, **extra)
    _check(llm, shape, random_prompts(LENGTHS, seed=1), reference)
    feats = [r.features for r in llm.engine.steps]
    assert sum(f.prefill_tokens for f in feats) == sum(LENGTHS)
    assert sum(f.num_decodes for f in feats) == len(LENGTHS) * (N_OUT - 1)
    if "scheduler" in extra:
        assert max(f.new_tokens for f in feats) <= extra["scheduler"]["max_num_batched_tokens"]
        assert any(f.num_prefills and f.num_decodes for f in feats), "expected mixed steps"


def test_prefix_cache_hit_matches_transformers(tiny_model_dir, reference):
    shape = "tiny-qwen2"
    llm = LLM(str(tiny_model_dir(shape)), device="cpu", cpu_kv_tokens=4096, cache="radix")
    prefix = random_prompts([48], seed=7)[0]
    tails = random_prompts([9, 3, 20], seed=8)
    first = _check(llm, shape, [prefix + tails[0]], reference)
    assert first[0].cached_tokens == 0
    later = _check(llm, shape, [prefix + t for t in tails[1:]], reference)
    assert all(o.cached_tokens == 48 for o in later)  # page_size 16: three full shared pages
    assert llm.engine.stats()["cache_hit_rate"] > 0


def test_preemption_by_recompute_matches_transformers(tiny_model_dir, reference):
    shape = "tiny-llama"
    llm = LLM(str(tiny_model_dir(shape)), device="cpu", num_pages=16, memory="on_demand", cache="none",
              memory_kwargs={"watermark": 0.0})
    prompts = random_prompts((40, 45, 50, 35), seed=3)  # 4 × 5 pages of 16 needed, 16 available
    _check(llm, shape, prompts, reference)
    assert llm.engine.scheduler.num_preemptions > 0
    assert sum(r.num_preempted for r in llm.engine.steps) > 0


def test_stop_token_and_eos(tiny_model_dir, reference):
    shape = "tiny-llama"
    d = str(tiny_model_dir(shape))
    prompt = random_prompts([12], seed=4)[0]
    ref = reference(shape, prompt)
    eng = Engine(EngineConfig(model=d, device="cpu", cpu_kv_tokens=1024))
    stop = ref[3]
    k = ref.index(stop)
    eng.add(Req(0, prompt, SamplingParams(temperature=0, max_tokens=N_OUT, stop_token_ids=(stop,))))
    got, last = [], None
    while eng.has_work():
        for out in eng.step():
            got += out.new_token_ids
            last = out
    assert got == ref[: k + 1] and last.finished and last.finish_reason == "stop"
    assert last.prompt_tokens == len(prompt)


def test_abort_releases_pages(tiny_model_dir):
    eng = Engine(EngineConfig(model=str(tiny_model_dir("tiny-llama")), device="cpu", cpu_kv_tokens=1024,
                              overlap=True))
    for rid, p in enumerate(random_prompts([20, 30], seed=5)):
        eng.add(Req(rid, p, SamplingParams(temperature=0, max_tokens=50, ignore_eos=True)))
    outs = eng.step() + eng.step() + eng.step()
    assert eng.abort(0) and not eng.abort(12345)
    finals = {}
    while eng.has_work():
        for out in eng.step():
            if out.finished:
                finals[out.rid] = out.finish_reason
    assert finals == {0: "abort", 1: "length"}
    assert outs  # tokens were streamed before the abort
    eng.scheduler.check_invariants()
    free, used, _ = eng.scheduler.page_counts()
    assert used == 0


def test_add_rejects_bad_input(tiny_model_dir):
    eng = Engine(EngineConfig(model=str(tiny_model_dir("tiny-llama")), device="cpu", cpu_kv_tokens=256))
    with pytest.raises(ValueError):
        eng.add(Req(0, [5, 2000], SamplingParams()))  # id outside the vocabulary
    with pytest.raises(ValueError):
        eng.add(Req(1, [5], SamplingParams(max_tokens=10_000)))  # longer than the pool/model
    with pytest.raises(ValueError):
        eng.add(Req(2, [5], SamplingParams(top_p=0.0)))


def test_warmup_freezes_the_heap_and_shutdown_thaws_it(tiny_model_dir):
    import gc

    gc.unfreeze()
    llm = LLM(str(tiny_model_dir("tiny-llama")), device="cpu", cpu_kv_tokens=1024)
    assert gc.get_freeze_count() == 0
    llm.engine.warmup()
    # a full collection now skips the startup objects (torch, the model, the app)
    assert gc.get_freeze_count() > 10_000
    llm.shutdown()
    assert gc.get_freeze_count() == 0
