"""`from_cfg`: the one reading of a composed run config's shared nodes into typed records.

The simulator backend (`experiments.build`), the engine backend and the server
(`engine.config.engine_config_from_run`, `server.hydra_config`) all take the scheduler's
knobs, the graph plan's knobs, the policies, the KV pool, speculation, replicas, router and the
server's listener keys from `RunChoices` instead of reading the config's dicts themselves; the
``backend`` node stays with the backend it names.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from twinserve.core.config import SchedulerConfig, scheduler_default
from twinserve.core.graph_plan import GraphPlan
from twinserve.core.kv_budget import KvBudget

# SchedulerConfig fields a run does not set through ``scheduler``: the pool's size comes from
# ``kv`` (or the engine's memory), the longest request from ``model.max_model_len``.
POOL_FIELDS = ("num_pages", "max_model_len")
# The bench client's target in the ``server`` node: not a listener knob.
CLIENT_KEYS = ("base_url",)
# ``server`` keys whose null means the `ServerConfig` default (queue_limit's null means unlimited).
SERVER_DEFAULTED = ("host", "port")


@dataclass(frozen=True, slots=True)
class PolicyChoice:
    """The scheduling, memory and cache policies by registry name, with their kwargs."""

    scheduling: str
    memory: str
    cache: str
    scheduling_kwargs: Mapping[str, Any] = field(default_factory=dict)
    memory_kwargs: Mapping[str, Any] = field(default_factory=dict)
    cache_kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunChoices:
    """What a run config chose, typed, for every backend.

    Invariants: ``batching`` holds only `SchedulerConfig` fields that are not `POOL_FIELDS` nor
    ``page_size``, each given (not None); ``graphs`` only `GraphPlan` knobs given (not None);
    ``page_size`` is ``scheduler.page_size`` or `SchedulerConfig`'s default, ``page_size_given``
    whether the config set it; ``max_model_len`` is None where the model's own applies.
    """

    batching: Mapping[str, Any]
    page_size: int
    page_size_given: bool
    graphs: Mapping[str, Any]
    policies: PolicyChoice
    eos_token_ids: tuple[int, ...]
    max_model_len: int | None
    mem_fraction: float
    num_pages: int | None
    dtype_bytes: int
    spec: Mapping[str, Any]
    seed: int
    tp: int
    replicas: int
    router: str
    router_kwargs: Mapping[str, Any]
    server: Mapping[str, Any]

    def scheduler_config(self, num_pages: int, max_model_len: int) -> SchedulerConfig:
        """The validated `SchedulerConfig` of this run on a pool of ``num_pages`` pages, for
        requests of at most ``max_model_len`` tokens."""
        sc = SchedulerConfig(**self.batching, page_size=self.page_size, num_pages=int(num_pages),
                             max_model_len=int(max_model_len))
        sc.validate()
        return sc

    def graph_plan(self, max_running: int, gqa_group: int) -> GraphPlan:
        """The run's `GraphPlan` (`GraphPlan.from_knobs` of ``graphs``) for a scheduler running
        at most ``max_running`` requests and a model of ``gqa_group`` query heads per KV head."""
        return GraphPlan.from_knobs(self.graphs, max_running=max_running, gqa_group=gqa_group)


def _given(node: Mapping[str, Any], names: set[str]) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k in names and v is not None}


def from_cfg(cfg: Mapping[str, Any]) -> RunChoices:
    """The `RunChoices` of a composed run config (plain dicts, as `OmegaConf.to_container`
    gives them, validated by the schema at composition)."""
    sch, model, kv = cfg["scheduler"], cfg["model"], cfg["kv"]
    batching = _given(sch, {f.name for f in fields(SchedulerConfig)} - {*POOL_FIELDS, "page_size"})
    plan_knobs = {f.name for f in fields(GraphPlan)} - {"max_running", "gqa_group"}
    page_size = sch.get("page_size")
    mem, cache = cfg["memory"], cfg["cache"]
    return RunChoices(
        batching=batching,
        page_size=int(page_size if page_size is not None else scheduler_default("page_size")),
        page_size_given=page_size is not None,
        graphs=_given(sch, plan_knobs),
        policies=PolicyChoice(str(sch["name"]), str(mem["name"]), str(cache["name"]), sch.get("kwargs") or {},
                              mem.get("kwargs") or {}, cache.get("kwargs") or {}),
        eos_token_ids=tuple(model.get("eos_token_ids") or ()),
        max_model_len=int(model["max_model_len"]) if model.get("max_model_len") else None,
        mem_fraction=float(KvBudget.mem_fraction if kv.get("mem_fraction") is None else kv["mem_fraction"]), num_pages=kv.get("num_pages") or None,
        dtype_bytes=int(KvBudget.dtype_bytes if kv.get("dtype_bytes") is None else kv["dtype_bytes"]),
        spec=dict(cfg.get("spec") or {}),
        seed=int(cfg["seed"]), tp=int(cfg["tp"]), replicas=int(cfg["replicas"]),
        router=str(cfg["router"]), router_kwargs=dict(cfg["router_kwargs"] or {}),
        server={k: v for k, v in (cfg.get("server") or {}).items()
                if k not in CLIENT_KEYS and not (k in SERVER_DEFAULTED and v is None)},
    )
