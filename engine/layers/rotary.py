"""Rotary position embedding tables (plain RoPE and Llama-3 frequency scaling)."""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import torch

from twinserve.core.registry import Registry

InvFreqFn = Callable[[float, int, Mapping[str, Any]], torch.Tensor]
ROPE_SCALING: Registry[InvFreqFn] = Registry("rope scaling")


@ROPE_SCALING.register("default")
def default_inv_freq(theta: float, dim: int, params: Mapping[str, Any]) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


@ROPE_SCALING.register("llama3")
def llama3_inv_freq(theta: float, dim: int, params: Mapping[str, Any]) -> torch.Tensor:
    """Llama 3.1 scaling: long wavelengths divided by ``factor``, a smooth ramp in between."""
    inv = default_inv_freq(theta, dim, params)
    factor = float(params["factor"])
    low, high = float(params["low_freq_factor"]), float(params["high_freq_factor"])
    old_len = float(params["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def cos_sin_cache(theta: float, head_dim: int, max_positions: int,
                  scaling: Mapping[str, Any] | None = None) -> torch.Tensor:
    """Float32 table [max_positions, head_dim]: cos of each frequency, then sin.

    Computed like transformers does (float32 positions times float32 inverse frequencies), so
    the rotations match bit for bit on CPU.
    """
    kind = "default"
    params: Mapping[str, Any] = {}
    if scaling:
        kind = str(scaling.get("rope_type", scaling.get("type", "default")))
        params = scaling
    inv = ROPE_SCALING.get(kind)(theta, head_dim, params)
    t = torch.arange(max_positions, dtype=torch.int64).float()
    freqs = t[:, None] * inv[None, :]
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).contiguous()
