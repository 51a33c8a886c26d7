"""Rejection sampling for verify rows: the tokens a speculative step emits follow the target's
distribution at any temperature (Leviathan et al., "Fast Inference from Transformers via
Speculative Decoding", 2023).

A verify row scores ``1 + d`` positions; at position j < d the draft proposed ``t_j`` with draft
probability ``q_j`` (a point mass on ``t_j`` for prompt lookup and for a greedy draft model). The
target's processed distribution there is ``p_j`` (temperature, top-k, top-p). Position j keeps
``t_j`` with probability ``min(1, p_j(t_j) / q_j(t_j))``; otherwise it emits a token from the
residual ``max(0, p_j - q_j)`` renormalised (for a point mass: ``p_j`` without ``t_j``), which
differs from ``t_j``. The last position samples ``p_d`` plainly. `core.spec.accept_greedy` then
keeps the agreeing prefix and the first differing token: exactly the rejection sampler's output.
"""

from __future__ import annotations

import numpy as np
import torch

from twinserve.engine.sampler import Sampler, SamplingBatch, seeded_uniform

_ACCEPT_STREAM = 0x5EC0DEC0  # xor-ed into a seed: its acceptance uniforms differ from its sampling noise


def target_probs(logits: torch.Tensor, sb: SamplingBatch) -> torch.Tensor:
    """softmax(logits / T) after top-k and top-p, [N, V] float32 (rows with T > 0 only)."""
    dev = logits.device
    temp = torch.from_numpy(sb.temperature.astype(np.float32)).to(dev)
    scaled = logits.float() / temp[:, None]
    if (sb.top_k > 0).any() or (sb.top_p < 1).any():
        scaled = Sampler.apply_top_k_top_p(scaled, sb.top_k, sb.top_p)
    return torch.softmax(scaled, dim=-1)


def accept_uniforms(sampler: Sampler, sb: SamplingBatch) -> torch.Tensor:
    """One uniform in (0, 1) per row: a seeded row's is a pure function of (seed, counter)."""
    n = sb.temperature.size
    u = torch.rand(n, generator=sampler.gen, device=sampler.device)
    seeded = sb.seeded_rows
    if seeded.any():
        idx = torch.from_numpy(np.nonzero(seeded)[0]).to(sampler.device)
        s = torch.from_numpy(sb.seeds[seeded] ^ _ACCEPT_STREAM).to(sampler.device)
        c = torch.from_numpy(sb.counters[seeded]).to(sampler.device)
        u[idx] = seeded_uniform(s, c, 1)[:, 0]
    return u


def rejection_tokens(sampler: Sampler, probs: torch.Tensor, draft: torch.Tensor, sb: SamplingBatch,
                     draft_probs: torch.Tensor | None = None) -> torch.Tensor:
    """The token each row emits given the target's ``probs`` [N, V] and the proposed ``draft``
    [N] (int64): the draft itself when accepted, else a residual sample. ``draft_probs`` [N, V]:
    the draft's distributions (None: point masses on ``draft``)."""
    rows = torch.arange(probs.shape[0], device=probs.device)
    if draft_probs is None:
        q = torch.zeros_like(probs)
        q[rows, draft] = 1.0
    else:
        q = draft_probs.float()
    p_t = probs[rows, draft]
    q_t = q[rows, draft].clamp_min(1e-30)
    accept = accept_uniforms(sampler, sb) < torch.clamp(p_t / q_t, max=1.0)
    residual = (probs - q).clamp_min(0.0)
    mass = residual.sum(dim=-1, keepdim=True)
    residual = torch.where(mass > 0, residual / mass.clamp_min(1e-30), probs)
    noise = sampler.exponential_noise(residual.shape, sb)
    resampled = (residual / noise).argmax(dim=-1)
    return torch.where(accept, draft, resampled)


def _rows(sb: SamplingBatch, idx: np.ndarray) -> SamplingBatch:
    return SamplingBatch(temperature=sb.temperature[idx], top_k=sb.top_k[idx], top_p=sb.top_p[idx],
                         seeds=sb.seeds[idx], counters=sb.counters[idx],
                         seeded=None if sb.seeded is None else sb.seeded[idx])


def verify_sample(sampler: Sampler, logits: torch.Tensor, sb: SamplingBatch, draft: np.ndarray) -> torch.Tensor:
    """Tokens for every logits row of a step with verify rows: ``draft[i]`` is the token
    proposed at logits row i (-1 where none is: a row's last position, or a plain row).
    Rows without a draft and greedy rows sample as `Sampler.sample` does (greedy verification is
    the argmax); sampled rows with a draft go through `rejection_tokens`."""
    tokens = sampler.sample(logits, sb)
    idx = np.flatnonzero((draft >= 0) & (sb.temperature > 0))
    if idx.size == 0:
        return tokens
    sub = _rows(sb, idx)
    dev = logits.device
    sel = torch.from_numpy(idx).to(dev)
    probs = target_probs(logits[sel], sub)
    d = torch.from_numpy(draft[idx].astype(np.int64)).to(dev)
    tokens[sel] = rejection_tokens(sampler, probs, d, sub).to(tokens.dtype)
    return tokens
