"""Objects from a run config: model shape, hardware, workload, scheduler factory, cost model."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from twinserve.core.config import SchedulerConfig
from twinserve.core.model_shapes import ModelShape, get_shape
from twinserve.core.workload import Workload, build as build_workload_by_name
from twinserve.simulator.cost import COST_MODELS, CostModel, find_calibration
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


def model_shape(model: Mapping[str, Any]) -> ModelShape:
    """``model.path`` (a directory or a config.json) read through `ModelShape.from_hf_config`,
    else the named preset."""
    path = model.get("path")
    if path:
        p = Path(path)
        p = p / "config.json" if p.is_dir() else p
        return ModelShape.from_hf_config(json.loads(p.read_text()), name=str(model["name"]))
    return get_shape(str(model["name"]))


def hardware_spec(hw: Mapping[str, Any]) -> GPUSpec:
    return get_hardware(str(hw["name"]), **{k: v for k, v in hw.items() if k != "name"})


def build_workload(wl: Mapping[str, Any], vocab_size: int) -> Workload:
    """The workload named ``wl.name`` with the remaining non-null keys as builder kwargs, token
    ids drawn from the model's vocabulary."""
    kwargs = no_nulls({k: v for k, v in wl.items() if k != "name"})
    return build_workload_by_name(str(wl["name"]), **kwargs).with_vocab(vocab_size)


def scheduler_config(cfg: Mapping[str, Any], shape: ModelShape, hw: GPUSpec) -> SchedulerConfig:
    """SchedulerConfig from ``cfg.scheduler`` knobs, ``cfg.kv`` (pool size), the model's
    ``max_model_len`` (``model.max_model_len`` or its max_position_embeddings) and its GQA group
    on one rank (`ModelShape.gqa_group`)."""
    knobs = {f.name for f in fields(SchedulerConfig)}
    values = {k: v for k, v in cfg["scheduler"].items() if k in knobs}
    kv = cfg.get("kv", {})
    page_size = int(values.get("page_size", 16))
    num_pages = kv.get("num_pages") or kv_pages(shape, hw, int(cfg.get("tp", 1)), page_size,
                                                float(kv.get("mem_fraction", 0.9)),
                                                int(kv.get("dtype_bytes", 2)))
    values["num_pages"] = int(num_pages)
    values["max_model_len"] = int(cfg["model"].get("max_model_len") or shape.max_position_embeddings)
    values["gqa_group"] = shape.gqa_group(int(cfg.get("tp", 1)))
    sc = SchedulerConfig(**values)
    sc.validate()
    return sc


def scheduler_factory(cfg: Mapping[str, Any], sc: SchedulerConfig, checked: bool = False) -> Callable[[], Any]:
    """A zero-argument function that builds one fresh Scheduler per call (one per replica)."""
    from twinserve.policies.factory import build_scheduler

    def make() -> Any:
        return build_scheduler(
            SchedulerConfig(**{f.name: getattr(sc, f.name) for f in fields(SchedulerConfig)}),
            scheduling=str(cfg["scheduler"]["name"]), memory=str(cfg["memory"]["name"]),
            cache=str(cfg["cache"]["name"]), scheduling_kwargs=cfg["scheduler"].get("kwargs") or {},
            memory_kwargs=cfg["memory"].get("kwargs") or {}, cache_kwargs=cfg["cache"].get("kwargs") or {},
            eos_token_ids=cfg["model"].get("eos_token_ids") or (), checked=checked)

    return make


class CalibrationMismatchWarning(UserWarning):
    """A simulation whose engine settings send some of the calibration profile's steps another
    way than the profiled engine did (their times are predicted by the other kind's fit)."""


def token_graph_mismatch(model: CostModel, sc: SchedulerConfig, source: str | None) -> str | None:
    """Why ``sc``'s token-graph cap disagrees with the calibration behind ``model``
    (`TokenGraphSplit.admits`), or None when it agrees or nothing is recorded."""
    cal = getattr(model, "calibration", None)
    split = getattr(cal, "token_graphs", None)
    cap = sc.piecewise_max_tokens
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
    dirs = [*(cm.get("calibration_dirs") or []), CALIBRATIONS_DIR]
    path = cm.get("path")
    if name in ("auto", "calibrated") and not path:
        found = find_calibration(hw.name, shape.name, tp, dirs)
        path = str(found) if found else None
        if name == "calibrated" and path is None:
            raise FileNotFoundError(f"no calibration for (gpu={hw.name}, model={shape.name}, tp={tp}) "
                                    f"in {[str(d) for d in dirs]}; use cost_model=roofline")
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
