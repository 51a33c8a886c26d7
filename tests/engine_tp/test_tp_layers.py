"""Sharding without processes: kv-head layout, lazy checkpoint slices, and that every rank's
shard (safetensors and dummy weights alike) is exactly its slice of the TP=1 parameters."""

from __future__ import annotations

import pytest
import torch

from twinserve.engine.layers.kernels import TorchKernels
from twinserve.engine.layers.lazy_tensor import LazySlice
from twinserve.engine.layers.linear import kv_head_layout
from twinserve.engine.layers.parallel import TPGroup
from twinserve.engine.loader import load_weights
from twinserve.engine.model_config import ModelConfig
from twinserve.engine.models import build_model


@pytest.mark.parametrize("kv,tp,expect", [
    (2, 2, [(0, 1), (1, 1)]),
    (8, 2, [(0, 4), (4, 4)]),
    (1, 2, [(0, 1), (0, 1)]),
    (2, 4, [(0, 1), (0, 1), (1, 1), (1, 1)]),
])
def test_kv_head_layout(kv, tp, expect):
    assert [kv_head_layout(kv, TPGroup(r, tp)) for r in range(tp)] == expect


def test_kv_head_layout_rejects_uneven():
    with pytest.raises(ValueError, match="num_kv_heads"):
        kv_head_layout(3, TPGroup(0, 2))
    with pytest.raises(ValueError, match="neither"):
        kv_head_layout(3, TPGroup(0, 6 * 2 + 2))


def test_lazy_slice_reads_only_the_view():
    full = torch.arange(60.0).view(6, 10)
    seen = []

    class Source:
        def __getitem__(self, index):
            seen.append(index)
            return full[index]

    v = LazySlice(Source(), (6, 10)).narrow(0, 2, 3).narrow(1, 4, 5)
    assert v.shape == (3, 5) and not seen
    assert torch.equal(v.read(), full[2:5, 4:9])
    assert seen == [(slice(2, 5), slice(4, 9))]
    with pytest.raises(ValueError):
        v.narrow(0, 2, 2)


def _params(d, fmt: str, tp: TPGroup) -> dict[str, torch.Tensor]:
    mc = ModelConfig.from_dir(d)
    m = build_model(mc, TorchKernels(), torch.float32, torch.device("cpu"), tp=tp)
    load_weights(m, d, fmt, seed=3)
    return {k: v.detach().clone() for k, v in m.named_parameters()}


def _expected_shard(name: str, full: torch.Tensor, mc: ModelConfig, r: int, tp: int) -> torch.Tensor:
    d = mc.head_dim
    if name.endswith("qkv_proj.weight"):
        q, k, v = full.split([mc.q_size, mc.kv_size, mc.kv_size])
        hq = mc.num_heads // tp
        start, n = kv_head_layout(mc.num_kv_heads, TPGroup(r, tp))
        kv_rows = slice(start * d, (start + n) * d)
        return torch.cat([q[r * hq * d:(r + 1) * hq * d], k[kv_rows], v[kv_rows]])
    if name.endswith("gate_up_proj.weight"):
        g, u = full.chunk(2)
        n = g.shape[0] // tp
        return torch.cat([g[r * n:(r + 1) * n], u[r * n:(r + 1) * n]])
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        n = full.shape[1] // tp
        return full[:, r * n:(r + 1) * n]
    if name.endswith(("embed_tokens.weight", "lm_head.weight")):
        n = -(-full.shape[0] // tp)
        pad = torch.zeros(n * tp - full.shape[0], full.shape[1])
        return torch.cat([full, pad])[r * n:(r + 1) * n]
    return full  # norms: replicated


@pytest.mark.parametrize("shape", ["tiny-llama", "tiny-qwen3", "tiny-llama-kv1"])
@pytest.mark.parametrize("fmt", ["safetensors", "dummy"])
def test_rank_shards_are_slices_of_tp1(shape, fmt, tiny_dir):
    d = tiny_dir(shape)
    mc = ModelConfig.from_dir(d)
    full = _params(d, fmt, TPGroup(0, 1))
    for r in range(2):
        shard = _params(d, fmt, TPGroup(r, 2))
        assert shard.keys() == full.keys()
        for name, p in shard.items():
            exp = _expected_shard(name, full[name], mc, r, 2)
            assert torch.equal(p, exp), f"{shape}/{fmt} rank {r}: {name} is not its TP=1 slice"
