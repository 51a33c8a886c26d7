"""Checks of a resolved config (plain dicts) shared by the console scripts; each failure is a
`UserError` that names the key, the value given and what is allowed.

Registry names are looked up through `NamedKey` (the registry's module is imported only when
the check runs), so this module depends on nothing outside `core`.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twinserve.core.errors import UnknownNameError, UserError, bad_value
from twinserve.core.model_shapes import MODEL_SHAPES, ModelShape

MISSING = "???"


@dataclass(frozen=True, slots=True)
class NamedKey:
    """A config key whose value is a registry name: ``names()`` lists the known ones, ``extra``
    are accepted values that are not registry entries (``auto``)."""

    key: str
    kind: str
    names: Callable[[], list[str]]
    extra: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RangedKey:
    """A numeric config key and the values it allows: at least ``low`` (above it with
    ``low_open``) and at most ``high``. A null or absent key is always allowed (it means the
    reading dataclass's default); ``unset`` says what null means, for the message."""

    key: str
    low: float
    low_open: bool = False
    high: float = math.inf
    unset: str = ""

    def allowed(self) -> str:
        lo = f"> {self.low:g}" if self.low_open else f">= {self.low:g}"
        rng = f"a number {lo}" + (f" and <= {self.high:g}" if math.isfinite(self.high) else "")
        return f"allowed: {rng}" + (f", or null ({self.unset})" if self.unset else "")

    def check(self, cfg: Mapping[str, Any]) -> None:
        value = lookup(cfg, self.key)
        if value is None:
            return
        try:
            x = float(value)
        except (TypeError, ValueError):
            x = math.nan
        ok = (not isinstance(value, bool) and not math.isnan(x) and x <= self.high
              and (x > self.low if self.low_open else x >= self.low))
        if not ok:
            raise bad_value(self.key, value, self.allowed())


# The numeric keys of the shared config nodes (run and serve) with their ranges; a workload's
# own keys are its builder's to check (`experiments.build.build_workload`).
RANGED_KEYS: tuple[RangedKey, ...] = (
    RangedKey("seed", 0),
    RangedKey("replicas", 1),
    RangedKey("scheduler.max_num_batched_tokens", 1),
    RangedKey("scheduler.max_running", 1),
    RangedKey("scheduler.chunk_size", 1),
    RangedKey("scheduler.page_size", 1, unset="the default page size"),
    RangedKey("model.max_model_len", 1, unset="the model's own"),
    RangedKey("kv.mem_fraction", 0, low_open=True, high=1, unset="the default share"),
    RangedKey("kv.num_pages", 1, unset="as many pages as the device memory holds"),
    RangedKey("kv.dtype_bytes", 1, unset="bf16"),
    RangedKey("spec.num_tokens", 0),
    RangedKey("slo.ttft_ms", 0, low_open=True, unset="no goodput"),
    RangedKey("slo.tpot_ms", 0, low_open=True, unset="no goodput"),
    RangedKey("slo.e2e_ms", 0, low_open=True, unset="no goodput"),
    RangedKey("server.port", 0, high=65535, unset="the default port"),
    RangedKey("server.queue_limit", 1, unset="no limit"),
    RangedKey("workload.num_requests", 1, unset="all of a trace's requests"),
    RangedKey("workload.rate", 0, low_open=True, unset="a trace's own arrivals"),
)


def check_ranges(cfg: Mapping[str, Any], keys: Sequence[RangedKey] = RANGED_KEYS) -> None:
    """Every numeric key of ``keys`` that the config sets lies in its range."""
    for rk in keys:
        rk.check(cfg)


def registry_names(module: str, attr: str) -> Callable[[], list[str]]:
    """The names of registry ``module.attr``, imported when called."""
    def names() -> list[str]:
        return importlib.import_module(module).__dict__[attr].names()

    return names


def lookup(cfg: Mapping[str, Any], key: str) -> Any:
    """The value at dotted ``key`` (None where a part is absent)."""
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, Mapping):
        for k, v in node.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, node


