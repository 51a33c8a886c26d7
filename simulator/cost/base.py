"""The cost-model interface: batch features in, seconds out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from twinserve.core.batch import BatchFeatures, prompt_rows_of, verify_step_of
from twinserve.core.graph_plan import piece_step_of
from twinserve.core.registry import Registry

# Fields of a decode stretch's steps that only its first step may hold (`FeatureColumns.arithmetic`):
# the first decodes of the requests whose prefill ended just before it.
FIRST_STEP_ONLY: frozenset[str] = frozenset({"first_decodes"})

# The elementwise maximum a formula uses: builtin ``max`` on floats, ``np.maximum`` on arrays.
Max = Callable[[Any, Any], Any]


def _as_column(v: Any, size: int) -> np.ndarray:
    """A formula's result as a float64 array of ``size`` (a scalar result is repeated)."""
    if isinstance(v, np.ndarray) and v.shape == (size,) and v.dtype == np.float64:
        return v
    return np.full(size, v, dtype=np.float64) if np.ndim(v) == 0 else np.asarray(v, np.float64)


class FeatureColumns:
    """The features of several steps as one float64 array per ``BatchFeatures`` field.

    It quacks like a ``BatchFeatures`` (same attribute names, the derived ``piece_step``
    included), so a cost formula written once evaluates one step (on a ``BatchFeatures``) or
    many (on ``FeatureColumns``) with the same IEEE operations in the same order: both paths
    give bit-identical times.
    """

    def __init__(self, feats: Sequence[BatchFeatures]) -> None:
        names = BatchFeatures.names()
        data = np.array([[getattr(f, n) for n in names] for f in feats], dtype=np.float64)
        data = data.reshape(len(feats), len(names))
        for i, n in enumerate(names):
            setattr(self, n, data[:, i])
        self.size = len(feats)

    @classmethod
    def arithmetic(cls, first: BatchFeatures, second: BatchFeatures, j0: int, m: int) -> "FeatureColumns":
        """Steps ``j0 .. j0+m-1`` of a sequence whose features grow linearly: step ``j`` is
        ``first + j * (second - first)`` field by field (a fast-forward decode stretch: every
        sequence gains one token per step), except the fields of `FIRST_STEP_ONLY`, which hold
        ``first``'s value at step 0 and ``second``'s after it. Integer arithmetic, then one
        conversion to float; a field that does not change stays a Python float (formulas
        broadcast it)."""
        self = cls.__new__(cls)
        j: np.ndarray | None = None
        for n in BatchFeatures.names():
            a, b = getattr(first, n), getattr(second, n)
            if a == b or (n in FIRST_STEP_ONLY and j0 > 0):
                setattr(self, n, float(b))
                continue
            if n in FIRST_STEP_ONLY:
                col = np.full(m, b, dtype=np.float64)
                col[0] = a
                setattr(self, n, col)
                continue
            if j is None:
                j = np.arange(j0, j0 + m, dtype=np.int64)
            setattr(self, n, (a + (b - a) * j).astype(np.float64))
        self.size = m
        return self

    def column(self, name: str) -> np.ndarray | float:
        """A field's values: an array, or one float when every step has the same value."""
        return getattr(self, name)

    @property
    def piece_step(self) -> np.ndarray | float:
        return piece_step_of(self.graph_replay, self.eager_step)  # type: ignore[attr-defined]

    @property
    def verify_step(self) -> np.ndarray | float:
        return verify_step_of(self.verify_rows)  # type: ignore[attr-defined]

    @property
    def prompt_rows(self) -> np.ndarray | float:
        return prompt_rows_of(self.num_prefills, self.verify_rows)  # type: ignore[attr-defined]


class FeatureScalars:
    """One step's features as Python floats (so integer products round like the vector path)."""

    __slots__ = tuple(BatchFeatures.names())

    def __init__(self, f: BatchFeatures) -> None:
        for n in self.__slots__:
            setattr(self, n, float(getattr(f, n)))

    @property
    def piece_step(self) -> float:
        return piece_step_of(self.graph_replay, self.eager_step)  # type: ignore[attr-defined]

    @property
    def verify_step(self) -> float:
        return verify_step_of(self.verify_rows)  # type: ignore[attr-defined]

    @property
    def prompt_rows(self) -> float:
        return prompt_rows_of(self.num_prefills, self.verify_rows)  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class HostParts:
    """The host side of one step in the engine's overlap loop, in seconds: ``sched`` (the
    scheduler's ``schedule()``, before the device may start the step), ``launch`` (input copy,
    attention plan and kernel launches), ``complete`` (``complete()`` once the step's tokens are
    back) and ``loop`` (the rest of a loop iteration: the serving driver around ``step()``).
    How the device span meets the launch: a ``graph`` step starts on the device only once its
    replay is enqueued, ``post`` before its launch ends (the launch's last host work runs beside
    the graph); an eager one runs as it is launched and ends at least ``tail`` after the
    launch. ``sync``: the launch itself waits for the previous step's device end, after
    ``pre`` of its own work (the inputs it prepares first); ``launch`` is the part after the
    wait (without ``sync``, ``pre`` is simply more launch work). ``device``:
    the device's own work for the step when it differs from ``step_time`` (which, for the
    simulator's plain loop, may fold in host work the device waits for); None = ``step_time``.
    Invariant: every time >= 0."""

    sched: float
    launch: float
    complete: float
    loop: float
    tail: float = 0.0
    graph: bool = False
    sync: bool = False
    device: float | None = None
    pre: float = 0.0
    post: float = 0.0


