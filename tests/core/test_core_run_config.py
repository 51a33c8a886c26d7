"""`core.run_config.from_cfg` reads a composed run config once into typed records that the
simulator, the engine and the server all build their configs from."""

from __future__ import annotations

from dataclasses import fields

from omegaconf import OmegaConf

from twinserve.core.conf_compose import compose
from twinserve.core.config import SchedulerConfig
from twinserve.core.graph_plan import DEFAULT_PLAN
from twinserve.core.run_config import POOL_FIELDS, from_cfg


def composed(*overrides: str) -> dict:
    return OmegaConf.to_container(compose(list(overrides)), resolve=True)


def test_the_default_run_takes_the_trees_knobs_and_the_dataclasses_defaults() -> None:
    rc = from_cfg(composed())
    assert rc.batching == {}  # every batch knob null: SchedulerConfig's defaults hold
    assert rc.page_size == SchedulerConfig().page_size and not rc.page_size_given
    assert rc.graphs == {}  # every graph knob null: GraphPlan's defaults hold
    assert rc.graph_plan(max_running=7, gqa_group=4) == DEFAULT_PLAN.__class__(max_running=7, gqa_group=4)
    assert (rc.policies.scheduling, rc.policies.memory, rc.policies.cache) == ("fcfs", "on_demand", "radix")
    assert rc.max_model_len is None and rc.num_pages is None and "base_url" not in rc.server


def test_every_knob_given_reaches_the_typed_configs() -> None:
    rc = from_cfg(composed("scheduler=vtc", "scheduler.max_running=12", "scheduler.page_size=32",
                           "scheduler.piecewise_max_tokens=1024", "kv.mem_fraction=0.5", "kv.num_pages=99",
                           "model.max_model_len=4096", "cache=none", "tp=2", "replicas=3", "router=least_loaded"))
    sc = rc.scheduler_config(num_pages=99, max_model_len=4096)
    assert (sc.max_running, sc.page_size, sc.num_pages, sc.max_model_len) == (12, 32, 99, 4096)
    assert rc.page_size_given and rc.graphs == {"piecewise_max_tokens": 1024}
    assert rc.graph_plan(sc.max_running, 1).piecewise_max_tokens == 1024
    assert rc.policies.scheduling_kwargs == {"input_weight": 1.0, "output_weight": 2.0}
    assert (rc.mem_fraction, rc.num_pages, rc.max_model_len, rc.tp, rc.replicas, rc.router) == \
        (0.5, 99, 4096, 2, 3, "least_loaded")


def test_mem_fraction_is_written_once_in_kv_budget() -> None:
    from twinserve.core.kv_budget import KvBudget

    assert composed()["kv"]["mem_fraction"] is None, "conf/config.yaml writes kv.mem_fraction again"
    assert from_cfg(composed()).mem_fraction == KvBudget.mem_fraction
    assert from_cfg(composed("kv.mem_fraction=0.5")).mem_fraction == 0.5


def test_dtype_bytes_is_written_once_in_kv_budget() -> None:
    from twinserve.core.kv_budget import KvBudget

    assert composed()["kv"]["dtype_bytes"] is None, "conf/config.yaml writes kv.dtype_bytes again"
    assert from_cfg(composed()).dtype_bytes == KvBudget.dtype_bytes
    assert from_cfg(composed("kv.dtype_bytes=1")).dtype_bytes == 1


def test_server_host_and_port_are_left_to_server_config() -> None:
    cfg = composed()
    assert cfg["server"]["host"] is None and cfg["server"]["port"] is None
    server = from_cfg(cfg).server
    assert "host" not in server and "port" not in server and server["queue_limit"] == 1024
    assert from_cfg(composed("server.port=9000")).server["port"] == 9000


def test_the_engine_backend_node_leaves_engine_config_its_defaults() -> None:
    from twinserve.engine.config import RUN_BACKEND_KEYS, EngineConfig, engine_config_from_run

    cfg = composed("backend=engine")
    assert {k: cfg["backend"][k] for k in RUN_BACKEND_KEYS} == dict.fromkeys(RUN_BACKEND_KEYS)
    ec, default = engine_config_from_run(cfg, "m"), EngineConfig(model="m")
    assert {k: getattr(ec, k) for k in RUN_BACKEND_KEYS} == {k: getattr(default, k) for k in RUN_BACKEND_KEYS}
    assert engine_config_from_run(composed("backend=engine", "backend.cpu_kv_tokens=8"), "m").cpu_kv_tokens == 8


def test_the_batch_knobs_are_left_to_scheduler_config() -> None:
    knobs = ("max_num_batched_tokens", "max_running", "chunked_prefill", "chunk_size", "mixed")
    cfg = composed()
    assert {k: cfg["scheduler"][k] for k in knobs} == dict.fromkeys(knobs)
    sc, default = from_cfg(cfg).scheduler_config(64, 1024), SchedulerConfig()
    assert {k: getattr(sc, k) for k in knobs} == {k: getattr(default, k) for k in knobs}
    assert from_cfg(composed("scheduler.max_running=7")).scheduler_config(64, 1024).max_running == 7
