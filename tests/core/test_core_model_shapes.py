"""`ModelShape.from_hf_config`: the one reader of a HF config's architecture keys."""

from __future__ import annotations

from twinserve.core.model_shapes import MODEL_SHAPES, ModelShape


def test_named_shapes_round_trip_through_hf_config() -> None:
    for name, shape in MODEL_SHAPES.items():
        assert ModelShape.from_hf_config(shape.to_hf_config(), name=name) == shape


def test_rope_parameters_give_theta_and_scaling() -> None:
    """A config that carries RoPE only in ``rope_parameters`` (no ``rope_theta`` key)."""
    cfg = MODEL_SHAPES["llama3.1-8b"].to_hf_config()
    scaling = cfg.pop("rope_scaling")
    del cfg["rope_theta"]
    cfg["rope_parameters"] = {**scaling, "rope_theta": 500000.0}
    shape = ModelShape.from_hf_config(cfg, name="llama3.1-8b")
    assert shape.rope_theta == 500000.0
    assert shape == MODEL_SHAPES["llama3.1-8b"]


def test_omitted_keys_take_the_field_defaults() -> None:
    cfg = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": None,
           "intermediate_size": 128, "vocab_size": 100}
    shape = ModelShape.from_hf_config(cfg)
    bare = ModelShape("custom", "llama", 64, 2, 4, 4, 16, 128, 100)
    assert shape == bare
