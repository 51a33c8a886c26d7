"""Objects from a run config: model shape, hardware, workload, scheduler factory, cost model."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from twinserve.core.config import SchedulerConfig
from twinserve.core.errors import UserError
from twinserve.core.graph_plan import GraphPlan
from twinserve.core.model_shapes import MODEL_SHAPES, ModelShape, get_shape
from twinserve.core.run_config import from_cfg
from twinserve.core.spec import SpecConfig
from twinserve.core.spec_accept import AcceptanceModel, may_draft_after, read_acceptance_file
from twinserve.core.spec_step import SpecDecoding
from twinserve.core.workload import Workload, build as build_workload_by_name
from twinserve.simulator.cost import COST_MODELS, CostModel, find_calibration
from twinserve.simulator.draft_price import draft_price
from twinserve.simulator.hardware import GPUSpec, get_hardware
from twinserve.simulator.kv_plan import kv_pages

CALIBRATIONS_DIR = Path(__file__).parent / "calibrations"


def plain(node: Any) -> Any:
    """An OmegaConf node (or anything) as plain dicts and lists, resolved."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(node, (DictConfig, ListConfig)):
            return OmegaConf.to_container(node, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return node


def no_nulls(d: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in dict(d or {}).items() if v is not None}


# The ModelShape fields that step times depend on: two shapes equal in these share calibrations.
COST_FIELDS = ("family", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
               "intermediate_size", "vocab_size")


def _differences(a: ModelShape, b: ModelShape) -> list[str]:
    return [f"{f} {getattr(a, f)} vs {getattr(b, f)}" for f in COST_FIELDS if getattr(a, f) != getattr(b, f)]


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """The model a run uses: its shape (named after what it is) and, when ``model.path`` holds
    another model than the preset ``model.name``, why it was renamed (``mismatch``)."""

    shape: ModelShape
    mismatch: str | None = None


def resolve_model(model: Mapping[str, Any]) -> ModelChoice:
    """``model.path`` (a directory or a config.json) read through `ModelShape.from_hf_config`,
    else the named preset. A path whose architecture differs from the preset ``model.name``
    (`COST_FIELDS`) is named after the preset it equals, else after its directory, so that a
    calibration is looked up for the model that runs, never for the preset's."""
    path = model.get("path")
    name = str(model["name"])
    if not path:
        return ModelChoice(get_shape(name))
    p = Path(path)
    cfg_file = p / "config.json" if p.is_dir() else p
    shape = ModelShape.from_hf_config(json.loads(cfg_file.read_text()), name=name)
    preset = MODEL_SHAPES.get(name)
    if preset is None or not _differences(shape, preset):
        return ModelChoice(shape)
    same = next((n for n, s in MODEL_SHAPES.items() if not _differences(shape, s)), None)
    own = same or (p.name if p.is_dir() else p.parent.name)
    why = (f"model.path={path} is not model.name={name} ({', '.join(_differences(shape, preset)[:3])}); "
           f"it runs as {own}" + (" (a known shape)" if same else ""))
    return ModelChoice(replace(shape, name=own), why)


def model_shape(model: Mapping[str, Any]) -> ModelShape:
    """The shape of `resolve_model`."""
    return resolve_model(model).shape


def hardware_spec(hw: Mapping[str, Any]) -> GPUSpec:
    return get_hardware(str(hw["name"]), **{k: v for k, v in hw.items() if k != "name"})


def build_workload(wl: Mapping[str, Any], vocab_size: int) -> Workload:
    """The workload named ``wl.name`` with the remaining non-null keys as builder kwargs, token
    ids drawn from the model's vocabulary. A builder's ValueError or TypeError (a key's value it
    refuses) becomes a `UserError` that lists the keys given."""
    kwargs = no_nulls({k: v for k, v in wl.items() if k != "name"})
    try:
        return build_workload_by_name(str(wl["name"]), **kwargs).with_vocab(vocab_size)
    except UserError:
        raise
    except (TypeError, ValueError) as e:  # a builder refusing its keys' values
        given = " ".join(f"workload.{k}={v}" for k, v in kwargs.items() if not isinstance(v, Mapping))
        raise UserError(f"workload={wl['name']} cannot be built from {given}: {e}", "workload") from e


def scheduler_config(cfg: Mapping[str, Any], shape: ModelShape, hw: GPUSpec) -> SchedulerConfig:
    """The simulated engine's SchedulerConfig (`RunChoices.scheduler_config`): the pool of
    ``kv.num_pages`` pages, else the pages the device memory holds (`kv_plan.kv_pages`), and the
    model's ``max_model_len`` (``model.max_model_len`` or its max_position_embeddings)."""
    rc = from_cfg(cfg)
    num_pages = rc.num_pages or kv_pages(shape, hw, rc.tp, rc.page_size, rc.mem_fraction, rc.dtype_bytes)
    return rc.scheduler_config(num_pages, rc.max_model_len or shape.max_position_embeddings)


def graph_plan(cfg: Mapping[str, Any], shape: ModelShape, sc: SchedulerConfig) -> GraphPlan:
    """The simulated engine's `GraphPlan` (`RunChoices.graph_plan`): ``sc``'s ``max_running`` and
    the model's GQA group on one rank (`ModelShape.gqa_group`)."""
    rc = from_cfg(cfg)
    return rc.graph_plan(sc.max_running, shape.gqa_group(rc.tp))


def scheduler_factory(cfg: Mapping[str, Any], sc: SchedulerConfig, checked: bool = False,
                      num_layers: int = 0) -> Callable[[], Any]:
    """A zero-argument function that builds one fresh Scheduler per call (one per replica);
    with ``spec`` set, each speculates through the config's `AcceptanceModel`, a draft model's
    proposals priced by `draft_price` (``num_layers``: the target's, for ``layers:N``). ``make.made``
    lists the schedulers built so far, in order (replica i is the i-th)."""
    from twinserve.policies.factory import build_scheduler

    spec, accept = sim_speculation(cfg)
    price = draft_price(spec, accept, num_layers) if accept is not None else None
    rc = from_cfg(cfg)
    pol = rc.policies
    made: list[Any] = []

    def make() -> Any:
        s = build_scheduler(
            SchedulerConfig(**{f.name: getattr(sc, f.name) for f in fields(SchedulerConfig)}),
            scheduling=pol.scheduling, memory=pol.memory, cache=pol.cache,
            scheduling_kwargs=pol.scheduling_kwargs, memory_kwargs=pol.memory_kwargs,
            cache_kwargs=pol.cache_kwargs, eos_token_ids=rc.eos_token_ids, checked=checked)
        if accept is not None:
            s.spec = SpecDecoding(spec, accept.propose, hinted=True, may_after=may_draft_after(accept, spec))
            s.spec.draft_price = price
        made.append(s)
        return s

    make.made = made  # type: ignore[attr-defined]
    return make


def sim_speculation(cfg: Mapping[str, Any]) -> tuple[SpecConfig, AcceptanceModel | None]:
    """The run's ``spec`` node and, when speculation is on, the simulator's acceptance model."""
    rc = from_cfg(plain(cfg))
    spec = SpecConfig.of(rc.spec)
    if not spec.enabled:
        return spec, None
    if spec.auto_batch:
        cut = measured_spec_cutoff(rc.spec.get("acceptance_file"))
        if cut < 1:  # the engine measured that speculation pays at no batch size
            return SpecConfig(), None
        spec = replace(spec, max_batch_size=0 if math.isinf(cut) else int(cut))
    return spec, AcceptanceModel.from_config(rc.spec, spec.num_tokens, rc.seed)


def measured_spec_cutoff(path: str | None) -> float:
    """``spec.max_batch_size=auto`` on the simulator: the cutoff the engine found, the
    ``spec_max_batch_size`` of ``spec.acceptance_file`` (an engine run's summary.json; infinite:
    no limit); UserError without one, as the simulator has no steps of its own to measure."""
    cut = read_acceptance_file(path).get("spec_max_batch_size") if path else None
    if cut is None:
        raise UserError("spec.max_batch_size=auto on the simulator takes the cutoff an engine measured: "
                        "spec.acceptance_file=SUMMARY of an engine run with spec.max_batch_size=auto, or "
                        "give a batch size", key="spec.max_batch_size")
    return float(cut)


class CalibrationMismatchWarning(UserWarning):
    """A simulation whose engine settings send some of the calibration profile's steps another
    way than the profiled engine did (their times are predicted by the other kind's fit)."""


def token_graph_mismatch(model: CostModel, plan: GraphPlan, source: str | None) -> str | None:
    """Why ``plan``'s token-graph cap disagrees with the calibration behind ``model``
    (`TokenGraphSplit.admits`), or None when it agrees or nothing is recorded."""
    cal = getattr(model, "calibration", None)
    split = getattr(cal, "token_graphs", None)
    cap = plan.piecewise_max_tokens
    if split is None or split.admits(cap):
        return None
    if cap < split.largest_graph_step:
        steps = f"of {cap + 1}-{split.largest_graph_step} tokens run eagerly here and ran as token graphs there"
    else:
        steps = f"of {split.smallest_eager_step}-{cap} tokens run as token graphs here and ran eagerly there"
    return (f"calibration {source or '(given)'} was profiled on an engine with {split.describe()}; with "
            f"scheduler.piecewise_max_tokens={cap} prefill and mixed steps {steps}, so their times are "
            f"extrapolated (set scheduler.piecewise_max_tokens to the profiled engine's cap, or use a "
            f"calibration of this engine)")


@dataclass(frozen=True, slots=True)
class CostChoice:
    """The cost model a run uses and why (``source``: the calibration file, or None)."""

    model: CostModel
    name: str
    source: str | None


def cost_model(cm: Mapping[str, Any], shape: ModelShape, hw: GPUSpec, tp: int) -> CostChoice:
    """Resolve ``cost_model``: ``auto`` means calibrated when a calibration file for
    (hw.name, shape.name, tp) exists in ``experiments/calibrations`` or ``calibration_dirs``,
    else roofline."""
    name = str(cm["name"])
    overlap = cm.get("overlap")
    given = [str(d) for d in cm.get("calibration_dirs") or []]
    missing = [d for d in given if not Path(d).is_dir()]
    if missing:
        raise UserError(f"cost_model.calibration_dirs: no such directory: {', '.join(missing)}",
                        "cost_model.calibration_dirs")
    dirs = [*given, CALIBRATIONS_DIR]
    path = cm.get("path")
    if name in ("auto", "calibrated") and not path:
        found = find_calibration(hw.name, shape.name, tp, dirs)
        path = str(found) if found else None
        if name == "calibrated" and path is None:
            raise UserError(f"cost_model=calibrated: no calibration for (gpu={hw.name}, model={shape.name}, "
                            f"tp={tp}) in {[str(d) for d in dirs]}; allowed: cost_model=auto or roofline, "
                            f"or cost_model.path=FILE", "cost_model.name")
    if name == "auto":
        name = "calibrated" if path else "roofline"
    if name == "calibrated":
        model = COST_MODELS.create("calibrated", calibration=path, overlap=overlap)
        return CostChoice(model, name, path)
    if name == "roofline":
        kw = no_nulls(cm.get("roofline"))
        if overlap is not None:
            kw["overlap"] = overlap
        return CostChoice(COST_MODELS.create("roofline", shape=shape, hardware=hw, tp=tp, **kw), name, None)
    kwargs = no_nulls({k: v for k, v in cm.items() if k not in ("name", "calibration_dirs", "path")})
    return CostChoice(COST_MODELS.create(name, **kwargs), name, None)
