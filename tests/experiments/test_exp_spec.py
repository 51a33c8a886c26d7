"""Speculative decoding through the experiment app: one config (``spec.method=ngram
spec.num_tokens=4`` and an acceptance model for the simulator) runs with backend=sim and
backend=engine; summary.json has the spec_decode_* counters, steps.parquet per-step draft and
accepted counts; the simulator's verify rows are priced as 1 + d tokens and its acceptance
follows the configured rates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from twinserve.core.errors import UserError
from twinserve.experiments.run import load_run, run_experiment

SPEC = ["spec.method=ngram", "spec.num_tokens=4", "spec.acceptance=[0.9,0.8,0.7,0.6]"]
SMALL = ["workload=poisson", "workload.num_requests=12", "workload.rate=50", "workload.prompt_len=24",
         "workload.output_len=40"]


def test_sim_speculation_follows_the_acceptance_model(make_cfg: Any, tmp_path: Path) -> None:
    plain = run_experiment(make_cfg(*SMALL), tmp_path / "plain")
    s = run_experiment(make_cfg(*SMALL, *SPEC), tmp_path / "spec")
    _, steps, summary = load_run(tmp_path / "spec")
    sp = summary["spec"]
    assert s["completed"] == plain["completed"] == 12
    assert s["total_output_tokens"] == plain["total_output_tokens"]
    # every decode that had room for 4 proposed 4; the rates give 1 + .9 + .72 + .504 + .3024
    assert sp["spec_decode_num_proposed_len4"] > 0 and sp["spec_decode_num_proposed_len0"] == 0
    for j, rate in enumerate((0.9, 0.8, 0.7, 0.6)):
        got = sp[f"spec_decode_num_accepted_tokens_pos{j}"] / sp[f"spec_decode_num_reached_pos{j}"]
        assert abs(got - rate) < 0.12, (j, got)
    assert steps["spec_num_draft_tokens"].sum() == sp["spec_decode_num_draft_tokens"]
    assert steps["spec_num_accepted_tokens"].sum() == sp["spec_decode_num_accepted_tokens"]
    # a verify row is priced as its 1 + d tokens: fewer, wider steps, and a lower TPOT
    assert summary["run"]["num_steps"] < plain["run"]["num_steps"]
    assert steps["new_tokens"].sum() > 0
    assert s["mean_tpot_ms"] < plain["mean_tpot_ms"]


def test_sim_acceptance_from_an_engine_summary(make_cfg: Any, tmp_path: Path) -> None:
    counters = {"spec_decode_num_reached_pos0": 100, "spec_decode_num_accepted_tokens_pos0": 50,
                "spec_decode_num_reached_pos1": 50, "spec_decode_num_accepted_tokens_pos1": 10,
                "spec_decode_num_proposed_len0": 30, "spec_decode_num_proposed_len1": 0,
                "spec_decode_num_proposed_len2": 70}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"spec": counters}))
    run_experiment(make_cfg(*SMALL, "spec.method=ngram", "spec.num_tokens=2", f"spec.acceptance_file={path}"),
                   tmp_path / "run")
    sp = load_run(tmp_path / "run")[2]["spec"]
    n = sp["spec_decode_num_proposed_len0"] + sp["spec_decode_num_proposed_len2"]
    assert abs(sp["spec_decode_num_proposed_len0"] / n - 0.3) < 0.1
    assert abs(sp["spec_decode_num_accepted_tokens_pos0"] / sp["spec_decode_num_reached_pos0"] - 0.5) < 0.1


def test_sim_speculation_needs_an_acceptance_model(make_cfg: Any, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="acceptance"):
        run_experiment(make_cfg(*SMALL, "spec.method=ngram", "spec.num_tokens=4"), tmp_path)


def test_pipelined_loop_settles_verify_steps(make_cfg: Any, tmp_path: Path) -> None:
    """In the pipelined loop a step with verify rows is completed before the next step is
    formed (the next one starts after its device span), while plain steps overlap their
    successors, also where no draft could follow the pending tokens (half the time here, so the
    loop would otherwise leave a verify step in flight)."""
    counters = {"spec_decode_num_reached_pos0": 10, "spec_decode_num_accepted_tokens_pos0": 9,
                "spec_decode_num_reached_pos1": 9, "spec_decode_num_accepted_tokens_pos1": 8,
                "spec_decode_num_proposed_len0": 0, "spec_decode_num_proposed_len1": 0,
                "spec_decode_num_proposed_len2": 10,
                "spec_decode_num_after_checked": 10, "spec_decode_num_after_no_match": 5}
    path = tmp_path / "half.json"
    path.write_text(json.dumps({"spec": counters}))
    s = run_experiment(make_cfg(*SMALL, "spec.method=ngram", "spec.num_tokens=2", f"spec.acceptance_file={path}",
                                "backend.pipeline=true"), tmp_path / "p")
    _, steps, summary = load_run(tmp_path / "p")
    assert s["completed"] == 12 and summary["run"]["loop"] == "pipelined"
    sp = summary["spec"]
    assert sp["spec_decode_num_drafts"] > 0
    assert steps["spec_num_accepted_tokens"].sum() == sp["spec_decode_num_accepted_tokens"]
    steps = steps.sort_values("start").reset_index(drop=True)
    end = steps["start"] + steps["duration"]
    nxt = steps["start"].shift(-1)
    verify = (steps["spec_num_draft_tokens"] > 0) & nxt.notna()
    assert verify.any() and (nxt[verify] >= end[verify] - 1e-12).all()
    plain = run_experiment(make_cfg(*SMALL, "backend.pipeline=true"), tmp_path / "plain")
    ps = load_run(tmp_path / "plain")[1].sort_values("start").reset_index(drop=True)
    assert (ps["start"].shift(-1) < ps["start"] + ps["duration"]).any()  # plain steps overlap
    assert plain["completed"] == 12


def test_pipelined_loop_without_drafts_is_the_plain_pipeline(make_cfg: Any, tmp_path: Path) -> None:
    """An acceptance model under which no draft can follow a pending token and no proposal has a
    token: the speculating pipelined loop never settles early and matches the loop without
    speculation step for step."""
    counters = {"spec_decode_num_reached_pos0": 10, "spec_decode_num_accepted_tokens_pos0": 5,
                "spec_decode_num_proposed_len0": 10, "spec_decode_num_proposed_len1": 0,
                "spec_decode_num_after_checked": 10, "spec_decode_num_after_no_match": 10}
    path = tmp_path / "none.json"
    path.write_text(json.dumps({"spec": counters}))
    cfg = [*SMALL, "backend.pipeline=true"]
    a = run_experiment(make_cfg(*cfg, "spec.method=ngram", "spec.num_tokens=1", f"spec.acceptance_file={path}"),
                       tmp_path / "spec")
    b = run_experiment(make_cfg(*cfg), tmp_path / "plain")
    sa, sb = load_run(tmp_path / "spec")[1], load_run(tmp_path / "plain")[1]
    assert len(sa) == len(sb)
    assert np.allclose(sa["start"].to_numpy(), sb["start"].to_numpy())
    assert a["mean_ttft_ms"] == pytest.approx(b["mean_ttft_ms"]) and a["mean_tpot_ms"] == pytest.approx(b["mean_tpot_ms"])


def test_same_config_runs_on_the_engine(make_cfg: Any, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    eng = ["backend=engine", "model=tiny-llama", "backend.device=cpu", "kv.num_pages=128", "backend.warmup=false"]
    s = run_experiment(make_cfg(*SMALL, *SPEC, *eng), tmp_path / "engine")
    _, steps, summary = load_run(tmp_path / "engine")
    assert s["completed"] == 12
    sp = summary["spec"]
    assert sp["spec_decode_num_drafts"] > 0
    assert steps["spec_num_draft_tokens"].sum() == sp["spec_decode_num_draft_tokens"]
    assert steps["spec_num_accepted_tokens"].sum() == sp["spec_decode_num_accepted_tokens"]
    assert np.isfinite(s["mean_tpot_ms"])
    d = run_experiment(make_cfg(*SMALL, "spec.method=draft", "spec.draft=layers:1", "spec.num_tokens=3", *eng),
                       tmp_path / "draft")
    assert d["completed"] == 12 and load_run(tmp_path / "draft")[2]["spec"]["spec_decode_draft_s_per_step"] > 0


def test_sim_prices_a_draft_models_proposals(make_cfg: Any, tmp_path: Path) -> None:
    """An acceptance file with a draft model's measured proposal time per step: the simulator
    adds it to each step with verify rows (host time and wall time)."""
    counters = {"spec_decode_num_reached_pos0": 10, "spec_decode_num_accepted_tokens_pos0": 5,
                "spec_decode_num_proposed_len0": 0, "spec_decode_num_proposed_len1": 10}
    runs = {}
    for name, draft_s in (("free", 0.0), ("priced", 0.01)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"spec": {**counters, "spec_decode_draft_s_per_step": draft_s}}))
        runs[name] = run_experiment(make_cfg(*SMALL, "spec.method=ngram", "spec.num_tokens=1",
                                             f"spec.acceptance_file={path}"), tmp_path / name)
    steps = load_run(tmp_path / "priced")[1]
    verify = steps["spec_num_draft_tokens"] > 0
    assert verify.any() and (steps.loc[verify, "cpu_s"] >= 0.01).all() and (steps.loc[~verify, "cpu_s"] < 0.01).all()
    assert runs["priced"]["mean_tpot_ms"] > runs["free"]["mean_tpot_ms"] + 5


def test_layer_draft_price_is_a_fraction_of_decode_steps() -> None:
    """layers:N without a measurement: k decode forwards of N / L of the model over the verify
    rows, each at its own context, plus a decode step's launch; nothing without verify rows."""
    from twinserve.core.batch import Batch
    from twinserve.core.graph_plan import DEFAULT_PLAN
    from twinserve.core.model_shapes import get_shape
    from twinserve.simulator.cost.roofline import RooflineCostModel
    from twinserve.simulator.draft_price import LayerDraftPrice
    from twinserve.simulator.hardware import get_hardware

    cost = RooflineCostModel(get_shape("llama3-8b"), get_hardware("h200"))
    r = type("R", (), {"num_tokens": 0, "prompt_len": 0})()  # what Batch.features reads of a request
    batch = Batch(1, [r] * 3, [100, 200, 50], [3, 1, 1], [True] * 3, [0, 0, 0], [False, True, True], drafts=[2, 0, 0])

    def decode(ctx: int) -> float:
        f = Batch(0, [r], [ctx], [1], [True], [0], [True]).features(DEFAULT_PLAN)
        return cost.step_time(f) + cost.host_parts(f).launch

    one = LayerDraftPrice(k=1, fraction=1.0)(cost, DEFAULT_PLAN, batch)
    assert one == pytest.approx(decode(100))  # only the verify row drafts
    four = LayerDraftPrice(k=4, fraction=1.0)(cost, DEFAULT_PLAN, batch)
    assert four == pytest.approx(sum(decode(100 + j) for j in range(4)))
    half = LayerDraftPrice(k=4, fraction=0.5)(cost, DEFAULT_PLAN, batch)
    launch = sum(cost.host_parts(Batch(0, [r], [100 + j], [1], [True], [0], [True]).features(DEFAULT_PLAN)).launch
                 for j in range(4))
    assert half == pytest.approx(launch + 0.5 * (four - launch))
    plain = Batch(1, [r], [100], [1], [True], [0], [True])
    assert LayerDraftPrice(k=4, fraction=1.0)(cost, DEFAULT_PLAN, plain) == 0.0


