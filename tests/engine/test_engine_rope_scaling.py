"""Llama 3.1 RoPE scaling: the engine's logits match transformers' LlamaForCausalLM on the same
random weights at positions past the original context (float32, CPU).

The tiny shape has ``original_max_position_embeddings=64`` and 2,048 positions, so a 300-token
prompt runs mostly past the original context, where the scaled frequencies differ from plain
RoPE's; the same model with plain RoPE is checked to be far off, so the comparison can fail.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from twinserve.core.model_shapes import ModelShape, get_shape
from twinserve.engine.attention.base import AttentionSpec
from twinserve.engine.attention.torch_backend import TorchAttention
from twinserve.engine.kv_pool import KVGeometry, KVPool
from twinserve.engine.layers.kernels import TorchKernels
from twinserve.engine.loader import load_weights
from twinserve.engine.model_config import ModelConfig
from twinserve.engine.models import build_model
from twinserve.engine.models.decoder import ForwardContext
from twinserve.engine.testing import plan_sequences, random_prompts

ATOL = 1e-4
PAGE = 4
SCALED = dataclasses.replace(
    get_shape("tiny-llama"), name="tiny-llama3.1", max_position_embeddings=2048,
    rope_theta=500000.0,
    rope_scaling=(("factor", 8.0), ("high_freq_factor", 4.0), ("low_freq_factor", 1.0),
                  ("original_max_position_embeddings", 64), ("rope_type", "llama3")))


def _engine_logits(mc: ModelConfig, d, prompt: list[int]) -> torch.Tensor:
    model = build_model(mc, TorchKernels(), torch.float32, torch.device("cpu"))
    load_weights(model, d)
    pool = KVPool(KVGeometry(mc.num_layers, 128, PAGE, mc.num_kv_heads, mc.head_dim, torch.float32), "cpu")
    attn = TorchAttention(AttentionSpec(mc.num_heads, mc.num_kv_heads, mc.head_dim, torch.float32, pool, 128))
    pages = list(range(127, 127 - 80, -1))        # out of order, 320 slots
    out = []
    with torch.inference_mode():
        for start, end in ((0, 180), (180, len(prompt))):   # two chunks: the second reads the first's KV
            ids, pos, slots = plan_sequences(attn, [(prompt[start:end], start, pages)], PAGE)
            out.append(model.compute_logits(model(ids, ForwardContext(pos, slots, attn))))
    return torch.cat(out)


def test_config_carries_llama3_scaling(tiny_model_dir) -> None:
    d = tiny_model_dir(SCALED)
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["rope_scaling"]["rope_type"] == "llama3" and cfg["max_position_embeddings"] == 2048
    assert ModelShape.from_hf_config(cfg, name=SCALED.name) == SCALED
    assert ModelConfig.from_dir(d).rope_scaling["factor"] == 8.0


def test_llama3_scaled_logits_match_transformers_past_the_original_context(tiny_model_dir, hf_model) -> None:
    d = tiny_model_dir(SCALED)
    mc = ModelConfig.from_dir(d)
    prompt = random_prompts([300], seed=31)[0]
    hf = hf_model(d)
    assert hf.config.rope_scaling["rope_type"] == "llama3"
    with torch.inference_mode():
        ref = hf(torch.tensor([prompt])).logits[0]
    ours = _engine_logits(mc, d, prompt)
    assert ours.shape == ref.shape
    err = (ours - ref).abs().max().item()
    assert err <= ATOL, f"max |Δlogit| = {err:.2e}"
    assert ref.std().item() > 0.05
    plain = _engine_logits(dataclasses.replace(mc, shape=dataclasses.replace(mc.shape, rope_scaling=None)), d, prompt)
    assert (plain[64:] - ref[64:]).abs().max().item() > 100 * ATOL   # the scaling matters here


@pytest.mark.parametrize("name, positions", [("llama3.1-8b", 131072), ("qwen3-8b", 40960)])
def test_long_context_presets(name: str, positions: int) -> None:
    shape = get_shape(name)
    assert shape.max_position_embeddings == positions
    cfg = shape.to_hf_config()
    if name == "llama3.1-8b":
        assert cfg["rope_scaling"] == {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
        assert cfg["rope_theta"] == 500000.0
    else:
        assert "rope_scaling" not in cfg


def test_model_maker_writes_the_llama31_config(tmp_path) -> None:
    from twinserve.engine.model_maker import main

    main(["--shape", "llama3.1-8b", "--out", str(tmp_path), "--no-weights"])
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["max_position_embeddings"] == 131072 and cfg["rope_scaling"]["factor"] == 8.0
    mc = ModelConfig.from_dir(tmp_path)
    assert mc.rope_scaling["rope_type"] == "llama3" and mc.rope_theta == 500000.0
