"""`calibrated`: step time from a calibration file fitted on the real engine's step records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from twinserve.core.batch import BatchFeatures
from twinserve.simulator.cost.base import COST_MODELS, CostModel, FeatureScalars, HostParts, Max
from twinserve.simulator.cost.calibration import Calibration, LinearFit


def _linear(fit: LinearFit, x: Any) -> Any:
    """sum(coef[i] * term[i]) in a fixed order; terms are "1", "f" or "f*g"."""
    acc: Any = x.num_seqs * 0.0
    for term, c in zip(fit.terms, fit.coef):
        if term == "1":
            acc = acc + float(c)
            continue
        names = term.split("*")
        v = getattr(x, names[0])
        for n in names[1:]:
            v = v * getattr(x, n)
        acc = acc + v * float(c)
    return acc


def _by_regime(x: Any, mx: Max, decode: Any, prefill: Any, mixed: Any) -> Any:
    """Each step's value for its regime (decode: no prefill chunk; prefill: no decode; mixed:
    both), picked with 0/1 indicators so that the formula stays + - * and max."""
    any_prefill = 0.0 - mx(0.0 - x.num_prefills, -1.0)
    any_decode = 0.0 - mx(0.0 - x.num_decodes, -1.0)
    return (decode * (1.0 - any_prefill)
            + prefill * (any_prefill * (1.0 - any_decode))
            + mixed * (any_prefill * any_decode))


@COST_MODELS.register("calibrated")
class CalibratedCostModel(CostModel):
    """Per-regime linear models read from a ``Calibration`` (see calibration.py for the format).

    A step's regime is ``decode`` (no prefill chunk), ``prefill`` (no decode) or ``mixed`` (both;
    the prefill fit when the file has no mixed fit). Device time = the regime's linear model,
    floored at ``min_step_s``; host time = the sum of the ``host`` fits (schedule, launch of the
    step's regime, complete, loop) when the file has them, else its ``cpu`` model; ``host_parts``
    gives the parts; ``overlap`` comes from the file unless overridden.
    When the engine's graph launches waited for the previous step (``host.sync_graph``), the
    step time of a graph step is device + launch (they cannot overlap), which is what the plain
    loop needs; the pipelined loop takes the device part alone from ``host_parts``. ``noise_quantiles`` exposes the file's residual quantiles.
    """

    def __init__(self, calibration: Calibration | str | Path, overlap: bool | None = None,
                 min_step_s: float = 1e-6) -> None:
        cal = calibration if isinstance(calibration, Calibration) else Calibration.load(calibration)
        self.calibration = cal
        self.source = None if isinstance(calibration, Calibration) else str(calibration)
        self.overlap = cal.cpu.overlap if overlap is None else bool(overlap)
        self._decode = cal.regimes["decode"]
        self._prefill = cal.regimes["prefill"]
        self._mixed = cal.regimes.get("mixed", self._prefill)
        self._min = float(min_step_s)
        self._offsets = {int(k): float(v) for k, v in cal.decode_offsets.items()}
        host = cal.host
        self._graph_launch = host.launch["decode"] if host is not None and host.sync_graph else None

    def _gpu(self, x: Any, mx: Max) -> Any:
        decode = _linear(self._decode, x)
        if self._offsets:
            decode = decode + self._offset(x.padded_decodes)
        if self._graph_launch is not None:  # graph launches wait for the device: they add up
            graph = 0.0 - mx(0.0 - x.padded_decodes, -1.0)
            decode = decode + _linear(self._graph_launch, x) * graph
        return mx(_by_regime(x, mx, decode, _linear(self._prefill, x), _linear(self._mixed, x)), self._min)

    def _device(self, f: BatchFeatures, regime: str) -> float:
        """The regime's device fit alone (no launch folded in), floored at ``min_step_s``."""
        fit = {"decode": self._decode, "prefill": self._prefill, "mixed": self._mixed}[regime]
        t = float(_linear(fit, FeatureScalars(f)))
        if regime == "decode" and self._offsets:
            t = t + self._offset(float(f.padded_decodes))
        return max(t, self._min)

    def _offset(self, padded: Any) -> Any:
        """The calibration's decode offset for a graph batch size (a float, or one per element)."""
        if isinstance(padded, np.ndarray):
            return np.array([self._offsets.get(int(b), 0.0) for b in padded], dtype=np.float64)
        return self._offsets.get(int(padded), 0.0)

    def _cpu(self, x: Any, mx: Max) -> Any:
        h = self.calibration.host
        if h is None:
            return mx(_linear(self.calibration.cpu, x), 0.0)
        # the host's own work per step (the recorded cpu_s also holds its waits for the device)
        prefill = h.launch["prefill"]
        launch = _by_regime(x, mx, _linear(h.launch["decode"], x), _linear(prefill, x),
                            _linear(h.launch.get("mixed", prefill), x))
        return mx(_linear(h.sched, x) + launch + _linear(h.complete, x) + _linear(h.loop, x), 0.0)

    def host_parts(self, f: BatchFeatures) -> HostParts:
        h = self.calibration.host
        if h is None:
            return super().host_parts(f)
        x = FeatureScalars(f)
        regime = "decode" if not f.num_prefills else "prefill" if not f.num_decodes else "mixed"
        launch = h.launch.get(regime, h.launch["prefill"])
        parts = (max(float(_linear(fit, x)), 0.0) for fit in (h.sched, launch, h.complete, h.loop, h.tail))
        graph = regime == "decode" and f.padded_decodes > 0
        return HostParts(*parts, graph=graph, sync=h.sync_graph if graph else h.sync_eager,
                         device=self._device(f, regime))

    def noise_quantiles(self) -> tuple[np.ndarray, np.ndarray] | None:
        r = self.calibration.residuals
        return np.asarray(r.levels, dtype=np.float64), np.asarray(r.ratio, dtype=np.float64)

    def describe(self) -> dict[str, Any]:
        p = self.calibration.provenance
        return {"name": "calibrated", "source": self.source, "gpu": p.gpu, "model": p.model,
                "tp": p.tp, "engine_version": p.engine_version, "date": p.date,
                "mape": {k: v.mape for k, v in self.calibration.regimes.items()},
                "overlap": self.overlap}
