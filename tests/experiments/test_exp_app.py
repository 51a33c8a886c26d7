"""The Hydra app: config tree, the three output files, determinism, CLI, sweeps, adapters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from twinserve.core.errors import UserError
from twinserve.core.model_shapes import get_shape
from twinserve.experiments.run import load_run, run_experiment
from twinserve.simulator.cost import Calibration, CpuFit, LinearFit, Provenance

FILES = ("requests.parquet", "steps.parquet", "summary.json")


def test_defaults_are_the_documented_ones(make_cfg: Any) -> None:
    cfg = make_cfg()
    assert (cfg.backend.name, cfg.model.name, cfg.hardware.name, cfg.workload.name) == \
        ("sim", "llama3-8b", "h200", "azure_conv")
    assert (cfg.scheduler.name, cfg.memory.name, cfg.cache.name, cfg.cost_model.name) == \
        ("fcfs", "on_demand", "radix", "auto")
    assert cfg.scheduler.max_num_batched_tokens is None and cfg.replicas == 1


def test_run_writes_the_three_files(make_cfg: Any, tmp_path: Path) -> None:
    summary = run_experiment(make_cfg(), tmp_path)
    assert all((tmp_path / f).is_file() for f in FILES)
    req, steps, s = load_run(tmp_path)
    assert len(req) == 40 and s["completed"] == 40 and len(steps) == s["run"]["num_steps"]
    for key in ("request_throughput", "output_throughput", "mean_ttft_ms", "p99_tpot_ms",
                "median_itl_ms", "mean_e2el_ms", "total_input_tokens", "duration"):
        assert key in s and s[key] is not None and s[key] > 0, key
    run = s["run"]
    assert (run["backend"], run["model"], run["hardware"], run["scheduler"], run["cache"]) == \
        ("sim", "llama3-8b", "h200", "fcfs", "radix")
    # llama3-8b on h200 has a committed calibration, which cost_model=auto picks
    assert run["cost_model"]["name"] == "calibrated" and run["num_pages"] > 10000
    assert s["timing"]["wall_s"] > 0 and s["timing"]["sim_speedup"] > 0
    assert summary["completed"] == 40
    assert isinstance(req.token_times.iloc[0][0], float)


def test_identical_configs_give_identical_files(make_cfg: Any, tmp_path: Path) -> None:
    cfg = make_cfg("workload=sessions", "workload.num_sessions=10", "replicas=2",
                   "router=prefix_affinity", "seed=3")
    a, b = tmp_path / "a", tmp_path / "b"
    run_experiment(cfg, a)
    run_experiment(cfg, b)
    for f in ("requests.parquet", "steps.parquet"):
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    sa.pop("timing"), sb.pop("timing")
    assert sa == sb
    c = tmp_path / "c"
    run_experiment(make_cfg("workload=sessions", "workload.num_sessions=10", "replicas=2",
                            "router=prefix_affinity", "seed=4"), c)
    assert (a / "steps.parquet").read_bytes() != (c / "steps.parquet").read_bytes()


@pytest.mark.parametrize("overrides", [
    ["workload=azure_code", "scheduler=sjf", "memory=reserve", "cache=none"],
    ["workload=shared_prefix", "scheduler=lpm", "hardware=h100", "model=qwen3-8b"],
    ["workload=poisson", "scheduler=priority", "tp=2", "model=llama3-70b", "replicas=2", "router=least_loaded"],
    ["workload=poisson", "scheduler=vtc", "model=qwen3-0.6b", "cost_model=roofline",
     "cost_model.roofline.mem_eff=0.5", "scheduler.max_running=8", "kv.num_pages=3000"],
    ["model=tiny-qwen3", "hardware=cpu", "kv.num_pages=4000", "model.max_model_len=4096"],
])
def test_policy_and_hardware_combinations_run(make_cfg: Any, tmp_path: Path, overrides: list[str]) -> None:
    s = run_experiment(make_cfg(*overrides), tmp_path)
    assert s["completed"] + s["over_long"]["count"] == 40 and s["rejected"]["count"] == s["over_long"]["count"]


def test_over_long_requests_are_reported_not_trimmed(make_cfg: Any, tmp_path: Path, capsys: Any) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,100,10\n0.5,3000,10\n"
                   "1.0,200,5000\n1.5,50,5\n")
    s = run_experiment(make_cfg("workload=csv", f"workload.path={csv}", "model.max_model_len=2048"),
                       tmp_path / "out")
    assert s["over_long"] == {"max_model_len": 2048, "count": 2, "first_ids": [1, 2]}
    assert s["completed"] == 2 and s["rejected"]["count"] == 2
    assert "2 request(s) exceed max_model_len=2048" in capsys.readouterr().err
    req = pd.read_parquet(tmp_path / "out" / "requests.parquet")
    assert sorted(req.rid) == [0, 3] and list(req.prompt_tokens) == [100, 50]


def test_mooncake_and_model_path(make_cfg: Any, tmp_path: Path) -> None:
    jl = tmp_path / "m.jsonl"
    rows = [{"timestamp": 100 * i, "input_length": 1100, "output_length": 20, "hash_ids": [7, 8, 100 + i]}
            for i in range(12)]
    jl.write_text("\n".join(json.dumps(r) for r in rows))
    mdir = tmp_path / "model"
    mdir.mkdir()
    (mdir / "config.json").write_text(json.dumps(get_shape("tiny-llama").to_hf_config()))
    with pytest.warns(UserWarning, match="is not model.name=llama3-8b"):
        s = run_experiment(make_cfg("workload=mooncake", f"workload.path={jl}", "workload.block_size=512",
                                    f"model.path={mdir}", "kv.num_pages=2000"), tmp_path / "out")
    # the file's shape, under the name of the preset it is (not model.name's, whose calibration
    # would price another model)
    assert s["completed"] == 12 and s["run"]["model"] == "tiny-llama"
    assert s["run"]["calibration_mismatch"].startswith(f"model.path={mdir} is not model.name=llama3-8b")
    assert s["total_cached_tokens"] >= 11 * 1024  # the two shared blocks hit after the first request


def test_cost_model_auto_prefers_a_calibration(make_cfg: Any, tmp_path: Path) -> None:
    cal = Calibration(Provenance("h200", "llama3-8b", 1, engine_version="test"),
                      {"decode": LinearFit(["1", "num_seqs"], [0.005, 1e-5]),
                       "prefill": LinearFit(["1", "new_tokens"], [0.01, 1e-5])},
                      CpuFit(["1"], [1e-4], overlap=True))
    cal.save(tmp_path / "cal" / "mine.json")
    s = run_experiment(make_cfg(f"cost_model.calibration_dirs=[{tmp_path / 'cal'}]"), tmp_path / "a")
    assert s["run"]["cost_model"]["name"] == "calibrated"
    assert s["run"]["cost_model_source"].endswith("mine.json")
    steps = pd.read_parquet(tmp_path / "a" / "steps.parquet")
    dec = steps[steps.num_prefills == 0]
    assert np.allclose(dec.duration, 0.005 + 1e-5 * dec.num_seqs)
    s2 = run_experiment(make_cfg(f"cost_model.calibration_dirs=[{tmp_path / 'cal'}]", "tp=2"), tmp_path / "b")
    assert s2["run"]["cost_model"]["name"] == "roofline"
    with pytest.raises(UserError, match="no calibration"):
        run_experiment(make_cfg("cost_model=calibrated", "model=llama3.1-8b"), tmp_path / "c")
    with pytest.raises(UserError, match="no such directory"):  # a typo does not fall back to roofline
        run_experiment(make_cfg(f"cost_model.calibration_dirs=[{tmp_path / 'cla'}]"), tmp_path / "d")


def test_a_cap_the_calibration_profile_did_not_run_is_warned_about(make_cfg: Any, tmp_path: Path) -> None:
    """The committed llama3-8b file was profiled with token graphs up to 2,048 tokens: the
    default cap runs quietly, 8,192 warns and records why in the summary."""
    import warnings

    from twinserve.experiments.build import CalibrationMismatchWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationMismatchWarning)
        s = run_experiment(make_cfg(), tmp_path / "a")
    assert s["run"]["cost_model"]["name"] == "calibrated" and s["run"]["calibration_mismatch"] is None
    with pytest.warns(CalibrationMismatchWarning, match="steps of 2049-8192 tokens run as token graphs here"):
        s = run_experiment(make_cfg("scheduler.piecewise_max_tokens=8192"), tmp_path / "b")
    assert "piecewise_max_tokens=8192" in s["run"]["calibration_mismatch"]


def test_the_token_graph_cap_defaults_to_the_models_own(make_cfg: Any, tmp_path: Path) -> None:
    """``scheduler.piecewise_max_tokens`` takes ``model.piecewise_max_tokens`` (qwen3-0.6b: 8,192,
    the others 2,048; 2,048 for a model config without the key) unless set; the committed
    qwen3-0.6b file was profiled at 8,192 and runs quietly, and at 2,048 the simulator warns
    unless it is given the cap-2,048 file (``experiments/calibrations/cap2048``)."""
    import warnings

    from omegaconf import OmegaConf

    import twinserve
    from twinserve.core.graph_plan import GraphPlan
    from twinserve.experiments.build import CalibrationMismatchWarning

    def cap(*ov: str) -> int:  # the token-graph cap of the run's GraphPlan
        knobs = OmegaConf.to_container(make_cfg(*ov), resolve=True)["scheduler"]
        return GraphPlan.from_knobs(knobs).piecewise_max_tokens

    assert cap("model=qwen3-0.6b") == 8192 and cap("model=llama3-8b") == 2048 and cap() == 2048
    assert cap("model=qwen3-0.6b", "scheduler=lpm") == 8192
    assert cap("model=qwen3-0.6b", "scheduler.piecewise_max_tokens=2048") == 2048
    assert cap("model=qwen3-0.6b", "~model.piecewise_max_tokens") == 2048
    q, cap2048 = "model=qwen3-0.6b", Path(twinserve.__file__).parent / "experiments" / "calibrations" / "cap2048"
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationMismatchWarning)
        s = run_experiment(make_cfg(q), tmp_path / "q")
        old = run_experiment(make_cfg(q, "scheduler.piecewise_max_tokens=2048",
                                      f"cost_model.calibration_dirs=[{cap2048}]"), tmp_path / "old")
    assert s["run"]["calibration_mismatch"] is None and old["run"]["calibration_mismatch"] is None
    assert "cap2048" in str(old["run"]["cost_model"]["source"])
    with pytest.warns(CalibrationMismatchWarning, match="steps of 2049-8192 tokens run eagerly here"):
        run_experiment(make_cfg(q, "scheduler.piecewise_max_tokens=2048"), tmp_path / "w")


def test_engine_adapter_builds_an_engine_config(make_cfg: Any, tmp_path: Path, monkeypatch: Any) -> None:
    from twinserve.simulator.arrivals import make_req

    seen: dict[str, Any] = {}

    def fake_replay(ecfg: Any, workload: Any, progress: bool = True, **kw: Any) -> tuple[list, list]:
        seen["cfg"] = ecfg
        reqs = []
        for spec in list(workload)[:-1]:  # pretend the last one was skipped
            r = make_req(workload, spec)
            r.t_scheduled, r.t_first_token, r.t_finish = r.arrival, r.arrival + 0.1, r.arrival + 0.5
            reqs.append(r)
        return reqs, []

    monkeypatch.setitem(sys.modules, "twinserve.engine.replay",
                        types.SimpleNamespace(replay_workload=fake_replay))
    s = run_experiment(make_cfg("backend=engine", "model=tiny-llama", "backend.device=cpu",
                                "scheduler=lpm", "scheduler.max_running=4", "kv.num_pages=64",
                                "backend.cpu_kv_tokens=4096", "backend.fast_plan=false"), tmp_path)
    e = seen["cfg"]
    assert e.cpu_kv_tokens == 4096 and e.fast_plan is False
    assert e.load_format == "dummy" and Path(e.model, "config.json").is_file()
    assert (e.device, e.scheduling, e.num_pages, e.scheduler["max_running"]) == ("cpu", "lpm", 64, 4)
    assert s["run"]["backend"] == "engine" and s["rejected"]["count"] == 1 and s["completed"] == 39


@pytest.mark.parametrize("extra, fmt", [((), "safetensors"), (("backend.load_format=dummy",), "dummy")])
def test_engine_adapter_loads_the_checkpoint_of_model_path(make_cfg: Any, tmp_path: Path, extra: tuple,
                                                           fmt: str) -> None:
    from twinserve.experiments.backends.base import RunContext
    from twinserve.experiments.backends.engine import engine_config
    from twinserve.experiments.build import plain

    mdir = tmp_path / "ckpt"
    mdir.mkdir()
    (mdir / "config.json").write_text(json.dumps(get_shape("tiny-llama").to_hf_config()))
    cfg = make_cfg("backend=engine", "model=tiny-llama", f"model.path={mdir}", "backend.device=cpu", *extra)
    e = engine_config(RunContext(plain(cfg), get_shape("tiny-llama"), None, tmp_path / "out", False))
    assert e.model == str(mdir) and e.load_format == fmt


def test_server_adapter_calls_the_bench_client(make_cfg: Any, tmp_path: Path, monkeypatch: Any) -> None:
    def fake_bench(cfg: Any, workload: Any) -> tuple[pd.DataFrame, None, dict]:
        from twinserve.core.metrics import COLUMNS

        n = len(workload)
        a = workload.arrivals
        df = pd.DataFrame({"rid": np.arange(n), "replica": 0, "tenant": "default", "priority": 0,
                           "arrival_s": a, "scheduled_s": a, "first_token_s": a + 0.05,
                           "finish_s": a + 0.2, "prompt_tokens": workload.prompt_lens,
                           "output_tokens": workload.output_lens, "cached_tokens": 0,
                           "preemptions": 0, "finish_reason": "length",
                           "token_times": [np.linspace(t + 0.05, t + 0.2, o) for t, o in zip(a, workload.output_lens)]})
        assert cfg["backend"]["url"] == "http://h:1"
        return df[list(COLUMNS)], None, {"bench_client": {"errors": 0}}

    monkeypatch.setitem(sys.modules, "twinserve.server.bench_client", types.SimpleNamespace(run_bench=fake_bench))
    s = run_experiment(make_cfg("backend=server", "backend.url=http://h:1"), tmp_path)
    assert s["completed"] == 40 and s["run"]["bench_client"] == {"errors": 0}
    assert s["mean_ttft_ms"] == pytest.approx(50.0)
    assert len(pd.read_parquet(tmp_path / "steps.parquet")) == 0


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TWINSERVE_JOBS": "2"}
    return subprocess.run([sys.executable, "-m", "twinserve.experiments.app", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_cli_run_prints_the_summary(tmp_path: Path) -> None:
    out = _cli(["workload.num_requests=30", f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert "Successful requests:" in out.stdout and "30" in out.stdout
    assert all((tmp_path / "run" / f).is_file() for f in FILES)
    assert (tmp_path / "run" / ".hydra" / "overrides.yaml").is_file()


def test_cli_multirun_sweeps_in_parallel(tmp_path: Path) -> None:
    out = _cli(["-m", "workload.num_requests=30", "scheduler=fcfs,sjf", f"hydra.sweep.dir={tmp_path / 'm'}"],
               tmp_path)
    assert out.returncode == 0, out.stderr
    assert "Joblib.Parallel" in out.stdout + out.stderr
    folders = sorted(p.parent for p in (tmp_path / "m").glob("*/summary.json"))
    assert len(folders) == 2
    assert {json.loads((f / "summary.json").read_text())["run"]["scheduler"] for f in folders} == {"fcfs", "sjf"}


def test_host_speed_of_a_recorded_engine_run_is_replayed(make_cfg: Any, tmp_path: Path) -> None:
    """backend.host_speed_from: the pipelined loop replays a recorded H200 run's host speed (the
    first 120 steps of llama3-8b's azure_conv_90 fidelity run, float32, in tests/experiments/data)."""
    run = Path(__file__).resolve().parent / "data/llama3-8b_azure_conv_90_head"
    base = run_experiment(make_cfg("backend.pipeline=true"), tmp_path / "base")
    diag = run_experiment(make_cfg("backend.pipeline=true", f"backend.host_speed_from={run}"), tmp_path / "diag")
    assert diag["completed"] == base["completed"] == 40
    assert diag["mean_ttft_ms"] != base["mean_ttft_ms"]
    with pytest.raises(ValueError, match="pipeline=true"):
        run_experiment(make_cfg(f"backend.host_speed_from={run}"), tmp_path / "plain")


