"""The simulator backend (`experiments.build`) and the engine (`engine.config.engine_config_from_run`)
build their scheduler config and graph plan from the same `core.run_config.from_cfg` choices; the
engine refuses backend values it cannot take."""

from __future__ import annotations

import re

import pytest
import torch
from omegaconf import OmegaConf

from twinserve.core.conf_compose import compose
from twinserve.core.errors import UserError
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


@pytest.mark.parametrize("override, says", [
    ("backend.device=gpu", "backend.device=gpu: allowed: auto, cpu, cuda or cuda:N"),
    ("backend.dtype=int3", "unknown dtype backend.dtype=int3; known: auto, bf16"),
    ("backend.load_format=nope", "unknown load format backend.load_format=nope; known: dummy, safetensors"),
    ("backend.cpu_kv_tokens=0", "backend.cpu_kv_tokens=0: allowed: >= 1"),
])
def test_the_engine_refuses_unknown_backend_values_as_user_errors(override: str, says: str,
                                                                  tmp_path) -> None:
    """The engine backend checks the run's values (even a load format it overrides: a shape-named
    model always loads dummy weights), and `Engine` checks its config's."""
    from twinserve.engine.engine import Engine
    from twinserve.experiments.backends.base import RunContext
    from twinserve.experiments.backends.engine import engine_config
    from twinserve.experiments.build import hardware_spec, model_shape

    cfg = composed("backend=engine", "model=tiny-llama", override)
    ctx = RunContext(cfg, model_shape(cfg["model"]), hardware_spec(cfg["hardware"]), tmp_path, False)
    with pytest.raises(UserError) as e:
        engine_config(ctx)
    assert str(e.value).startswith(says) and e.value.key == override.split("=")[0]
    key, value = override.removeprefix("backend.").split("=")
    with pytest.raises(UserError, match=re.escape(says)):
        Engine(engine_config_from_run(composed("backend=engine"), str(tmp_path), **{key: type_of(key)(value)}))


def type_of(key: str) -> type:
    return int if key == "cpu_kv_tokens" else str


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a torch without a CUDA device")
def test_cuda_without_a_cuda_device_is_a_user_error() -> None:
    from twinserve.engine.engine import Engine, EngineConfig
    from twinserve.engine.executor import require_device, resolve_device

    require_device(resolve_device("auto"))  # the CPU
    with pytest.raises(UserError, match="device=cuda:1, but this torch .* sees no CUDA device; use device=cpu"):
        require_device(resolve_device("cuda:1"))
    with pytest.raises(UserError, match="sees no CUDA device"):
        Engine(EngineConfig(model="/nowhere", device="cuda"))
