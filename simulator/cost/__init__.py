"""Cost models: `roofline`, `calibrated`, `constant` (registry `COST_MODELS`), calibration files
(fitting them is `twinserve.calibration`)."""

from twinserve.simulator.cost.base import COST_MODELS, CostModel, FeatureColumns
from twinserve.simulator.cost import calibrated, constant, roofline  # noqa: F401  (registers)
from twinserve.simulator.cost.calibration import (
    Calibration, CpuFit, LinearFit, Provenance, Residuals, find_calibration,
)
from twinserve.simulator.cost.noise import StepNoise

__all__ = [
    "COST_MODELS", "CostModel", "FeatureColumns", "Calibration", "CpuFit", "LinearFit",
    "Provenance", "Residuals", "find_calibration", "StepNoise",
]
