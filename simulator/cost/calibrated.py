"""`calibrated`: step time from a calibration file fitted on the real engine's step records."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from twinserve.core.batch import BatchFeatures
from twinserve.simulator.cost.base import COST_MODELS, CostModel, FeatureScalars, HostParts, Max, WakeParts
from twinserve.simulator.cost.calibration import (
    WAVE_COUNT, Calibration, LinearFit, factor_value, term_factors,
)


class _Linear:
    """A `LinearFit` compiled for evaluation: sum(coef[i] * term[i]) in the fit's order; terms
    are "1", "f", "f>k" (``mx(f - k, 0)``), "f<k" (``k - mx(k - f, 0)``), "f@k" (decode
    waves, `calibration.wave_padded`) or products "f*g"
    (`calibration.term_factors`, `calibration.factor_value`),
    parsed once. Called on a ``BatchFeatures``-like ``x`` with ``mx`` as the elementwise max."""

    __slots__ = ("_terms",)

    def __init__(self, fit: LinearFit) -> None:
        self._terms = tuple((float(c), None if t == "1" else tuple(term_factors(t)))
                            for t, c in zip(fit.terms, fit.coef))

    def __call__(self, x: Any, mx: Max) -> Any:
        acc: Any = x.num_seqs * 0.0
        for c, factors in self._terms:
            if factors is None:
                acc = acc + c
                continue
            v: Any = None
            for name, knot, kind in factors:
                f = factor_value(getattr(x, name), knot, kind, mx,
                                 getattr(x, WAVE_COUNT) if kind == "wave" else None)
                v = f if v is None else v * f
            acc = acc + v * c
        return acc


def _by_regime(x: Any, mx: Max, decode: Callable[[], Any], prefill: Callable[[], Any],
               mixed: Callable[[], Any]) -> Any:
    """Each step's value for its regime (decode: no prefill chunk; prefill: no decode; mixed:
    both), the three given as thunks. Columns of steps of several regimes evaluate all three
    and pick with 0/1 indicators, so that the formula stays + - * and max; one step
    (`FeatureScalars`), or columns whose prefill and decode counts are one number each (a
    fast-forward decode stretch, `FeatureColumns.arithmetic`), evaluate their one regime only:
    the value the indicators give (finite values times 1.0 and 0.0), bit for bit."""
    p, d = x.num_prefills, x.num_decodes
    if isinstance(p, float) and isinstance(d, float):
        if not p:
            return decode()
        return mixed() if d else prefill()
    any_prefill = 0.0 - mx(0.0 - x.num_prefills, -1.0)
    any_decode = 0.0 - mx(0.0 - x.num_decodes, -1.0)
    return (decode() * (1.0 - any_prefill)
            + prefill() * (any_prefill * (1.0 - any_decode))
            + mixed() * (any_prefill * any_decode))


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
    loop needs; the pipelined loop takes the device part alone from ``host_parts``.
    ``noise_quantiles`` exposes the file's residual quantiles, ``host_spread`` its host fit's
    ``spread``.
    """

    def __init__(self, calibration: Calibration | str | Path, overlap: bool | None = None,
                 min_step_s: float = 1e-6) -> None:
        cal = calibration if isinstance(calibration, Calibration) else Calibration.load(calibration)
        self.calibration = cal
        self.source = None if isinstance(calibration, Calibration) else str(calibration)
        self.overlap = cal.cpu.overlap if overlap is None else bool(overlap)
        self.batch_ahead = self.overlap and cal.host is not None
        prefill = cal.regimes["prefill"]
        self._device = {"decode": _Linear(cal.regimes["decode"]), "prefill": _Linear(prefill),
                        "mixed": _Linear(cal.regimes.get("mixed", prefill))}
        self._min = float(min_step_s)
        self._lines = cal.decode_lines()
        h = cal.host
        self._cpu_fit = _Linear(cal.cpu)
        self._host: dict[str, _Linear] = {}
        if h is not None:
            self._host = {"sched": _Linear(h.sched), "complete": _Linear(h.complete), "loop": _Linear(h.loop),
                          "tail": _Linear(h.tail), "pre": _Linear(h.pre), "post": _Linear(h.post),
                          **{f"launch/{r}": _Linear(h.launch.get(r, h.launch["prefill"]))
                             for r in ("decode", "prefill", "mixed")}}
            if "verify" in h.launch:  # steps with verify rows launch apart (`host_fit.host_regime`)
                self._host["launch/verify"] = _Linear(h.launch["verify"])
        self._graph_launch = self._host["launch/decode"] if h is not None and h.sync_graph else None

    def _decode_gpu(self, x: Any, mx: Max) -> Any:
        decode = self._lines(self._device["decode"](x, mx), x.padded_decodes)
        if self._graph_launch is not None:  # graph launches wait for the device: they add up,
            graph = 0.0 - mx(0.0 - x.padded_decodes, -1.0)  # less the work after the replay
            launch = mx(self._graph_launch(x, mx) - self._host["post"](x, mx), 0.0)
            decode = decode + launch * graph
        return decode

    def _gpu(self, x: Any, mx: Max) -> Any:
        dev = self._device
        return mx(_by_regime(x, mx, lambda: self._decode_gpu(x, mx), lambda: dev["prefill"](x, mx),
                             lambda: dev["mixed"](x, mx)), self._min)

    def _device_only(self, f: BatchFeatures, regime: str) -> float:
        """The regime's device fit alone (no launch folded in), floored at ``min_step_s``."""
        t = float(self._device[regime](FeatureScalars(f), max))
        if regime == "decode":
            t = self._lines(t, f.padded_decodes)
        return max(t, self._min)

    def _cpu(self, x: Any, mx: Max) -> Any:
        h, hp = self.calibration.host, self._host
        if h is None:
            return mx(self._cpu_fit(x, mx), 0.0)
        # the host's own work per step (the recorded cpu_s also holds its waits for the device)
        def decode() -> Any:
            d = hp["launch/decode"](x, mx)
            if h.sync_graph:  # a graph launch's work before its wait (eager decodes have none)
                d = d + hp["pre"](x, mx) * (0.0 - mx(0.0 - x.padded_decodes, -1.0))
            return d

        def verify(regime: str) -> Callable[[], Any]:  # a step with verify rows launches as `host_parts` says
            own = hp[f"launch/{regime}"]
            if "launch/verify" not in hp:
                return lambda: own(x, mx)

            def blend() -> Any:
                o = own(x, mx)
                return o + (hp["launch/verify"](x, mx) - o) * x.verify_step

            return blend

        launch = _by_regime(x, mx, decode, verify("prefill"), verify("mixed"))
        return mx(hp["sched"](x, mx) + launch + hp["complete"](x, mx) + hp["loop"](x, mx), 0.0)

    def host_parts(self, f: BatchFeatures) -> HostParts:
        h, hp = self.calibration.host, self._host
        if h is None:
            return super().host_parts(f)
        x = FeatureScalars(f)
        regime = "decode" if not f.num_prefills else "prefill" if not f.num_decodes else "mixed"
        launch = "launch/verify" if f.verify_rows and "launch/verify" in hp else f"launch/{regime}"
        parts = (max(float(hp[k](x, max)), 0.0) for k in ("sched", launch, "complete", "loop", "tail"))
        graph = bool(f.graph_replay)
        sync = h.sync_graph if graph else h.sync_eager
        pre = max(float(hp["pre"](x, max)), 0.0) if graph and h.sync_graph else 0.0
        post = max(float(hp["post"](x, max)), 0.0) if graph else 0.0
        return HostParts(*parts, graph=graph, sync=sync, device=self._device_only(f, regime), pre=pre, post=post)

    def serial_wall(self, f: BatchFeatures, gpu: float, cpu: float) -> float:
        """With a host model: ``schedule()``, the launch with the device span placed as
        `HostParts` says (a graph step's span starts ``post`` before the launch ends, an eager
        one's as the launch starts), then ``complete()`` and the loop; without one, the default."""
        if self.calibration.host is None:
            return super().serial_wall(f, gpu, cpu)
        h = self.host_parts(f)
        dev = gpu if h.device is None else h.device
        if h.graph:
            run = h.pre + h.launch - h.post + max(h.post, dev)
        else:
            run = h.pre + max(h.launch + h.tail, dev)
        return h.sched + run + h.complete + h.loop

    def wake_parts(self) -> WakeParts:
        h = self.calibration.host
        if h is None:
            return WakeParts()
        one = FeatureScalars(BatchFeatures())
        delay, launch, post, sched = (max(float(_Linear(fit)(one, max)), 0.0)
                                      for fit in (h.wake, h.wake_launch, h.wake_post, h.wake_sched))
        return WakeParts(delay, launch, max(float(h.wake_idle_s), 0.0), min(post, launch), sched)

    def speculating(self) -> "CalibratedCostModel":
        """With a host fit of the profile's speculative phase (`HostFit.spec`): a model whose host
        parts are those; else this model."""
        h = self.calibration.host
        if h is None or h.spec is None:
            return self
        out = CalibratedCostModel(replace(self.calibration, host=h.spec), overlap=self.overlap, min_step_s=self._min)
        out.source = self.source
        return out

    def noise_quantiles(self) -> tuple[np.ndarray, np.ndarray] | None:
        return self.calibration.residuals.arrays()

    def host_spread(self) -> tuple[np.ndarray, np.ndarray] | None:
        h = self.calibration.host
        if h is None or h.spread is None:
            return None
        return h.spread.arrays()

    def describe(self) -> dict[str, Any]:
        p = self.calibration.provenance
        return {"name": "calibrated", "source": self.source, "gpu": p.gpu, "model": p.model,
                "tp": p.tp, "engine_version": p.engine_version, "date": p.date,
                "mape": {k: v.mape for k, v in self.calibration.regimes.items()},
                "overlap": self.overlap}