def test_host_episodes_drawn_from_the_calibration_slow_the_pipelined_loop(make_cfg: Any, tmp_path: Path) -> None:
    """backend.host_episodes (auto by default): the committed calibration's slow-host episodes
    are drawn (seeded) in the pipelined loop and not in the plain one; true insists on the
    pipelined loop, false keeps the typical host. (qwen3-0.6b: its profile has episodes; the
    committed llama3-8b profile happens to have none.)"""
    q = "model=qwen3-0.6b"
    base = run_experiment(make_cfg(q, "backend.pipeline=true", "backend.host_episodes=false"), tmp_path / "base")
    ep = run_experiment(make_cfg(q, "backend.pipeline=true"), tmp_path / "ep")
    again = run_experiment(make_cfg(q, "backend.pipeline=true", "backend.host_episodes=true"), tmp_path / "again")
    assert ep["completed"] == base["completed"] == 40
    assert ep["run"]["host_episodes"] is True and base["run"]["host_episodes"] is False
    assert ep["mean_ttft_ms"] > base["mean_ttft_ms"] and ep["mean_ttft_ms"] == again["mean_ttft_ms"]
    plain = run_experiment(make_cfg(), tmp_path / "plain")
    assert plain["run"]["host_episodes"] is False
    with pytest.raises(ValueError, match="pipeline=true"):
        run_experiment(make_cfg("backend.host_episodes=true"), tmp_path / "plain_true")
    with pytest.raises(ValueError, match="true, false or auto"):
        run_experiment(make_cfg("backend.pipeline=true", "backend.host_episodes=sometimes"), tmp_path / "bad")


