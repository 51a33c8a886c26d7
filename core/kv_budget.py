"""The KV pool's sizing defaults, shared by the engine (`EngineConfig`) and the simulator's
KV plan (`simulator.kv_plan.kv_pages`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KvBudget:
    """How much device memory a replica gives to weights and the KV pool.

    Contract: ``mem_fraction`` in (0, 1] is the share of device memory (per rank) for weights
    plus KV pool. Its class attribute is the one default of the knob: ``kv.mem_fraction: null``
    in the conf tree and `EngineConfig.mem_fraction` both resolve to it.
    """

    mem_fraction: float = 0.9
