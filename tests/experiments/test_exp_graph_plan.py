"""One `GraphPlan` for both backends of a run config."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("overrides", [(), ("model=qwen3-0.6b",), ("model=llama3-8b", "tp=2"),
                                       ("scheduler.token_graph_mode=piecewise", "scheduler.max_running=32",
                                        "scheduler.max_graph_bs=64", "scheduler.hybrid_decode_heavy=false")])
def test_the_engine_and_the_simulator_build_one_plan_from_a_run_config(make_cfg, overrides):
    """The engine's plan (`EngineConfig.graph_plan`, as a rank builds it with graphs on) and the
    simulator's (`experiments.build.graph_plan`) are equal for the same composed config."""
    from omegaconf import OmegaConf

    from twinserve.engine.config import engine_config_from_run
    from twinserve.experiments.build import graph_plan, hardware_spec, model_shape, scheduler_config

    cfg = OmegaConf.to_container(make_cfg(*overrides), resolve=True)
    shape, tp = model_shape(cfg["model"]), int(cfg.get("tp", 1))
    sc = scheduler_config(cfg, shape, hardware_spec(cfg["hardware"]))
    sim = graph_plan(cfg, shape, sc)
    ecfg = engine_config_from_run(cfg, "/m")
    eng = ecfg.graph_plan(True, ecfg.scheduler_config(sc.num_pages, sc.max_model_len).max_running, shape.gqa_group(tp))
    assert eng == sim
    if "model=qwen3-0.6b" in overrides:
        assert sim.piecewise_max_tokens == 8192  # the model's own cap


@pytest.mark.parametrize("overrides, page_size", [((), None), (("scheduler.page_size=32",), 32)])
def test_both_backends_take_one_page_size(make_cfg, overrides, page_size):
    """The conf leaves ``scheduler.page_size`` null: both backends then take `SchedulerConfig`'s
    default; a page size that is set reaches both."""
    from omegaconf import OmegaConf

    from twinserve.core.config import scheduler_default
    from twinserve.engine.config import engine_config_from_run
    from twinserve.experiments.build import hardware_spec, model_shape, scheduler_config

    cfg = OmegaConf.to_container(make_cfg(*overrides), resolve=True)
    assert cfg["scheduler"]["page_size"] == page_size
    sc = scheduler_config(cfg, model_shape(cfg["model"]), hardware_spec(cfg["hardware"]))
    want = page_size or scheduler_default("page_size")
    assert sc.page_size == engine_config_from_run(cfg, "/m").page_size == want
