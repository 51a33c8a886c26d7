"""SimPy backend: cost models, the replica process, a multi-replica cluster behind a router
(routers are policies: `twinserve.policies.routing`)."""

from twinserve.simulator.cluster import SimConfig, SimResult, simulate
from twinserve.simulator.cost import COST_MODELS, CostModel
from twinserve.simulator.hardware import HARDWARE, GPUSpec, get_hardware

__all__ = ["COST_MODELS", "CostModel", "GPUSpec", "HARDWARE", "SimConfig", "SimResult", "get_hardware",
           "simulate"]
