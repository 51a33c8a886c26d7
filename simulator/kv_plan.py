"""How many KV pages a simulated replica has: device memory minus weights, per rank."""

from __future__ import annotations

from twinserve.core.config import scheduler_default
from twinserve.core.errors import UserError
from twinserve.core.kv_budget import KvBudget
from twinserve.core.model_shapes import ModelShape
from twinserve.simulator.hardware import GPUSpec


def kv_pages(shape: ModelShape, hw: GPUSpec, tp: int = 1, page_size: int = scheduler_default("page_size"),
             mem_fraction: float = KvBudget.mem_fraction, dtype_bytes: int = KvBudget.dtype_bytes) -> int:
    """KV pages of one replica: per rank, ``memory * mem_fraction - weights / tp``, divided by the
    per-rank bytes of one page (``page_size`` tokens x 2 (K and V) x layers x KV heads per rank x
    head_dim x ``dtype_bytes``; KV heads split across ranks, replicated when fewer than ``tp``).
    Activations are not modelled (the engine reserves them out of the same share).
    Raises `UserError` when the weights alone do not fit."""
    weights = shape.param_count() * dtype_bytes / tp
    budget = hw.memory * mem_fraction - weights
    kv_heads = -(-shape.num_kv_heads // tp)
    page_bytes = page_size * 2 * shape.num_layers * kv_heads * shape.head_dim * dtype_bytes
    pages = int(budget // page_bytes)
    if pages < 1:
        raise UserError(f"{shape.name} ({weights / 1e9:.1f} GB per rank at tp={tp}) leaves no KV memory on "
                        f"{hw.name} ({hw.memory / 1e9:.0f} GB x kv.mem_fraction={mem_fraction}); raise tp, "
                        f"kv.mem_fraction or the hardware, or give kv.num_pages", "tp")
    return pages
