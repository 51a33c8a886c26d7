"""How many KV pages fit: decided before the Scheduler is built (SchedulerConfig.num_pages)."""

from __future__ import annotations

import torch

from twinserve.core.graph_plan import DEFAULT_PLAN
from twinserve.engine.kv_pool import KVGeometry
from twinserve.engine.model_config import ModelConfig

_FIXED_RESERVE = 1 << 30  # CUDA context slack, attention workspaces, graph pools


def activation_reserve(cfg: ModelConfig, max_tokens: int, max_graph_bs: int, dtype: torch.dtype,
                       tp_size: int = 1) -> int:
    """Bytes kept free for one step's activations: a prefill of ``max_tokens`` tokens (qkv,
    gate/up, intermediate and a few hidden-sized buffers, float32 norm temporaries) and the
    float32 logits/sampling buffers of ``max_graph_bs`` rows, at least the default plan's
    (`core.graph_plan.DEFAULT_PLAN`); doubled for allocator slack. With
    tensor parallelism the head and intermediate dimensions are a rank's share (logits are
    gathered to the full vocabulary on every rank)."""
    elem = torch.empty((), dtype=dtype).element_size()
    sharded = (cfg.q_size + 2 * cfg.kv_size + 3 * cfg.intermediate_size) // max(1, tp_size)
    per_tok = (sharded + 6 * cfg.hidden_size) * elem
    per_tok += 2 * cfg.hidden_size * 4
    logits = 4 * max(max_graph_bs, DEFAULT_PLAN.max_graph_bs) * cfg.vocab_size * 4
    return 2 * (max_tokens * per_tok + logits) + _FIXED_RESERVE


def plan_num_pages(geom_wo_pages: KVGeometry, device: torch.device, mem_fraction: float,
                   reserve_bytes: int, cpu_kv_tokens: int) -> int:
    """Pages for the pool: on CUDA, (free memory − reserve) × mem_fraction; on CPU, the token
    capacity ``cpu_kv_tokens``. Raises when not even one page fits."""
    page_bytes = geom_wo_pages.bytes_per_page
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        free, _ = torch.cuda.mem_get_info(device)
        usable = int((free - reserve_bytes) * mem_fraction)
        pages = usable // page_bytes
    else:
        pages = -(-cpu_kv_tokens // geom_wo_pages.page_size)
    if pages < 1:
        raise RuntimeError(f"no room for the KV pool: {page_bytes} bytes per page, reserve {reserve_bytes}")
    return int(pages)
