"""The offline `LLM`'s defaults: makespan scheduling and whole-step token graphs sized to its
steps, each overridable; `EngineConfig.token_graph_rows` reaches the engine's `GraphPlan` (CPU)."""

from __future__ import annotations

from twinserve.engine.config import EngineConfig
from twinserve.engine.llm import LLM
from twinserve.policies.scheduling.makespan import TARGET_TOKENS


def test_the_offline_llm_schedules_by_makespan_with_graphs_of_its_step_size(tiny_model_dir) -> None:
    model = str(tiny_model_dir("tiny-llama"))
    with LLM(model, device="cpu", cpu_kv_tokens=2048, scheduler={"max_running": 8}) as llm:
        eng = llm.engine
        assert (eng.cfg.scheduling, eng.cfg.token_graph_rows) == ("makespan", TARGET_TOKENS)
        assert eng.plan.max_running == 8 and eng.plan.graph_rows == TARGET_TOKENS
        out = llm.generate([[1, 2, 3, 4]])[0]
        assert len(out.token_ids) > 0
    with LLM(model, device="cpu", cpu_kv_tokens=2048, scheduling="fcfs", token_graph_rows=0) as llm:
        assert (llm.engine.cfg.scheduling, llm.engine.plan.graph_rows) == ("fcfs", llm.engine.plan.max_running)


def test_token_graph_rows_reach_the_plan() -> None:
    cfg = EngineConfig(model="unused", token_graph_rows=384)
    assert cfg.graph_plan(True, 256, 4).graph_rows == 384
    assert cfg.graph_plan(True, 512, 4).graph_rows == 512          # never below max_running
    assert cfg.graph_plan(False, 256, 4).piecewise_max_tokens == 0  # no graphs: no token graphs
    assert EngineConfig(model="unused").graph_plan(True, 256, 4).graph_rows == 256
