"""LlamaForCausalLM on the shared decoder (see models/decoder.py for the layout)."""

from __future__ import annotations

from twinserve.engine.models.decoder import CausalLM
from twinserve.engine.models.registry import MODELS


@MODELS.register("LlamaForCausalLM")
class LlamaForCausalLM(CausalLM):
    """Llama: pre-norm SwiGLU decoder with GQA and RoPE; no biases; optional Llama-3 RoPE scaling."""