def test_sim_prices_a_layer_draft_from_the_cost_model(make_cfg: Any, tmp_path: Path) -> None:
    """spec.draft=layers:N with given acceptance rates and no engine measurement: more layers
    cost more per verify step; a measured time in an acceptance file takes precedence."""
    cfgs = {n: [*SMALL, "spec.method=draft", f"spec.draft=layers:{n}", "spec.num_tokens=2",
                "spec.acceptance=[0.5,0.5]"] for n in (2, 24)}
    runs = {n: run_experiment(make_cfg(*c), tmp_path / f"l{n}") for n, c in cfgs.items()}
    assert runs[24]["completed"] == runs[2]["completed"] == 12
    assert runs[24]["mean_tpot_ms"] > runs[2]["mean_tpot_ms"]
    path = tmp_path / "measured.json"
    path.write_text(json.dumps({"spec": {"spec_decode_num_reached_pos0": 10, "spec_decode_num_accepted_tokens_pos0": 5,
                                         "spec_decode_num_proposed_len0": 0, "spec_decode_num_proposed_len1": 10,
                                         "spec_decode_draft_s_per_step": 0.02}}))
    run_experiment(make_cfg(*SMALL, "spec.method=draft", "spec.draft=layers:2", "spec.num_tokens=1",
                            f"spec.acceptance_file={path}"), tmp_path / "measured")
    steps = load_run(tmp_path / "measured")[1]
    verify = steps["spec_num_draft_tokens"] > 0
    assert verify.any() and (steps.loc[verify, "cpu_s"] >= 0.02).all()
    with pytest.warns(UserWarning, match="only from an engine's measurement"):
        run_experiment(make_cfg(*cfgs[2][:-3], "spec.draft=/some/checkpoint", *cfgs[2][-2:]), tmp_path / "ckpt")
    with pytest.raises(UserError, match="1 <= N <= 32"):
        run_experiment(make_cfg(*cfgs[2][:-3], "spec.draft=layers:33", *cfgs[2][-2:]), tmp_path / "too_deep")


