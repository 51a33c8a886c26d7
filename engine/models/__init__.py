"""Model classes by HF architecture name (``config.json`` → ``architectures[0]``)."""

from __future__ import annotations

from twinserve.engine.models.registry import MODELS, build_model

__all__ = ["MODELS", "build_model"]