def test_plain_loop_lags_arrivals_for_a_model_of_an_overlapping_engine(make_cfg: Any, tmp_path: Path) -> None:
    auto = run_experiment(make_cfg(), tmp_path / "auto")  # the committed H200 calibration
    off = run_experiment(make_cfg("backend.lag_arrivals=false"), tmp_path / "off")
    roof = run_experiment(make_cfg("cost_model=roofline"), tmp_path / "roof")
    assert auto["run"]["lag_arrivals"] is True and off["run"]["lag_arrivals"] is False
    assert roof["run"]["lag_arrivals"] is False and auto["run"]["loop"] == "plain"
    assert auto["mean_ttft_ms"] > off["mean_ttft_ms"]  # a request waits for the batch after next
    with pytest.raises(ValueError, match="lag_arrivals"):
        run_experiment(make_cfg("backend.lag_arrivals=sometimes"), tmp_path / "bad")


def test_the_simulators_scheduler_takes_the_models_gqa_group(make_cfg: Any) -> None:
    """The simulator's batches plan their attention tiles (``attn_tile``) with the model's query
    heads per KV head on one rank, as the engine's do: qwen3-0.6b 2, llama3-8b 4 (also at TP=2)."""
    from omegaconf import OmegaConf

    from twinserve.experiments.build import graph_plan, hardware_spec, model_shape, scheduler_config

    def group(*ov: str) -> int:
        cfg = OmegaConf.to_container(make_cfg(*ov), resolve=True)
        shape = model_shape(cfg["model"])
        return graph_plan(cfg, shape, scheduler_config(cfg, shape, hardware_spec(cfg["hardware"]))).gqa_group

    assert group("model=qwen3-0.6b") == 2 and group("model=llama3-8b") == 4 and group("model=llama3-8b", "tp=2") == 4


