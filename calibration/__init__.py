"""Fitting a calibrated cost model on the engine's step records (pandas): the device regimes
(`fit`), the host parts of the overlap loop (`host_fit`), slow-host episodes (`host_episodes`),
the engine's step timeline (`timeline`) and its device clock's drift (`clock`), feature columns
and least squares (`linear`, `nnls`). The simulator reads the result
(`simulator.cost.calibration.Calibration`) and never imports this package."""

from twinserve.calibration.fit import fit_calibration

__all__ = ["fit_calibration"]