@dataclass(frozen=True, slots=True)
class WakeParts:
    """What the engine's loop pays for having sat idle, in seconds: ``delay`` from the arrival
    that ends the wait to the loop's next iteration, and ``sched`` and ``launch``, extra schedule
    and launch work of that iteration's step when the wait lasted longer than ``idle_s``, of
    which ``post`` runs after a graph step's replay was enqueued. Invariant: all >= 0,
    ``post <= launch``."""

    delay: float = 0.0
    launch: float = 0.0
    idle_s: float = 0.0
    post: float = 0.0
    sched: float = 0.0


class CostModel(ABC):
    """How long one scheduler step takes on a backend that does not exist here.

    Contract:
    - ``_gpu(x, mx)`` / ``_cpu(x, mx)`` are the model, written once over ``x`` (a
      ``BatchFeatures`` or ``FeatureColumns``) with ``mx`` as elementwise max; they use only
      + - * /, max and ``np.ceil``, so scalar and vector evaluation agree bit for bit.
    - ``step_time(f)`` is the device (GPU) time of one step, ``cpu_time(f)`` the host time the
      scheduler and input preparation take for it. ``overlap`` says whether the host prepares step
      k+1 while the device runs step k: the step's wall time is then ``max(gpu, cpu)``, otherwise
      ``gpu + cpu`` (``wall_time``). ``host_parts(f)`` splits the host time into the parts of the
      engine's overlap loop (`HostParts`), for the simulator's ``pipeline`` loop.
    - ``noise_quantiles()`` returns (levels, multiplicative factors) of the model's residual
      distribution, or None; the simulator draws noise from it on its own random stream.
      ``host_spread()`` likewise for one step's host parts (the ``pipeline`` loop draws them).
    - ``batch_ahead``: the model describes an engine whose overlap loop fixes each batch one
      step ahead (a calibration fitted on such an engine's timeline); the simulator's plain loop
      then lags arrivals by one step (``SimConfig.lag_arrivals``, Hydra ``backend.lag_arrivals=auto``).
    - A model is immutable after construction and holds no random state.
    """

    overlap: bool = True
    batch_ahead: bool = False

    @abstractmethod
    def _gpu(self, x: Any, mx: Max) -> Any: ...

    def _cpu(self, x: Any, mx: Max) -> Any:
        return x.num_seqs * 0.0

    # ---- one step -----------------------------------------------------------------------
    def step_time(self, f: BatchFeatures) -> float:
        return float(self._gpu(FeatureScalars(f), max))

    def cpu_time(self, f: BatchFeatures) -> float:
        return float(self._cpu(FeatureScalars(f), max))

    def step_costs(self, f: BatchFeatures) -> tuple[float, float]:
        """``(step_time(f), cpu_time(f))`` with one conversion of the features."""
        x = FeatureScalars(f)
        return float(self._gpu(x, max)), float(self._cpu(x, max))

    def wall_time(self, gpu: float, cpu: float) -> float:
        return max(gpu, cpu) if self.overlap else gpu + cpu

    def serial_wall(self, f: BatchFeatures, gpu: float, cpu: float) -> float:
        """The wall time of a step the engine runs without overlap (with speculation: a step
        formed while a verify step may come), ``gpu`` and ``cpu`` its device and host times.
        Default: their sum."""
        return gpu + cpu

    def host_parts(self, f: BatchFeatures) -> HostParts:
        """The step's host time split the way the engine's overlap loop spends it (the
        simulator's ``pipeline`` loop uses it). Default: all of ``cpu_time`` is launch work."""
        return HostParts(0.0, self.cpu_time(f), 0.0, 0.0)

    def wake_parts(self) -> WakeParts:
        """The loop's cost of waking from an idle wait (the ``pipeline`` loop pays it). Default:
        nothing."""
        return WakeParts()

    def speculating(self) -> "CostModel":
        """The model of the same engine when it speculates (its replicas' schedulers have
        ``spec``). Default: this model."""
        return self

    # ---- many steps (fast-forward) --------------------------------------------------------
    def step_times(self, feats: Sequence[BatchFeatures] | FeatureColumns) -> np.ndarray:
        cols = feats if isinstance(feats, FeatureColumns) else FeatureColumns(feats)
        return _as_column(self._gpu(cols, np.maximum), cols.size)

    def cpu_times(self, feats: Sequence[BatchFeatures] | FeatureColumns) -> np.ndarray:
        cols = feats if isinstance(feats, FeatureColumns) else FeatureColumns(feats)
        return _as_column(self._cpu(cols, np.maximum), cols.size)

    def wall_times(self, gpu: np.ndarray, cpu: np.ndarray) -> np.ndarray:
        return np.maximum(gpu, cpu) if self.overlap else gpu + cpu

    def noise_quantiles(self) -> tuple[np.ndarray, np.ndarray] | None:
        return None

    def host_spread(self) -> tuple[np.ndarray, np.ndarray] | None:
        return None

    def describe(self) -> dict[str, Any]:
        """Metadata for summary.json (name and parameters)."""
        return {"name": type(self).__name__}


COST_MODELS: Registry[CostModel] = Registry("cost model")
