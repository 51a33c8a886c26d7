"""MistralForCausalLM on the shared decoder (see models/decoder.py for the layout)."""

from __future__ import annotations

from twinserve.engine.models.decoder import CausalLM
from twinserve.engine.models.registry import MODELS


@MODELS.register("MistralForCausalLM")
class MistralForCausalLM(CausalLM):
    """Mistral: Llama layout; a sliding window, if configured, caps max_model_len (see engine.py)."""
