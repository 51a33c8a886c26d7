"""Rejection sampling of verify rows (engine/spec_sampler.py): on a vocabulary of 6 with a fixed
seed, the tokens a speculative step emits follow the target's distribution (chi-square), for a
point-mass draft (prompt lookup), a sampled draft distribution and the token after an accepted
draft; a naive sampler that accepts the draft when it is the target's argmax fails the same test."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from twinserve.core.sampling import SamplingParams  # noqa: E402
from twinserve.core.spec import accept_greedy  # noqa: E402
from twinserve.engine.sampler import Sampler, SamplingBatch  # noqa: E402
from twinserve.engine.spec_sampler import rejection_tokens, target_probs, verify_sample  # noqa: E402

V = 6
N = 20000
CRIT_DF5 = 20.515  # chi-square critical values at p = 0.001: 5 degrees of freedom
CRIT_DF3 = 16.266  # 3 degrees of freedom (top-k 4)
LOGITS = (torch.tensor([2.0, 1.4, 1.0, 0.3, -0.5, -1.0]), torch.tensor([-0.2, 0.9, 0.1, 1.5, 0.4, -1.2]))


def chi2(samples: np.ndarray, probs: np.ndarray) -> float:
    """Pearson's statistic over the tokens of nonzero probability; a token of probability 0
    drawn makes it infinite."""
    counts = np.bincount(samples, minlength=V)
    live = probs > 0
    if counts[~live].any():
        return float("inf")
    want = probs[live] * samples.size
    return float(((counts[live] - want) ** 2 / want).sum())


def batch(n: int, temperature: float, top_k: int = -1, counters=None) -> SamplingBatch:
    p = SamplingParams(temperature=temperature, top_k=top_k)
    return SamplingBatch.from_params([p] * n, list(range(n)) if counters is None else counters)


def test_point_mass_draft_emits_the_targets_distribution_and_naive_does_not():
    sb = batch(N, 0.8)
    logits = LOGITS[0].repeat(N, 1)
    probs = target_probs(logits, sb)
    p = probs[0].numpy().astype(np.float64)
    draft_tok = int(p.argmax())
    sampler = Sampler(torch.device("cpu"), seed=1)
    got = rejection_tokens(sampler, probs, torch.full((N,), draft_tok), sb).numpy()
    assert chi2(got, p) < CRIT_DF5
    # the naive verifier: keep the draft whenever it is the target's most likely token
    naive = np.where(probs.argmax(dim=-1).numpy() == draft_tok, draft_tok, got)
    assert chi2(naive, p) > 10 * CRIT_DF5
    # a rejected draft is never emitted by the residual: acceptance happens at rate p(draft)
    assert abs((got == draft_tok).mean() - p[draft_tok]) < 0.02


def test_sampled_draft_distribution_min_p_over_q():
    sb = batch(N, 1.0)
    probs = target_probs(LOGITS[0].repeat(N, 1), sb)
    q = torch.softmax(LOGITS[1], dim=-1).repeat(N, 1)
    g = torch.Generator().manual_seed(3)
    draft = torch.multinomial(q, 1, generator=g)[:, 0]
    got = rejection_tokens(Sampler(torch.device("cpu"), seed=2), probs, draft, sb, draft_probs=q).numpy()
    assert chi2(got, probs[0].numpy().astype(np.float64)) < CRIT_DF5
    # emitting the draft token unchecked gives q, not p
    assert chi2(draft.numpy(), probs[0].numpy().astype(np.float64)) > 10 * CRIT_DF5


def test_verify_rows_first_token_and_token_after_accepted_draft():
    """Rows of two logits rows (a one-token draft, then the bonus position), top-k 4."""
    sb = batch(2 * N, 0.7, top_k=4)
    logits = torch.stack(LOGITS).repeat(N, 1)  # row 2i: position 0, row 2i+1: after the draft
    probs = target_probs(logits[:2], batch(2, 0.7, top_k=4)).numpy().astype(np.float64)
    draft_tok = 1  # the second most likely token: accepted about a quarter of the time
    draft_ids = np.tile(np.array([draft_tok, -1]), N)
    toks = verify_sample(Sampler(torch.device("cpu"), seed=4), logits, sb, draft_ids).numpy().reshape(N, 2)
    emitted = [accept_greedy(np.array([draft_tok]), t) for t in toks]
    first = np.array([e[0] for e in emitted])
    assert chi2(first, probs[0]) < CRIT_DF3
    second = np.array([e[1] for e in emitted if e.size == 2])
    assert second.size == (first == draft_tok).sum() > 1000
    assert chi2(second, probs[1]) < CRIT_DF3


def test_greedy_rows_take_the_argmax_and_seeded_rows_repeat():
    logits = torch.stack(LOGITS)
    greedy = verify_sample(Sampler(torch.device("cpu")), logits, batch(2, 0.0), np.array([3, -1]))
    assert greedy.tolist() == [0, 3]
    sb = SamplingBatch.from_params([SamplingParams(temperature=1.0, seed=9)] * 2, [5, 6])
    a = verify_sample(Sampler(torch.device("cpu"), seed=0), logits, sb, np.array([3, -1]))
    b = verify_sample(Sampler(torch.device("cpu"), seed=1), logits, sb, np.array([3, -1]))
    assert a.tolist() == b.tolist()