@pytest.mark.parametrize("spec,overlap,want", [(None, True, {"overlap": True}),
                                                 (object(), True, {"overlap": False, "spec_overlap": True}),
                                                 (object(), False, {"overlap": False, "spec_overlap": False})])
def test_engine_config_records_the_loop_the_simulator_replays(spec: Any, overlap: bool, want: dict) -> None:
    """With speculation the recorded ``overlap`` is false (the simulator's speculating loop runs a
    step at a time, and compare sets ``backend.pipeline`` from it); ``spec_overlap`` keeps the
    engine's own setting."""
    from dataclasses import dataclass
    from types import SimpleNamespace

    from twinserve.experiments.backends.engine import _used_config

    @dataclass
    class Cfg:
        model: str = "m"

    eng = SimpleNamespace(cfg=Cfg(), overlap=overlap, scheduler=SimpleNamespace(spec=spec),
                          plan=SimpleNamespace(piecewise_max_tokens=0))
    got = _used_config(eng)
    assert {k: got[k] for k in want} == want and ("spec_overlap" in got) == (spec is not None)


def test_sim_auto_cutoff_is_the_engines(make_cfg: Any, tmp_path: Path) -> None:
    """spec.max_batch_size=auto on the simulator speculates up to the batch size the engine found
    (its summary's spec_max_batch_size): none at 0, fewer drafts at 2 than with no limit."""
    drafts = {}
    for cutoff in (0, 2, float("inf")):
        counters = {"spec_decode_num_reached_pos0": 10, "spec_decode_num_accepted_tokens_pos0": 5,
                    "spec_decode_num_proposed_len0": 0, "spec_decode_num_proposed_len1": 10,
                    "spec_max_batch_size": cutoff}
        path = tmp_path / f"summary_{cutoff}.json"
        path.write_text(json.dumps({"spec": counters}))
        s = run_experiment(make_cfg(*SMALL, "spec.method=ngram", "spec.num_tokens=1", "spec.max_batch_size=auto",
                                    f"spec.acceptance_file={path}"), tmp_path / f"run_{cutoff}")
        assert s["completed"] == 12
        drafts[cutoff] = (load_run(tmp_path / f"run_{cutoff}")[2].get("spec") or {}).get("spec_decode_num_draft_tokens", 0)
    assert drafts[0] == 0 < drafts[2] < drafts[float("inf")]


