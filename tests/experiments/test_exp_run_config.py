"""The simulator backend (`experiments.build`) and the engine (`engine.config.engine_config_from_run`)
build their scheduler config and graph plan from the same `core.run_config.from_cfg` choices."""

from __future__ import annotations

from omegaconf import OmegaConf

from twinserve.core.conf_compose import compose
from twinserve.engine.config import engine_config_from_run
from twinserve.experiments.build import graph_plan, hardware_spec, model_shape, scheduler_config


def composed(*overrides: str) -> dict:
    return OmegaConf.to_container(compose(list(overrides)), resolve=True)


def test_the_engine_and_the_simulator_read_the_same_choices() -> None:
    cfg = composed("backend=engine", "scheduler.max_running=12", "scheduler.token_graph_mode=piecewise",
                   "kv.mem_fraction=0.5", "kv.num_pages=512", "scheduler=lpm")
    shape = model_shape(cfg["model"])
    sim_sc = scheduler_config(cfg, shape, hardware_spec(cfg["hardware"]))
    ecfg = engine_config_from_run(cfg, "/m")
    eng_sc = ecfg.scheduler_config(sim_sc.num_pages, sim_sc.max_model_len)
    assert eng_sc == sim_sc
    assert ecfg.graph_plan(True, eng_sc.max_running, shape.gqa_group(1)) == graph_plan(cfg, shape, sim_sc)
    assert (ecfg.mem_fraction, ecfg.num_pages, ecfg.scheduling) == (0.5, 512, "lpm")
