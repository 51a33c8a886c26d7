"""The calibration file: a fitted step-time model for one (GPU, model, TP), stored as JSON.

Format (``version`` 1), one JSON object::

    {
      "version": 1,
      "provenance": {"gpu": "h200", "model": "llama3-8b", "tp": 1, "engine_version": "0.1.0",
                     "dtype": "bfloat16", "date": "2025-01-31", "command": "twinserve-profile ...",
                     "notes": ""},
      "features": ["num_seqs", "new_tokens", ...],          # the features the terms read
      "regimes": {                                          # "decode" and "prefill" required
        "decode":  {"terms": ["1", "num_seqs", "decode_ctx", "padded_decodes"],
                    "coef":  [0.0041, 1.1e-6, 2.4e-10, 3.0e-7],     # seconds per unit of term
                    "mape": 0.021, "n": 1800, "n_test": 360},
        "prefill": {...}, "mixed": {...}                    # "mixed" optional: falls back to prefill
      },
      "cpu": {"terms": ["1", "num_seqs"], "coef": [2e-4, 3e-6], "overlap": true,
              "mape": 0.1, "n": 1800},
      "residuals": {"levels": [0.0, 0.01, ..., 1.0], "ratio": [0.93, 0.96, ..., 1.12]},
      "host": {                                             # optional: the overlap loop's host parts
        "sched": {...}, "complete": {...}, "loop": {...},   # LinearFits like the regimes'
        "launch": {"decode": {...}, "prefill": {...}, "mixed": {...}},
        "tail": {...},                                      # non-graph steps' device tail
        "sync_graph": false, "sync_eager": false,           # launch waits for the device?
        "pre": {...},                                       # graph launch work before its wait
        "slow_share": 0.2, "slow_factor": 1.6               # slow-host episodes left out
      },
      "decode_offsets": {"1": 8e-5, "2": 2e-4, ...},        # optional: seconds added to the decode
                                                            # fit per CUDA-graph batch size
      "decode_scales": {"48": 0.97, "96": 1.4, ...},        # optional: and the factor it is scaled
                                                            # by first (1 where absent)
      "token_graphs": {"largest_graph_step": 2048,          # optional: the profile's prefill/mixed
                       "smallest_eager_step": 2049}         # steps' split (`TokenGraphSplit`)
    }

A term is ``"1"``, a feature name (a ``BatchFeatures`` field, or a derived feature of
``core.batch.DERIVED_FEATURE_NAMES`` such as ``piece_step``), a hinge ``"feature>k"``
(``max(feature - k, 0)``: a slope that starts at ``k``, e.g. where the GEMMs stop being bound by
weight reads), a cap ``"feature<k"``
(``min(feature, k)``: a slope that ends at ``k``), or a product of those (``"a*b"``); hinges and
caps on one feature make a piecewise-linear curve; a regime's prediction is
``sum(coef[i] * term[i])`` in seconds. Regimes: ``decode`` = no prefill chunk in the step,
``prefill`` = no decode, ``mixed`` = both. ``mape`` is the 5-fold cross-validated mean absolute
percentage error (as a fraction; null when not measured) of coefficients that are themselves
fitted on all ``n`` rows; ``n_test`` counts the rows it is measured over. ``residuals`` gives quantiles
of measured / predicted device time at the listed levels (the simulator's noise draws from it).
``host`` splits the host time of the engine's overlap loop into ``sched`` / ``launch`` /
``complete`` / ``loop`` (see ``base.HostParts``); the simulator's ``pipeline`` loop uses it, and
a file without it puts all of ``cpu`` in ``launch``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from twinserve.core.batch import DERIVED_FEATURE_NAMES, BatchFeatures

FORMAT_VERSION = 1
REGIMES = ("decode", "prefill", "mixed")


# A term's factor kinds (`term_factors`): a feature as is, a hinge "f>k", a cap "f<k", and a
# decode wave "f@k": ``f`` with the step's decodes rounded up to whole waves of ``k`` sequences.
FACTOR_OPS: dict[str, str] = {">": "hinge", "<": "cap", "@": "wave"}
WAVE_COUNT = "num_decodes"  # what a wave factor rounds up


def term_factors(term: str) -> list[tuple[str, float | None, str]]:
    """The factors of a term other than ``"1"``, as ``(feature, knot, kind)``: ``(f, None, "")``
    for a feature; ``(f, k, "hinge")`` for ``"f>k"``, ``max(f - k, 0)``; ``(f, k, "cap")`` for
    ``"f<k"``, ``min(f, k)``; ``(f, k, "wave")`` for ``"f@k"``, ``f`` times the step's decodes
    rounded up to a multiple of ``k`` over the decodes (`factor_value`)."""
    out: list[tuple[str, float | None, str]] = []
    for part in term.split("*"):
        for op, kind in FACTOR_OPS.items():
            name, sep, knot = part.partition(op)
            if sep:
                out.append((name, float(knot), kind))
                break
        else:
            out.append((part, None, ""))
    return out


def wave_padded(n: Any, k: float, mx: Callable[[Any, float], Any]) -> Any:
    """``n`` decodes rounded up to whole waves of ``k`` beyond the first: ``n`` up to ``k``,
    else ``ceil(n / k) * k`` (= ``ceil(n / k) * k - max(k - n, 0)``, exact in floats)."""
    return np.ceil(n / k) * k - mx(k - n, 0.0)


def factor_value(f: Any, knot: float | None, kind: str, mx: Callable[[Any, float], Any],
                 waves_of: Any = None) -> Any:
    """One factor of a term (`term_factors`) at feature value ``f``, with ``mx`` the elementwise
    max (``np.maximum`` or ``max``) and ``waves_of`` the step's ``num_decodes`` (wave factors):
    ``f``; ``max(f - k, 0)`` for a hinge; ``min(f, k) = k - max(k - f, 0)`` for a cap; for a
    wave, ``f * wave_padded(n) / max(n, 1)``. A wave models a kernel that runs one thread block
    per (sequence, KV head) in waves of the GPU's resident blocks when the batch is too large
    to split (FlashInfer's CUDA-core decode under CUDA graphs): a partial wave costs a whole one."""
    if knot is None:
        return f
    if kind == "wave":
        return f * wave_padded(waves_of, knot, mx) / mx(waves_of, 1.0)
    return knot - mx(knot - f, 0.0) if kind == "cap" else mx(f - knot, 0.0)


def check_terms(terms: Sequence[str]) -> None:
    """Raise ValueError for a term that is not "1" or a product of features, hinges, caps and
    waves (``"a*b"``, ``"new_tokens>1024"``, ``"padded_tokens<512"``, ``"decode_ctx@64"``)."""
    known = {*BatchFeatures.names(), *DERIVED_FEATURE_NAMES}
    for t in terms:
        if t == "1":
            continue
        try:
            factors = term_factors(t)
        except ValueError:
            raise ValueError(f"calibration term '{t}': a hinge reads 'feature>number', a cap "
                             "'feature<number', a wave 'feature@number'") from None
        bad = [name for name, _, _ in factors if name not in known]
        waves = [k for _, k, kind in factors if kind == "wave"]
        if any(k is None or k < 1 for k in waves):
            raise ValueError(f"calibration term '{t}': a wave's size is a number of sequences >= 1")
        if bad:
            raise ValueError(f"calibration term '{t}': unknown feature(s) {bad}; known: {sorted(known)}")


@dataclass(slots=True)
class Provenance:
    """Where a calibration came from: the measured setup and the command that produced it."""

    gpu: str
    model: str
    tp: int = 1
    engine_version: str = ""
    dtype: str = "bfloat16"
    date: str = ""
    command: str = ""
    notes: str = ""


@dataclass(slots=True)
class LinearFit:
    """A linear model ``sum(coef[i] * term[i])`` (seconds) with its cross-validated error.

    Invariant: ``len(terms) == len(coef)``; every term passes ``check_terms``.
    """

    terms: list[str]
    coef: list[float]
    mape: float | None = None
    n: int = 0
    n_test: int = 0

    def __post_init__(self) -> None:
        if len(self.terms) != len(self.coef):
            raise ValueError(f"{len(self.terms)} terms but {len(self.coef)} coefficients")
        check_terms(self.terms)


@dataclass(slots=True)
class CpuFit(LinearFit):
    """The per-step host time model and whether overlap scheduling hides it."""

    overlap: bool = True


WAKE_IDLE_S = 0.005  # an idle wait longer than this makes the next step a woken one (`HostFit`)


@dataclass(slots=True)
class HostFit:
    """The host side of the engine's overlap loop, one linear model per part (see
    ``base.HostParts``): ``sched``, ``launch`` (per regime, like the device models),
    ``complete``, ``loop``, the eager steps' device ``tail`` past their launch, and whether the
    engine's launch of graph / eager steps waited for the previous step's device end
    (``sync_graph`` / ``sync_eager``). ``pre``: the host work of a waiting graph launch before
    its wait (its ``launch`` is then the part after). ``post``: the host work of a graph launch
    after its replay was enqueued (sampling, the token copy), which runs beside the graph on
    the device. ``slow_share`` / ``slow_factor``: the share
    of profiled steps in slow-host episodes, left out of the fits, and their mean slowdown
    (`host_episodes`); ``slow_episode_s`` their mean length in seconds. After the loop sat idle:
    ``wake``, from the arrival that ends the wait to the loop's start (the engine's ``wake_s``),
    and ``wake_launch``, the extra launch work of the first step when the loop had been idle
    longer than ``wake_idle_s`` (the other parts are fitted on steps without such a wait), of
    which ``wake_post`` more runs after a graph step's replay was enqueued, and ``wake_sched``,
    that step's extra schedule time. ``spec``: the same
    parts for an engine that speculates, fitted on the profile's speculative phase (its loop
    checks every running request for a possible draft and its verify steps score every draft
    position, so all its host parts differ); None without one. ``spread``: quantiles of one
    step's measured / fitted launch work (stalls included), which a simulated step draws its
    host parts' factor from; None: every step at the fit (the plain fit, whose slow stretches
    are episodes). Invariant: ``spec.spec`` is None."""

    sched: LinearFit
    launch: dict[str, LinearFit]
    complete: LinearFit
    loop: LinearFit
    tail: LinearFit = field(default_factory=lambda: LinearFit(["1"], [0.0]))
    sync_graph: bool = False
    sync_eager: bool = False
    pre: LinearFit = field(default_factory=lambda: LinearFit(["1"], [0.0]))
    post: LinearFit = field(default_factory=lambda: LinearFit(["1"], [0.0]))
    slow_share: float = 0.0
    slow_factor: float = 1.0
    slow_episode_s: float = 0.0
    wake: LinearFit = field(default_factory=lambda: LinearFit(["1"], [0.0]))
    wake_launch: LinearFit = field(default_factory=lambda: LinearFit(["1"], [0.0]))
    wake_idle_s: float = WAKE_IDLE_S
    wake_post: LinearFit = field(default_factory=lambda: LinearFit(["1"], [0.0]))
    wake_sched: LinearFit = field(default_factory=lambda: LinearFit(["1"], [0.0]))
    spread: "Residuals | None" = None
    spec: "HostFit | None" = None

    def __post_init__(self) -> None:
        if "decode" not in self.launch or "prefill" not in self.launch:
            raise ValueError("host launch fits need the decode and prefill regimes")
        if self.spec is not None and self.spec.spec is not None:
            raise ValueError("a speculating engine's host fit has no speculating fit of its own")

    def fits(self) -> list[LinearFit]:
        """Every linear model of the host side (each part, each regime's launch; `spec`'s too)."""
        return [self.sched, self.complete, self.loop, self.tail, self.pre, self.post, self.wake, self.wake_launch,
                self.wake_post, self.wake_sched, *self.launch.values(), *(self.spec.fits() if self.spec is not None else [])]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "HostFit":
        zero = {"terms": ["1"], "coef": [0.0]}
        return cls(sched=LinearFit(**d["sched"]), launch={k: LinearFit(**v) for k, v in d["launch"].items()},
                   complete=LinearFit(**d["complete"]), loop=LinearFit(**d["loop"]),
                   tail=LinearFit(**d.get("tail", zero)), pre=LinearFit(**d.get("pre", zero)),
                   post=LinearFit(**d.get("post", zero)),
                   sync_graph=bool(d.get("sync_graph", False)), sync_eager=bool(d.get("sync_eager", False)),
                   slow_share=float(d.get("slow_share", 0.0)), slow_factor=float(d.get("slow_factor", 1.0)),
                   slow_episode_s=float(d.get("slow_episode_s", 0.0)),
                   wake=LinearFit(**d.get("wake", zero)), wake_launch=LinearFit(**d.get("wake_launch", zero)),
                   wake_idle_s=float(d.get("wake_idle_s", WAKE_IDLE_S)),
                   wake_post=LinearFit(**d.get("wake_post", zero)),
                   wake_sched=LinearFit(**d.get("wake_sched", zero)),
                   spread=Residuals(**d["spread"]) if d.get("spread") else None,
                   spec=cls.from_dict(d["spec"]) if d.get("spec") else None)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form `from_dict` reads (no ``spec`` or ``spread`` key where there is none)."""
        d = asdict(self)
        for key in ("spec", "spread"):
            if d[key] is None:
                del d[key]
        if self.spec is not None:
            d["spec"] = self.spec.to_dict()
        return d


@dataclass(slots=True)
class Residuals:
    """Quantiles of measured / predicted time (``levels`` ascending in [0, 1]): of the device
    steps (`Calibration.residuals`) or of a host's launches (`HostFit.spread`)."""

    levels: list[float] = field(default_factory=lambda: [0.0, 1.0])
    ratio: list[float] = field(default_factory=lambda: [1.0, 1.0])

    def __post_init__(self) -> None:
        if len(self.levels) != len(self.ratio) or len(self.levels) < 2:
            raise ValueError("residuals need >= 2 levels and one ratio per level")
        if any(b < a for a, b in zip(self.levels, self.levels[1:])) or \
                any(b < a for a, b in zip(self.ratio, self.ratio[1:])):
            raise ValueError("residual levels and ratios must be non-decreasing")

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(levels, ratio)`` as float64 arrays, as the simulator's noise streams take them."""
        return np.asarray(self.levels, dtype=np.float64), np.asarray(self.ratio, dtype=np.float64)


class SizeTable:
    """Per-CUDA-graph-batch-size values of a decode fit (``decode_offsets`` or
    ``decode_scales``, keys as stored or as ints) with a ``default`` for sizes it does not list,
    looked up for one size or, vectorised, for an array of them (fit rows, fast-forward
    columns): ``table(padded)`` is ``values.get(padded, default)`` either way. Falsy when it
    lists no size."""

    def __init__(self, values: Mapping[Any, float], default: float) -> None:
        self.values = {int(k): float(v) for k, v in values.items()}
        self.default = float(default)
        top = max(self.values, default=0)
        self._arr = np.full(top + 2, self.default)  # the last slot: every size above the table
        for b, v in self.values.items():
            if b >= 0:
                self._arr[b] = v

    def __bool__(self) -> bool:
        return bool(self.values)

    def __call__(self, padded: Any) -> Any:
        if isinstance(padded, np.ndarray):
            idx = np.clip(padded.astype(np.int64), 0, len(self._arr) - 1)
            return self._arr[idx]
        return self.values.get(int(padded), self.default)


class DecodeLines:
    """The decode fit's own line per CUDA-graph batch size: a step's fitted time ``g`` becomes
    ``g * factor + offset`` of its ``padded_decodes`` (`SizeTable`s of ``scales``, default 1,
    and ``offsets``, default 0), on one step or, vectorised, on arrays. Falsy when it lists no
    size; an empty table is skipped rather than applied as the identity."""

    def __init__(self, scales: Mapping[Any, float], offsets: Mapping[Any, float]) -> None:
        self.scales, self.offsets = SizeTable(scales, 1.0), SizeTable(offsets, 0.0)

    def __bool__(self) -> bool:
        return bool(self.scales) or bool(self.offsets)

    def __call__(self, g: Any, padded: Any) -> Any:
        if self.scales:
            g = g * self.scales(padded)
        if self.offsets:
            g = g + self.offsets(padded)
        return g


@dataclass(frozen=True, slots=True)
class TokenGraphSplit:
    """Where the profiled engine's prefill and mixed steps went from token graphs to eager:
    ``largest_graph_step``, the most new tokens of one that replayed token graphs (0: none did);
    ``smallest_eager_step``, the fewest of one that ran eagerly (None: none did). An engine cap
    (``piecewise_max_tokens``) agrees with the profile when it sends every profiled step the
    same way (`admits`); another cap makes the simulator predict the steps between them with
    the other kind's fit."""

    largest_graph_step: int
    smallest_eager_step: int | None = None

    def admits(self, cap: int) -> bool:
        """Whether an engine with token graphs up to ``cap`` tokens ran every profiled step as
        the profile's engine did."""
        return self.largest_graph_step <= cap and (self.smallest_eager_step is None
                                                   or cap < self.smallest_eager_step)

    def describe(self) -> str:
        eager = ("none eagerly" if self.smallest_eager_step is None
                 else f"eagerly from {self.smallest_eager_step}")
        return f"token graphs up to {self.largest_graph_step} tokens, {eager}"


@dataclass(slots=True)
class Calibration:
    """A fitted step-time model for one (GPU, model, TP); see the module docstring for the JSON.

    Invariants: ``regimes`` holds "decode" and "prefill" (and maybe "mixed"); ``version`` is
    ``FORMAT_VERSION``; ``features`` lists every feature any term reads.
    """

    provenance: Provenance
    regimes: dict[str, LinearFit]
    cpu: CpuFit
    residuals: Residuals = field(default_factory=Residuals)
    features: list[str] = field(default_factory=list)
    version: int = FORMAT_VERSION
    host: HostFit | None = None
    decode_offsets: dict[str, float] = field(default_factory=dict)
    decode_scales: dict[str, float] = field(default_factory=dict)
    token_graphs: TokenGraphSplit | None = None

    def __post_init__(self) -> None:
        if self.version != FORMAT_VERSION:
            raise ValueError(f"calibration format version {self.version}; this code reads {FORMAT_VERSION}")
        missing = [r for r in ("decode", "prefill") if r not in self.regimes]
        unknown = [r for r in self.regimes if r not in REGIMES]
        if missing or unknown:
            raise ValueError(f"calibration regimes: missing {missing}, unknown {unknown}")
        host = [] if self.host is None else self.host.fits()
        used = sorted({feat for fit in [*self.regimes.values(), self.cpu, *host] for t in fit.terms
                       if t != "1" for name, _, kind in term_factors(t)
                       for feat in ((name, WAVE_COUNT) if kind == "wave" else (name,))})
        self.features = sorted(set(self.features) | set(used))

    # ---- JSON ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        out = {"version": d["version"], "provenance": d["provenance"], "features": d["features"],
               "regimes": d["regimes"], "cpu": d["cpu"], "residuals": d["residuals"]}
        if self.host is not None:
            out["host"] = self.host.to_dict()
        if self.decode_offsets:
            out["decode_offsets"] = dict(self.decode_offsets)
        if self.decode_scales:
            out["decode_scales"] = dict(self.decode_scales)
        if self.token_graphs is not None:
            out["token_graphs"] = d["token_graphs"]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Calibration":
        return cls(
            version=int(d.get("version", -1)),
            provenance=Provenance(**d["provenance"]),
            features=list(d.get("features", [])),
            regimes={k: LinearFit(**v) for k, v in d["regimes"].items()},
            cpu=CpuFit(**d["cpu"]),
            residuals=Residuals(**d.get("residuals", {})),
            host=HostFit.from_dict(d["host"]) if d.get("host") else None,
            decode_offsets={str(k): float(v) for k, v in (d.get("decode_offsets") or {}).items()},
            decode_scales={str(k): float(v) for k, v in (d.get("decode_scales") or {}).items()},
            token_graphs=TokenGraphSplit(**d["token_graphs"]) if d.get("token_graphs") else None,
        )

    def decode_lines(self) -> DecodeLines:
        """``decode_scales`` and ``decode_offsets`` as one `DecodeLines`."""
        return DecodeLines(self.decode_scales, self.decode_offsets)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Calibration":
        return cls.from_dict(json.loads(Path(path).read_text()))

    def matches(self, gpu: str, model: str, tp: int) -> bool:
        p = self.provenance
        return p.gpu == gpu and p.model == model and int(p.tp) == int(tp)


def find_calibration(gpu: str, model: str, tp: int, dirs: Iterable[str | Path]) -> Path | None:
    """The calibration file for (gpu, model, tp) among ``*.json`` in ``dirs`` (first match in
    directory order, files sorted by name), or None. Files that do not parse are skipped."""
    for d in dirs:
        d = Path(d)
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.json")):
            try:
                cal = Calibration.load(path)
            except (ValueError, KeyError, TypeError, json.JSONDecodeError):
                continue
            if cal.matches(gpu, model, tp):
                return path
    return None