def test_sim_auto_cutoff_needs_an_engine_measurement(make_cfg: Any, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="spec.max_batch_size=auto"):
        run_experiment(make_cfg(*SMALL, *SPEC, "spec.max_batch_size=auto"), tmp_path)


def test_sim_runs_steps_that_may_speculate_without_overlap(make_cfg: Any, tmp_path: Path) -> None:
    """The engine settles its in-flight step before it forms one while a verify step may come
    (decided from the requests running before the step is formed): the simulator prices such a
    step at device + host time, not the larger of the two; formed while more than
    ``spec.max_batch_size`` requests run, steps overlap again."""
    cost = ["cost_model=constant", "cost_model.step_s=0.004", "cost_model.cpu_s=0.001", "cost_model.overlap=true"]
    two = ["workload.num_requests=2", "workload.output_len=40"]
    for name, extra in (("plain", []), ("spec", [*SPEC, "spec.max_batch_size=1"])):
        run_experiment(make_cfg(*SMALL, *cost, *two, *extra), tmp_path / name)
    gap = {}
    for name in ("plain", "spec"):
        steps = load_run(tmp_path / name)[1].sort_values("start")
        steps["gap"] = steps["start"].shift(-1) - steps["start"]
        # settled first: formed right after a step with verify rows, or while one request ran
        # (at most the fewer of its own and the previous step's sequences), unless that one had
        # just computed its prompt, whose last tokens (random ids) recur nowhere in it: no draft
        # can follow them (`spec_accept.may_draft_after`)
        one = np.minimum(steps["num_seqs"], steps["num_seqs"].shift(1)) == 1
        drafted = steps.get("spec_num_draft_tokens", 0.0 * steps["num_seqs"]).shift(1) > 0
        after_prompt = (steps["num_prefills"].shift(1) > 0) & ~drafted
        steps["serial"] = drafted | (one & ~after_prompt) if name == "spec" else False
        gap[name] = {k: g["gap"].dropna().to_numpy() for k, g in steps.iloc[1:-1].groupby("serial")}
    assert np.allclose(np.concatenate(list(gap["plain"].values())), 0.004)
    assert np.allclose(gap["spec"][True], 0.005) and np.allclose(gap["spec"][False], 0.004)
    assert len(gap["spec"][True]) > 10 and len(gap["spec"][False]) >= 3


