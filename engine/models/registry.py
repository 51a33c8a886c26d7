"""`MODELS`: HF architecture name → model class; `build_model` instantiates one on a device."""

from __future__ import annotations

import torch

from twinserve.core.registry import Registry
from twinserve.engine.layers.kernels import Kernels
from twinserve.engine.layers.parallel import SINGLE, TPGroup
from twinserve.engine.model_config import ModelConfig
from twinserve.engine.models.decoder import CausalLM

MODELS: Registry[CausalLM] = Registry("model architecture")


def build_model(cfg: ModelConfig, kernels: Kernels, dtype: torch.dtype, device: torch.device,
                tp: TPGroup = SINGLE, max_positions: int | None = None) -> CausalLM:
    """Allocate (uninitialized) parameters directly on ``device``; load weights afterwards."""
    import twinserve.engine.models.llama  # noqa: F401  (registers the families)
    import twinserve.engine.models.mistral  # noqa: F401
    import twinserve.engine.models.qwen2  # noqa: F401
    import twinserve.engine.models.qwen3  # noqa: F401

    cls = MODELS.get(cfg.architecture)
    with torch.device(device):
        model = cls(cfg, kernels, dtype, tp=tp, max_positions=max_positions)
    return model.eval()
