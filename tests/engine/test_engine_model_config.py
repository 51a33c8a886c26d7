"""`ModelConfig`: the core `ModelShape` of a HF config plus the engine-only fields."""

from __future__ import annotations

import pytest

from twinserve.core.model_shapes import MODEL_SHAPES, ModelShape
from twinserve.engine.model_config import ModelConfig


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "llama3.1-8b"])
def test_shape_is_the_core_parse(name: str) -> None:
    cfg = MODEL_SHAPES[name].to_hf_config()
    mc = ModelConfig.from_dict(cfg)
    assert mc.shape == ModelShape.from_hf_config(cfg)
    assert (mc.num_layers, mc.num_kv_heads, mc.head_dim, mc.q_size, mc.kv_size) == \
        (mc.shape.num_layers, mc.shape.num_kv_heads, mc.shape.head_dim, mc.shape.q_size, mc.shape.kv_size)
    assert mc.rope_scaling == mc.shape.rope_scaling_dict()


def test_engine_only_fields() -> None:
    cfg = {**MODEL_SHAPES["tiny-llama"].to_hf_config(), "attention_bias": True, "eos_token_id": [2, 7],
           "architectures": ["Qwen3ForCausalLM"], "torch_dtype": None, "dtype": "float16"}
    mc = ModelConfig.from_dict(cfg, {"eos_token_id": 9})
    assert mc.qkv_bias and mc.qk_norm and not mc.shape.qk_norm
    assert (mc.torch_dtype, mc.bos_token_id, mc.eos_token_ids) == ("float16", 1, (2, 7, 9))
    plain = ModelConfig.from_dict(MODEL_SHAPES["tiny-qwen2"].to_hf_config())
    assert plain.qkv_bias and not plain.qk_norm and plain.eos_token_ids == (2,)
