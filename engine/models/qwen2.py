"""Qwen2ForCausalLM on the shared decoder (see models/decoder.py for the layout)."""

from __future__ import annotations

from twinserve.engine.models.decoder import CausalLM
from twinserve.engine.models.registry import MODELS


@MODELS.register("Qwen2ForCausalLM")
class Qwen2ForCausalLM(CausalLM):
    """Qwen2: Llama layout with biases on the q/k/v projections (config flag ``qkv_bias``)."""