@pytest.mark.parametrize("no_match", [0, 60, 100])
def test_sim_overlaps_steps_after_which_no_draft_can_follow(make_cfg: Any, tmp_path: Path, no_match: int) -> None:
    """An engine summary whose prompt lookup found, for ``no_match`` of 100 requests checked past
    a pending token, that no draft could follow: the simulator draws the same share, and a step
    where it holds for every running request drafts nothing and overlaps its predecessor (one
    request at a time: it holds exactly when the draw says so)."""
    counters = {"spec_decode_num_reached_pos0": 100, "spec_decode_num_accepted_tokens_pos0": 80,
                "spec_decode_num_proposed_len0": 50, "spec_decode_num_proposed_len1": 50,
                "spec_decode_num_after_checked": 100, "spec_decode_num_after_no_match": no_match}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"spec": counters}))
    cost = ["cost_model=constant", "cost_model.step_s=0.004", "cost_model.cpu_s=0.001", "cost_model.overlap=true"]
    run_experiment(make_cfg(*SMALL, *cost, "workload.num_requests=1", "workload.output_len=300", "spec.method=ngram",
                            "spec.num_tokens=1", f"spec.acceptance_file={path}"), tmp_path / "run")
    _, steps, summary = load_run(tmp_path / "run")
    steps = steps.sort_values("start")
    gap = (steps["start"].shift(-1) - steps["start"]).iloc[1:-1]
    drafted = steps["spec_num_draft_tokens"].iloc[1:-1] > 0
    after_verify = (steps["spec_num_draft_tokens"].shift(1) > 0).iloc[1:-1]
    overlapped = np.isclose(gap, 0.004)
    assert not (overlapped & (drafted | after_verify)).any()  # held steps draft nothing; verify steps settle
    checked = summary["spec"]["spec_decode_num_after_checked"]
    assert overlapped.sum() == summary["spec"]["spec_decode_num_after_no_match"]
    if no_match == 0:  # nothing to draw: only the check right after the prompt (random ids) holds
        assert summary["spec"]["spec_decode_num_after_no_match"] == 1 and summary["spec"]["spec_decode_num_drafts"] > 50
        return
    share = summary["spec"]["spec_decode_num_after_no_match"] / checked
    assert checked > 50 and abs(share - no_match / 100) < 0.15
    assert (summary["spec"]["spec_decode_num_drafts"] == 0) == (no_match == 100)