def test_summary_reports_the_prefix_hit_rate_its_bound_and_the_dropped_prompts(
        make_cfg: Any, tmp_path: Path, capsys: Any) -> None:
    jl = tmp_path / "m.jsonl"
    rows = [{"timestamp": 500 * i, "input_length": 1100, "output_length": 20, "hash_ids": [7, 8, 100 + i]}
            for i in range(12)]
    rows[3] = {"timestamp": 1500, "input_length": 5000, "output_length": 20, "hash_ids": list(range(200, 210))}
    rows[7] = {"timestamp": 3500, "input_length": 4000, "output_length": 20, "hash_ids": [7, 8, *range(300, 306)]}
    jl.write_text("\n".join(json.dumps(r) for r in rows))
    s = run_experiment(make_cfg("workload=mooncake", f"workload.path={jl}", "workload.max_prompt_tokens=2000",
                                "kv.num_pages=2000"), tmp_path / "out")
    assert s["filtered"] == {"max_prompt_tokens": {"limit": 2000, "dropped": 2, "kept": 10, "first_ids": [3, 7]}}
    assert "workload.max_prompt_tokens=2000 dropped 2 request(s)" in capsys.readouterr().err
    assert s["completed"] == 10
    pc = s["prefix_cache"]
    assert pc["prompt_tokens"] == s["total_input_tokens"] == 10 * 1100
    assert pc["cached_tokens"] == s["total_cached_tokens"] and pc["hit_rate"] == pytest.approx(pc["cached_tokens"] / 11000)
    assert pc["bound_tokens"] == 9 * 1024 and pc["bound_hit_rate"] == pytest.approx(9 * 1024 / 11000)
    assert 0.9 <= pc["of_bound"] <= 1.0 and pc["of_bound"] == pytest.approx(pc["hit_rate"] / pc["bound_hit_rate"])
