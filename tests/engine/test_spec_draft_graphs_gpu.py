"""draft=layers:N on CUDA with FlashInfer and CUDA graphs: the draft replays its own graphs,
its graphed proposals equal eager ones on the same pages, and a draft of every layer (the
target itself) has its proposals accepted. bf16, so near-ties may flip: agreement thresholds,
on a model whose greedy outputs vary (checked)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="needs flashinfer"),
]

from twinserve.core.request import Req  # noqa: E402
from twinserve.core.sampling import SamplingParams  # noqa: E402
from twinserve.engine.testing import GPU_SHAPES  # noqa: E402

# GQA groups 2 (CUDA-core decode) and 4 (tensor-core decode), head_dim 128 like the benchmarks
SHAPES = {"group2": GPU_SHAPES["qwen3"], "group4": GPU_SHAPES["llama"]}
GREEDY = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)


@pytest.fixture(scope="module", params=sorted(SHAPES))
def model_dir(request, tmp_path_factory):
    from twinserve.engine.model_maker import make_model

    return make_model(SHAPES[request.param], tmp_path_factory.mktemp(request.param), seed=0, dtype="bfloat16",
                      std=0.1)


def _prompts(n: int = 6) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.integers(3, 1024, size=int(m)).astype(np.int32) for m in rng.integers(20, 90, size=n)]


def _engine(model_dir, layers: int, **kw):
    from twinserve.engine.engine import Engine, EngineConfig

    return Engine(EngineConfig(model=str(model_dir), device="cuda", checked=True, cpu_kv_tokens=8192,
                               spec={"method": "draft", "draft": f"layers:{layers}", "num_tokens": 4}, **kw))


def test_graphed_proposals_equal_eager_ones(model_dir):
    from twinserve.engine.spec_draft_paged import PagedDraft

    eng = _engine(model_dir, 2, overlap=False)  # every step settled: the pages hold what the host knows
    try:
        draft = eng.scheduler.spec.propose
        assert draft.paged.graphs, "the draft captured no CUDA graphs"
        eager = PagedDraft(eng.model, 2, eng.pool, eng.executor.draft_runtime.make_attention(spec=draft.paged.attn.spec),
                           eng.pool.side_pages, draft.paged.max_rows, 4, graphs=False)
        reqs = [Req(i, p, GREEDY, arrival=0.0) for i, p in enumerate(_prompts())]
        for r in reqs:
            eng.add(r)
        agree = total = 0
        seen: set[int] = set()
        for _ in range(12):
            eng.step()
            live = [r for r in reqs if r in eng.scheduler.running and r.num_tokens - r.num_computed == 1]
            if not live:
                continue
            graphed = draft.propose(live, 4)
            alone = eager.propose([r.pages for r in live], [r.num_computed for r in live],
                                  [int(r.tokens[r.num_tokens - 1]) for r in live], 4)
            agree += int((graphed == alone).sum())
            total += graphed.size
            seen.update(graphed.ravel().tolist())
    finally:
        eng.shutdown()
    assert total > 0 and len(seen) > 8  # the proposals vary
    assert agree >= 0.9 * total, (agree, total)


def test_draft_of_every_layer_is_accepted(model_dir):
    eng = _engine(model_dir, 3)
    try:
        assert eng.scheduler.spec.propose.paged.graphs
        reqs = [Req(i, p, GREEDY, arrival=0.0) for i, p in enumerate(_prompts())]
        for r in reqs:
            eng.add(r)
        while eng.has_work():
            eng.step()
            eng.scheduler.check_invariants()
        stats = eng.stats()
    finally:
        eng.shutdown()
    assert all(len(r.output_ids) == 48 for r in reqs)
    assert len({t for r in reqs for t in r.output_ids.tolist()}) > 8
    assert stats["spec_decode_num_accepted_tokens"] >= 0.9 * stats["spec_decode_num_draft_tokens"] > 0, stats
