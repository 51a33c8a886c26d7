"""Speculative decoding on CUDA: greedy output with speculation (ngram, draft=layers:2) equals
plain greedy output token for token in float32 with the torch attention backend (no CUDA graphs:
exact arithmetic paths, no bf16 near-ties), across a batch and chunked prefill; sampled requests
speculate and repeat under a seed; rejection sampling keeps the target's distribution on the
device (chi-square)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

from twinserve.core.request import Req  # noqa: E402
from twinserve.core.sampling import SamplingParams  # noqa: E402

GREEDY = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
CUDA = dict(device="cuda", dtype="float32", attention_backend="torch", cuda_graphs=False, cpu_kv_tokens=4096)


def _run(model, prompts, params, spec=None, **kw):
    from twinserve.engine.engine import Engine, EngineConfig

    eng = Engine(EngineConfig(model=str(model), checked=True, spec=spec or {}, **{**CUDA, **kw}))
    try:
        reqs = [Req(i, p, params, arrival=0.0) for i, p in enumerate(prompts)]
        for r in reqs:
            eng.add(r)
        while eng.has_work():
            eng.step()
            eng.scheduler.check_invariants()
        return [r.output_ids.tolist() for r in reqs], eng.stats()
    finally:
        eng.shutdown()


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(0)
    out = []
    for n, period in ((40, 7), (75, 5), (23, 23), (130, 9)):
        base = rng.integers(3, 1024, size=period)
        out.append(np.tile(base, -(-n // period))[:n].astype(np.int32))
    return out


@pytest.mark.parametrize("spec", [{"method": "ngram", "num_tokens": 4, "ngram_min": 1},
                                  {"method": "draft", "draft": "layers:2", "num_tokens": 3}], ids=["ngram", "layers2"])
@pytest.mark.parametrize("mix", ["batch", "chunked"])
def test_greedy_equals_plain_on_cuda(tiny_model_dir, prompts, spec, mix):
    model = tiny_model_dir("tiny-llama")
    kw = {}
    if mix == "chunked":
        kw["scheduler"] = {"max_num_batched_tokens": 24, "chunked_prefill": True, "chunk_size": 24}
    want, _ = _run(model, prompts, GREEDY, **kw)
    got, stats = _run(model, prompts, GREEDY, spec, **kw)
    assert got == want
    assert stats["spec_decode_num_draft_tokens"] > 0


def test_sampled_requests_speculate_on_cuda(tiny_model_dir, prompts):
    model = tiny_model_dir("tiny-llama")
    hot = SamplingParams(temperature=0.8, seed=5, max_tokens=40, ignore_eos=True)
    spec = {"method": "ngram", "num_tokens": 4, "ngram_min": 1}
    a, stats = _run(model, prompts, hot, spec)
    b, _ = _run(model, prompts, hot, spec)
    assert a == b and all(len(x) == 40 for x in a)
    assert stats["spec_decode_num_draft_tokens"] > 0


def test_rejection_sampling_distribution_on_cuda():
    from twinserve.engine.sampler import Sampler, SamplingBatch
    from twinserve.engine.spec_sampler import rejection_tokens, target_probs

    n, dev = 20000, torch.device("cuda")
    sb = SamplingBatch.from_params([SamplingParams(temperature=0.8)] * n, list(range(n)))
    logits = torch.tensor([2.0, 1.4, 1.0, 0.3, -0.5, -1.0], device=dev).repeat(n, 1)
    probs = target_probs(logits, sb)
    got = rejection_tokens(Sampler(dev, seed=1), probs, torch.zeros(n, dtype=torch.int64, device=dev), sb)
    counts = np.bincount(got.cpu().numpy(), minlength=6)
    want = probs[0].double().cpu().numpy() * n
    assert float(((counts - want) ** 2 / want).sum()) < 20.515  # chi-square, 5 dof, p = 0.001