def check_mandatory(cfg: Mapping[str, Any]) -> None:
    """No key is left at ``???`` (Hydra's mandatory marker)."""
    for key, value in _leaves(cfg):
        if value == MISSING:
            raise UserError(f"{key} is mandatory and was not given ({key}=???); add {key}=VALUE "
                            f"to the command line", key)


def check_names(cfg: Mapping[str, Any], keys: Sequence[NamedKey]) -> None:
    """Every registry name at ``keys`` is known (``module:Class`` plugins are left to the
    registry; ``router`` only matters with several replicas)."""
    for nk in keys:
        if nk.key == "router" and int(cfg.get("replicas", 1) or 1) <= 1:
            continue
        value = lookup(cfg, nk.key)
        if value is None or ":" in str(value):
            continue
        known = nk.names()
        if str(value) not in known and str(value) not in nk.extra:
            raise UnknownNameError(nk.kind, str(value), [*known, *nk.extra], nk.key)


def check_model(cfg: Mapping[str, Any]) -> None:
    """``model.path`` exists (a directory with config.json, or the config.json), or else
    ``model.name`` is a known model shape."""
    model = cfg.get("model") or {}
    path = model.get("path")
    if path:
        p = Path(str(path))
        if not p.exists():
            raise bad_value("model.path", path, "no such file or directory (give a model directory "
                                                "holding config.json, or the config.json)")
        if p.is_dir() and not (p / "config.json").exists():
            raise bad_value("model.path", path, "the directory has no config.json")
    elif model.get("name") is not None and str(model["name"]) not in MODEL_SHAPES:
        raise UnknownNameError("model", str(model["name"]), MODEL_SHAPES, "model.name",
                               " (or give model.path=DIR)")


def check_tp(tp: int, shape: ModelShape) -> None:
    """``tp`` splits the attention heads evenly, and the KV heads evenly or replicated (a
    divisor or a multiple of the KV head count)."""
    heads, kv = shape.num_heads, shape.num_kv_heads
    if tp >= 1 and heads % tp == 0 and (kv % tp == 0 or tp % kv == 0):
        return
    ok = [t for t in range(1, heads + 1) if heads % t == 0 and (kv % t == 0 or t % kv == 0)]
    raise bad_value("tp", tp, f"model {shape.name} has {heads} attention heads and {kv} KV heads; "
                              f"allowed: tp in {ok}")


def check_kv_fits(num_pages: int, page_size: int, prompt_lens: Any, output_lens: Any) -> None:
    """At least one request fits the KV pool (``num_pages`` pages of ``page_size`` tokens)."""
    if len(prompt_lens) == 0:
        return
    need = min(int(p) + int(o) for p, o in zip(prompt_lens, output_lens))
    pages = math.ceil(need / page_size)
    if pages > num_pages:
        raise bad_value("kv.num_pages", num_pages,
                        f"{num_pages} pages of {page_size} tokens hold no request (the smallest needs "
                        f"{need} tokens); allowed: kv.num_pages >= {pages}, or null to size the pool "
                        f"from the device memory")


def no_request_ran(num_requests: int, rejected: list[tuple[int, str]]) -> None:
    """A run in which the backend refused every request is a config mistake, not a result."""
    if num_requests and len(rejected) >= num_requests:
        raise UserError(f"every one of the {num_requests} requests was refused, so nothing ran; the "
                        f"first: {rejected[0][1]} (check kv.num_pages, model.max_model_len and the "
                        f"scheduler's token budget)")


def check_group_options(overrides: Sequence[str], conf_dir: str | Path) -> None:
    """Each ``group=option`` override names an option file of that config group (the shared
    fragments, named ``_*``, are not options); a sweep's ``a,b`` lists are checked one by one."""
    conf = Path(conf_dir)
    for o in overrides:
        key, eq, value = o.lstrip("+~").partition("=")
        group = conf / key
        if not eq or "." in key or key.startswith("hydra") or not group.is_dir():
            continue
        options = sorted(p.stem for p in group.glob("*.yaml") if not p.stem.startswith("_"))
        for v in value.split(","):
            if v and v != "null" and v not in options:
                raise UnknownNameError(f"{key} option", v, options, key)
