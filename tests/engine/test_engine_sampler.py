"""Sampler: greedy, top-k/top-p masks, temperature, seeded reproducibility (CPU)."""

from __future__ import annotations

import numpy as np
import torch

from twinserve.core.sampling import SamplingParams
from twinserve.engine.sampler import Sampler, SamplingBatch, seeded_uniform


def _sb(params, counters=None):
    return SamplingBatch.from_params(params, counters or [0] * len(params))


def test_greedy_is_argmax():
    logits = torch.randn(5, 100)
    out = Sampler(torch.device("cpu")).sample(logits, _sb([SamplingParams(temperature=0)] * 5))
    assert torch.equal(out, logits.argmax(-1))


def test_top_k_top_p_masks():
    logits = torch.log(torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05],
                                     [0.05, 0.1, 0.15, 0.2, 0.5],
                                     [0.5, 0.2, 0.15, 0.1, 0.05]]))
    masked = Sampler.apply_top_k_top_p(logits, np.array([2, -1, -1]), np.array([1.0, 0.8, 0.5], np.float32))
    keep = torch.isfinite(masked)
    assert keep.tolist() == [
        [True, True, False, False, False],   # top-2
        [False, False, True, True, True],    # nucleus 0.8: 0.5 + 0.2 + 0.15 (>= 0.8 reached at 3rd)
        [True, False, False, False, False],  # 0.5 alone reaches 0.5
    ]
    assert torch.equal(masked[keep], logits[keep])


def test_sampling_stays_inside_mask_and_follows_distribution():
    s = Sampler(torch.device("cpu"), seed=0)
    probs = torch.tensor([0.6, 0.3, 0.1, 0.0])
    logits = torch.log(probs.clamp_min(1e-30)).repeat(4000, 1)
    out = s.sample(logits, _sb([SamplingParams(temperature=1.0)] * 4000))
    freq = torch.bincount(out, minlength=4).float() / 4000
    assert torch.allclose(freq, probs, atol=0.03)
    out_k = s.sample(logits, _sb([SamplingParams(temperature=1.0, top_k=1)] * 4000))
    assert (out_k == 0).all()
    out_p = s.sample(logits, _sb([SamplingParams(temperature=1.0, top_p=0.85)] * 4000))
    assert set(out_p.tolist()) == {0, 1}


def test_seeded_rows_reproducible_and_batch_independent():
    torch.manual_seed(0)
    logits = torch.randn(3, 500)
    p = [SamplingParams(temperature=1.0, seed=42), SamplingParams(temperature=0.7),
         SamplingParams(temperature=1.0, seed=7, top_p=0.9)]
    a = Sampler(torch.device("cpu"), seed=1).sample(logits, _sb(p, [5, 0, 3]))
    b = Sampler(torch.device("cpu"), seed=2).sample(logits[[2, 0]], _sb([p[2], p[0]], [3, 5]))
    assert a[0] == b[1] and a[2] == b[0]
    draws = {int(Sampler(torch.device("cpu")).sample(logits[:1], _sb([p[0]], [c]))[0]) for c in range(40)}
    assert len(draws) > 5  # the counter advances the stream


def test_seeded_uniform_is_uniform():
    u = seeded_uniform(torch.tensor([3, 4]), torch.tensor([0, 0]), 50000)
    assert u.min() > 0 and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.01
    assert not torch.equal(u[0], u[1])
