"""Batched token sampling: greedy, temperature, min-p, top-k, top-p, per-request 64-bit seeds,
and the logit processors and log-probabilities of `engine.logits_processing`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from twinserve.core.sampling import SamplingParams, seed64
from twinserve.engine.logits_processing import (
    LogprobsOut, SamplingExtras, apply_min_p, apply_processors, model_logprobs,
)

_MASK32 = 0xFFFFFFFF


@dataclass
class SamplingBatch:
    """Per-row sampling parameters of one step, as host arrays (row order = logits order).

    ``seeded[i]`` says whether row i has a seed, ``seeds[i]`` (int64: the seed's 64 bits) which;
    ``counters[i]`` is the index of the output token being sampled, which makes a seeded
    request's noise depend only on (seed, counter, token id). ``extras`` holds the other options
    of the step's requests (`SamplingExtras`), None when no request of the step sets one.
    """

    temperature: np.ndarray
    top_k: np.ndarray
    top_p: np.ndarray
    seeds: np.ndarray
    counters: np.ndarray
    seeded: np.ndarray | None = None
    extras: SamplingExtras | None = None

    @classmethod
    def from_params(cls, params: Sequence[SamplingParams], counters: Sequence[int]) -> "SamplingBatch":
        n = len(params)
        raw = [p.seed for p in params]
        seeds = np.zeros(n, dtype=np.int64)
        if raw.count(None) == n:
            seeded = np.zeros(n, dtype=bool)
        else:
            seeded = np.fromiter((s is not None for s in raw), bool, n)
            seeds[seeded] = [seed64(s) for s in raw if s is not None]
        return cls(
            temperature=np.fromiter((p.temperature for p in params), np.float32, n),
            top_k=np.fromiter((p.top_k for p in params), np.int64, n),
            top_p=np.fromiter((p.top_p for p in params), np.float32, n),
            seeds=seeds,
            counters=np.asarray(counters, dtype=np.int64),
            seeded=seeded,
        )

    @property
    def seeded_rows(self) -> np.ndarray:
        """Which rows have a seed (from ``seeded``, or where it is None, ``seeds >= 0``)."""
        return self.seeds >= 0 if self.seeded is None else self.seeded

    @property
    def all_greedy(self) -> bool:
        return bool((self.temperature == 0).all())


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mixer (lowbias32) on int64 tensors holding values in [0, 2^32)."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


def seeded_uniform(seeds: torch.Tensor, counters: torch.Tensor, vocab: int) -> torch.Tensor:
    """Counter-based uniforms in (0, 1), [rows, vocab]: a pure function of (seed, counter, id)
    for int64 ``seeds`` holding 64-bit seeds (both halves count; a seed below 2^32 has a zero
    high half, which leaves its stream as the low half alone gives it)."""
    dev = seeds.device
    hi = (seeds >> 32) & _MASK32
    mix_hi = torch.where(hi != 0, _hash32(hi ^ 0x5BD1E995), torch.zeros_like(hi))
    row = _hash32((_hash32(seeds & _MASK32) ^ mix_hi ^ (counters & _MASK32)) & _MASK32)
    ids = torch.arange(vocab, device=dev, dtype=torch.int64)
    x = _hash32((row[:, None] * 0x9E3779B1 + ids[None, :] * 0x85EBCA77) & _MASK32)
    return (x.to(torch.float64) + 0.5).div_(4294967296.0).to(torch.float32)


class Sampler:
    """Turns last-position logits [N, V] into one token id per row.

    Contract: rows with temperature 0 take the argmax; other rows sample from
    softmax(logits / T) restricted to the k highest-ranked tokens and then to the smallest prefix of
    the ranking whose probability reaches top_p (the top token always survives). A seeded row's draw depends only on its seed, its output index and its
    logits (not on batch composition); unseeded rows draw from the sampler's own generator.
    Sampling uses the exponential-race form of the Gumbel-max trick: argmax(p / E) with E ~ Exp(1).
    With ``fused`` (CUDA with triton), a step whose rows set only a temperature (no seed, top-k,
    top-p or extras) samples in one Triton pass over the logits (`engine.triton.gumbel_argmax`:
    the same distribution, its uniforms from Philox keyed by a per-step seed of the sampler's
    host stream).
    With ``sb.extras``, the logit processors run first (greedy rows take the argmax of the
    processed logits), min-p filters after temperature, and ``last_logprobs`` holds the step's
    `LogprobsOut` (None when no row asked for log-probabilities).
    """

    def __init__(self, device: torch.device, seed: int = 0, fused: bool = False) -> None:
        self.device = device
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(seed)
        self.last_logprobs: LogprobsOut | None = None
        self._fused = None
        if fused:
            from twinserve.engine.triton import gumbel_argmax

            self._fused = gumbel_argmax
            self._step_seeds = np.random.default_rng(seed)

    def sample(self, logits: torch.Tensor, sb: SamplingBatch) -> torch.Tensor:
        ex = sb.extras
        if ex is None:
            self.last_logprobs = None
            return self._sample(logits, sb, None)
        raw = logits
        tokens = self._sample(apply_processors(logits.float(), ex), sb, ex)
        self.last_logprobs = model_logprobs(raw, tokens, ex.logprobs) if ex.wants_logprobs else None
        return tokens

    def _sample(self, logits: torch.Tensor, sb: SamplingBatch, ex: SamplingExtras | None) -> torch.Tensor:
        if sb.all_greedy:
            return logits.argmax(dim=-1)
        if self._fused is not None and ex is None and logits.stride(-1) == 1 and self._temperature_only(sb):
            params = torch.from_numpy(self._fused.row_params(sb.temperature)).pin_memory()
            seed = int(self._step_seeds.integers(1 << 31))
            return self._fused.gumbel_argmax(logits, params.to(self.device, non_blocking=True), seed)
        dev = logits.device
        logits = logits.float()
        greedy = torch.from_numpy(sb.temperature == 0).to(dev, non_blocking=True)
        temp = torch.from_numpy(np.where(sb.temperature == 0, 1.0, sb.temperature).astype(np.float32))
        scaled = logits / temp.to(dev, non_blocking=True)[:, None]
        if ex is not None and ex.uses_min_p:
            scaled = apply_min_p(scaled, ex.min_p)
        if (sb.top_k > 0).any() or (sb.top_p < 1).any():
            scaled = self.apply_top_k_top_p(scaled, sb.top_k, sb.top_p)
        probs = torch.softmax(scaled, dim=-1)
        noise = self.exponential_noise(probs.shape, sb)
        sampled = (probs / noise).argmax(dim=-1)
        return torch.where(greedy, logits.argmax(dim=-1), sampled)

    @staticmethod
    def _temperature_only(sb: SamplingBatch) -> bool:
        return not (sb.seeded_rows.any() or (sb.top_k > 0).any() or (sb.top_p < 1).any())

    def exponential_noise(self, shape: torch.Size, sb: SamplingBatch) -> torch.Tensor:
        rows, vocab = shape
        u = torch.rand(shape, generator=self.gen, device=self.device)
        seeded = sb.seeded_rows
        if seeded.any():
            idx = torch.from_numpy(np.nonzero(seeded)[0]).to(self.device)
            s = torch.from_numpy(sb.seeds[seeded]).to(self.device)
            c = torch.from_numpy(sb.counters[seeded]).to(self.device)
            u[idx] = seeded_uniform(s, c, vocab)
        return -torch.log(u)

    @staticmethod
    def apply_top_k_top_p(logits: torch.Tensor, top_k: np.ndarray, top_p: np.ndarray) -> torch.Tensor:
        """Set logits outside each row's top-k and top-p set to -inf (returns a new tensor)."""
        dev = logits.device
        vocab = logits.shape[-1]
        srt, order = logits.sort(dim=-1, descending=True)
        k = torch.from_numpy(np.where(top_k > 0, np.minimum(top_k, vocab), vocab)).to(dev)
        ranks = torch.arange(vocab, device=dev)[None, :]
        drop = ranks >= k[:, None]
        p = torch.from_numpy(top_p.astype(np.float32)).to(dev)
        probs = torch.softmax(srt.masked_fill(drop, float("-inf")), dim=-1)
        before = probs.cumsum(dim=-1) - probs  # mass strictly above this token
        drop |= before >= p[:, None]
        drop[:, 0] = False
        srt = srt.masked_fill(drop, float("-inf"))
        return torch.empty_like(logits).scatter_(-1, order, srt)
