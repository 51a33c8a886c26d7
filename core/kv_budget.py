"""The KV pool's sizing defaults, shared by the engine (`EngineConfig`) and the simulator's
KV plan (`simulator.kv_plan.kv_pages`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KvBudget:
    """How much device memory a replica gives to weights and the KV pool.

    Contract: ``mem_fraction`` in (0, 1] is the share of device memory (per rank) for weights
    plus KV pool; ``dtype_bytes`` the bytes of one weight and one KV element (2: bf16). The
    class attributes are the knobs' one defaults: ``kv.mem_fraction: null`` / ``kv.dtype_bytes:
    null`` in the conf tree, `EngineConfig.mem_fraction`, the simulator's KV plan, the roofline
    cost model and `ModelShape.kv_bytes_per_token` resolve to them.
    """

    mem_fraction: float = 0.9
    dtype_bytes: int = 2
