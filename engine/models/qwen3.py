"""Qwen3ForCausalLM on the shared decoder (see models/decoder.py for the layout)."""

from __future__ import annotations

from twinserve.engine.models.decoder import CausalLM
from twinserve.engine.models.registry import MODELS


@MODELS.register("Qwen3ForCausalLM")
class Qwen3ForCausalLM(CausalLM):
    """Qwen3: Llama layout plus per-head RMSNorm on q and k before RoPE (``qk_norm``)."""