def test_a_speculating_simulation_prices_its_host_with_the_spec_phase_fit(make_cfg: Any, tmp_path: Path) -> None:
    """A calibration with `HostFit.spec` (the profile's speculative phase): replicas whose
    schedulers speculate take their host parts from it (`CostModel.speculating`); the same
    file prices a run without speculation by its plain fit."""
    from dataclasses import replace

    from twinserve.simulator.cost import Calibration, CpuFit, LinearFit, Provenance
    from twinserve.simulator.cost.calibration import HostFit

    def host(scale: float) -> HostFit:
        part = {k: LinearFit(["1"], [scale * v]) for k, v in (("sched", 5e-5), ("complete", 4e-5), ("loop", 3e-5))}
        return HostFit(**part, launch={r: LinearFit(["1"], [scale * 1e-3]) for r in ("decode", "prefill", "mixed")})

    def cal_file(name: str, spec_scale: float) -> Path:
        cal = Calibration(Provenance("h100", "qwen3-0.6b", 1),
                          {"decode": LinearFit(["1"], [2e-4]), "prefill": LinearFit(["1"], [2e-4])},
                          CpuFit(["1"], [0.0]), host=replace(host(1.0), spec=host(spec_scale)))
        return cal.save(tmp_path / name / "c.json").parent

    cfg = [*SMALL, "backend.pipeline=true", "cost_model.name=calibrated", "model=qwen3-0.6b", "hardware=h100"]
    same, slow = cal_file("same", 1.0), cal_file("slow", 3.0)
    a = run_experiment(make_cfg(*cfg, *SPEC, f"cost_model.calibration_dirs=[{same}]"), tmp_path / "a")
    b = run_experiment(make_cfg(*cfg, *SPEC, f"cost_model.calibration_dirs=[{slow}]"), tmp_path / "b")
    assert b["mean_tpot_ms"] > 2.0 * a["mean_tpot_ms"]  # host-bound steps, three times the host work
    pa = run_experiment(make_cfg(*cfg, f"cost_model.calibration_dirs=[{same}]"), tmp_path / "pa")
    pb = run_experiment(make_cfg(*cfg, f"cost_model.calibration_dirs=[{slow}]"), tmp_path / "pb")
    assert pb["mean_tpot_ms"] == pytest.approx(pa["mean_tpot_ms"], rel=1e-12)
