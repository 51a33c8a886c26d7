"""Calibration files: JSON round trip, lookup by (gpu, model, tp), fitting, NNLS, noise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from twinserve.core.graph_plan import dense_layers
from twinserve.calibration import fit_calibration
from twinserve.calibration.nnls import nnls
from twinserve.simulator.cost import COST_MODELS, Calibration, Provenance, StepNoise, find_calibration

TRUE_PREFILL_TERMS = ("1", "num_seqs", "padded_tokens", "prefill_attn", "prefill_ctx", "max_ctx")
TRUE = {
    "decode": {"1": 4e-3, "num_seqs": 2e-5, "decode_ctx": 3e-9, "padded_decodes": 1e-5},
    "prefill": {"1": 5e-3, "num_seqs": 0.0, "padded_tokens": 6e-5, "prefill_attn": 2e-10, "prefill_ctx": 0.0,
                "max_ctx": 5e-8},
    "mixed": {"1": 6e-3, "num_seqs": 1e-5, "padded_tokens": 6e-5, "prefill_attn": 2e-10,
              "prefill_ctx": 0.0, "decode_ctx": 3e-9, "max_ctx": 0.0},
}
# the eager steps' own terms (`calibration.fit.EAGER_TERMS`) and the pieces' prefill constant
# (`PIECE_PREFILL_TERM`): none in this model, so fitted at 0
EAGER_ZERO = {"prefill": dict.fromkeys(("eager_step", "eager_step*num_seqs", "eager_step*prefill_attn",
                                        "piece_step"), 0.0),
              "mixed": dict.fromkeys(("eager_step", "eager_step*num_seqs", "eager_step*prefill_attn",
                                      "eager_step*decode_ctx"), 0.0)}


def synthetic_steps(n: int, seed: int, noise: float = 0.0) -> pd.DataFrame:
    """Step rows whose durations follow TRUE exactly (times a lognormal noise factor)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        kind = ("decode", "prefill", "mixed")[i % 3]
        nd = int(rng.integers(1, 200)) if kind != "prefill" else 0
        npf = int(rng.integers(1, 3)) if kind != "decode" else 0
        pt = int(rng.integers(16, 8000)) if npf else 0
        start = int(rng.integers(0, 4000)) if npf else 0
        ctx = int(rng.integers(10, 8000))  # every decode's context
        row = dict(num_seqs=nd + npf, num_decodes=nd, num_prefills=npf, new_tokens=nd + pt,
                   prefill_tokens=pt, decode_ctx=nd * ctx,
                   prefill_ctx=npf * start + pt if npf else 0,  # npf chunks after ``start`` cached
                   prefill_attn=pt * start + pt * (pt + 1) // 2, padded_decodes=nd + (-nd) % 8,
                   max_ctx=max(start + pt if npf else 0, ctx if nd else 0))
        # the dense rows: padded to a piecewise-graph size up to 2048 tokens, exact above
        row["padded_tokens"], _ = dense_layers(row["new_tokens"], nd, kind == "decode")
        y = sum(c * (1 if t == "1" else row[t]) for t, c in TRUE[kind].items())
        row["duration"] = y * float(np.exp(rng.normal(0, noise))) if noise else y
        row["cpu_s"] = 2e-4 + 3e-6 * row["num_seqs"]
        rows.append(row)
    return pd.DataFrame(rows)


def test_fit_recovers_known_coefficients() -> None:
    # without the engine's graph_tokens every step would read as eager: mark only those above the
    # token graphs (dense_layers), so that the eager terms are told apart from the shared ones
    cal = fit_calibration(_eager_marked(synthetic_steps(900, 0)), Provenance("h200", "llama3-8b", 1), overlap=True)
    for regime, coefs in TRUE.items():
        fit = cal.regimes[regime]
        got = dict(zip(fit.terms, fit.coef))
        for term, c in {**coefs, **EAGER_ZERO.get(regime, {})}.items():
            assert got[term] == pytest.approx(c, rel=1e-6, abs=1e-15), (regime, term)
        assert fit.mape < 1e-9 and fit.n == 300 and fit.n_test == 300  # every row is held out once (5 folds)
    cpu = dict(zip(cal.cpu.terms, cal.cpu.coef))
    assert cpu["1"] == pytest.approx(2e-4) and cpu["num_seqs"] == pytest.approx(3e-6)
    assert cal.residuals.ratio[0] == pytest.approx(1.0) and cal.residuals.ratio[-1] == pytest.approx(1.0)


def _eager_marked(steps: pd.DataFrame) -> pd.DataFrame:
    """``steps`` with ``eager_step`` by `dense_layers`, and the prefill steps of the token graphs
    marked as whole-graph replays (``graph_replay``; few sequences, as `hybrid` runs them): else
    every other prefill step would run the pieces (`piece_step`), whose constant the fit could
    not tell from the shared one's."""
    eager = [int(dense_layers(t, d, p == 0)[1]) for t, d, p in
             zip(steps["new_tokens"], steps["num_decodes"], steps["num_prefills"])]
    whole = ((steps["num_prefills"] > 0) & (steps["num_decodes"] == 0) & (np.array(eager) == 0)).astype(int)
    return steps.assign(eager_step=eager, graph_replay=whole)


def test_eager_steps_get_terms_of_their_own() -> None:
    """Steps with no CUDA graph (`eager_step`) that cost a constant, a per-sequence and an
    attention share more than the model of the graph steps: the eager terms take exactly that,
    the shared terms stay as they were, and every row is predicted (out of fold) exactly; the
    terms of the graph steps alone cannot follow them."""
    from twinserve.calibration.fit import DEFAULT_TERMS

    steps = _eager_marked(synthetic_steps(1200, 4))
    eager = steps["eager_step"].to_numpy() == 1
    extra = 3e-3 + 2e-5 * steps["num_seqs"] + 1e-10 * steps["prefill_attn"]
    steps.loc[eager, "duration"] += extra[eager]
    assert 50 < eager.sum() < 700
    cal = fit_calibration(steps, Provenance("h200", "llama3-8b", 1))
    for regime in ("prefill", "mixed"):
        fit = cal.regimes[regime]
        got = dict(zip(fit.terms, fit.coef))
        assert got["eager_step"] == pytest.approx(3e-3, rel=1e-6)
        assert got["eager_step*num_seqs"] == pytest.approx(2e-5, rel=1e-6)
        assert got["eager_step*prefill_attn"] == pytest.approx(1e-10, rel=1e-6)
        assert got["prefill_attn"] == pytest.approx(2e-10, rel=1e-6) and got["1"] == pytest.approx(TRUE[regime]["1"])
        assert fit.mape < 1e-9
    plain = {k: tuple(t for t in v if not t.startswith("eager_step")) for k, v in DEFAULT_TERMS.items()}
    without = fit_calibration(steps, Provenance("h200", "llama3-8b", 1), terms=plain)
    assert without.regimes["prefill"].mape > 1e-3 and without.regimes["mixed"].mape > 1e-3


def test_prefill_steps_that_run_the_pieces_get_a_constant_of_their_own() -> None:
    """Prefill steps that run the pieces (neither one replay nor eager: `piece_step`) and cost a
    constant more than the whole-graph ones: the prefill fit's `PIECE_PREFILL_TERM` takes it,
    and the fit without it cannot follow them."""
    from twinserve.calibration.fit import DEFAULT_TERMS, PIECE_PREFILL_TERM

    steps = _eager_marked(synthetic_steps(1200, 6))
    pieces = (steps["num_prefills"] == 2) & (steps["graph_replay"] == 1)  # two prompts: say, the pieces
    steps.loc[pieces, "graph_replay"] = 0
    steps.loc[pieces, "duration"] += 2e-3
    assert 30 < pieces.sum() < 300
    cal = fit_calibration(steps, Provenance("h200", "llama3-8b", 1))
    got = dict(zip(cal.regimes["prefill"].terms, cal.regimes["prefill"].coef))
    assert got[PIECE_PREFILL_TERM] == pytest.approx(2e-3, rel=1e-6) and got["1"] == pytest.approx(TRUE["prefill"]["1"])
    assert cal.regimes["prefill"].mape < 1e-9
    plain = {**DEFAULT_TERMS, "prefill": tuple(t for t in DEFAULT_TERMS["prefill"] if t != PIECE_PREFILL_TERM)}
    assert fit_calibration(steps, Provenance("h200", "llama3-8b", 1), terms=plain).regimes["prefill"].mape > 1e-3


def test_decodes_in_wide_eager_tiles_get_terms_of_their_own() -> None:
    """Mixed steps whose attention plan gives every decode a 64- or 128-row query tile
    (``attn_tile``) and whose decode context costs that much more: `TILE_TERMS` take exactly
    the extra per context token, and the fit without them cannot follow those steps."""
    from twinserve.calibration.fit import DEFAULT_TERMS, TILE_TERMS

    steps = _eager_marked(synthetic_steps(1500, 7))
    mixed = (steps["num_prefills"] > 0) & (steps["num_decodes"] > 0)
    tile = np.where(mixed, np.random.default_rng(7).choice([0, 16, 64, 128], len(steps)), 0)
    steps = steps.assign(attn_tile=tile)
    extra = (1e-10 * np.maximum(tile - 16, 0) + 2e-10 * np.maximum(tile - 64, 0)) * steps["decode_ctx"]
    steps["duration"] += extra
    assert ((tile == 64) & mixed).sum() > 50 and ((tile == 128) & mixed).sum() > 50
    cal = fit_calibration(steps, Provenance("h200", "llama3-8b", 1))
    got = dict(zip(cal.regimes["mixed"].terms, cal.regimes["mixed"].coef))
    assert got[TILE_TERMS[0]] == pytest.approx(1e-10, rel=1e-6) and got[TILE_TERMS[1]] == pytest.approx(2e-10, rel=1e-6)
    assert got["decode_ctx"] == pytest.approx(TRUE["mixed"]["decode_ctx"], rel=1e-6)
    assert cal.regimes["mixed"].mape < 1e-9
    plain = {**DEFAULT_TERMS, "mixed": tuple(t for t in DEFAULT_TERMS["mixed"] if t not in TILE_TERMS)}
    assert fit_calibration(steps, Provenance("h200", "llama3-8b", 1), terms=plain).regimes["mixed"].mape > 1e-3


def test_fit_reports_cross_validated_error_and_residual_spread() -> None:
    cal = fit_calibration(synthetic_steps(1500, 1, noise=0.05), Provenance("h200", "llama3-8b", 1))
    for fit in cal.regimes.values():
        assert 0.02 < fit.mape < 0.08  # E|exp(N(0, .05)) - 1| ~ 0.04
    r = cal.residuals
    q = dict(zip(r.levels, r.ratio))
    assert q[0.5] == pytest.approx(1.0, abs=0.02)
    assert q[0.05] == pytest.approx(np.exp(-1.645 * 0.05), abs=0.02)
    assert q[0.95] == pytest.approx(np.exp(1.645 * 0.05), abs=0.02)


def test_host_device_steps_whose_thread_was_descheduled_are_left_out() -> None:
    """CPU engine records: a step whose wall span is well over the thread's CPU time over its
    launch had the thread off the CPU (a busy neighbour); its span says nothing of the step.
    With ``host_device`` the fit leaves such rows out and recovers the exact model; without it
    (a GPU's records, where the device span is not CPU time) they are fitted and spoil it."""
    from twinserve.calibration.fit import descheduled_steps
    from twinserve.calibration.linear import regime_of

    steps = _eager_marked(synthetic_steps(900, 4))
    steps["launch_cpu_s"] = steps["duration"] * 1.02   # undisturbed: CPU time ~ the span
    hit = np.random.default_rng(0).random(len(steps)) < 0.1
    steps.loc[hit, "duration"] *= 8.0                   # descheduled for 7/8 of the span
    assert (descheduled_steps(steps) == hit).all()
    prov = Provenance("cpu", "tiny-llama", 1)
    cal = fit_calibration(steps, prov, overlap=False, host_device=True)
    for regime, coefs in TRUE.items():
        fit = cal.regimes[regime]
        got = dict(zip(fit.terms, fit.coef))
        for term, c in coefs.items():
            assert got[term] == pytest.approx(c, rel=1e-6, abs=1e-15), (regime, term)
        assert fit.mape < 1e-9 and fit.n == int(((regime_of(steps) == regime).to_numpy() & ~hit).sum())
    spoiled = fit_calibration(steps, prov, overlap=False)
    assert all(spoiled.regimes[r].mape > 0.05 for r in TRUE)
    # a regime with too few undisturbed steps is fitted on all of them rather than dropped
    steps.loc[steps["num_prefills"] == 0, "duration"] *= 8.0
    few = fit_calibration(steps, prov, overlap=False, host_device=True)
    assert few.regimes["decode"].n == 300 and few.regimes["decode"].mape < 0.1


def test_fit_needs_decode_and_prefill_rows() -> None:
    df = synthetic_steps(90, 0)
    with pytest.raises(ValueError, match="prefill"):
        fit_calibration(df[df.num_prefills == 0], Provenance("h200", "x", 1))


def test_json_round_trip_and_lookup(tmp_path: Path) -> None:
    cal = fit_calibration(synthetic_steps(300, 2), Provenance("h100", "qwen3-8b", 2, date="2025-01-01"))
    path = cal.save(tmp_path / "h100_qwen3-8b_tp2.json")
    d = json.loads(path.read_text())
    assert d["version"] == 1 and d["provenance"]["tp"] == 2
    assert set(d["regimes"]) == {"decode", "prefill", "mixed"} and "residuals" in d and "cpu" in d
    back = Calibration.load(path)
    assert back.to_dict() == cal.to_dict()
    (tmp_path / "broken.json").write_text("{not json")
    assert find_calibration("h100", "qwen3-8b", 2, [tmp_path]) == path
    assert find_calibration("h100", "qwen3-8b", 1, [tmp_path]) is None
    assert find_calibration("h200", "qwen3-8b", 2, [tmp_path / "missing", tmp_path]) is None
    m = COST_MODELS.create("calibrated", calibration=path)
    assert m.describe()["model"] == "qwen3-8b"


def test_the_file_records_where_the_profile_went_from_token_graphs_to_eager(tmp_path: Path) -> None:
    """`TokenGraphSplit`: the most tokens of a prefill/mixed step with token graphs and the fewest
    of an eager one; a cap agrees when it sends every profiled step the same way."""
    from twinserve.simulator.cost.calibration import TokenGraphSplit

    steps = _eager_marked(synthetic_steps(600, 5))  # token graphs up to 2,048 tokens (dense_layers)
    cal = fit_calibration(steps, Provenance("h200", "llama3-8b", 1))
    chunk = steps["num_prefills"] > 0
    split = cal.token_graphs
    assert split == TokenGraphSplit(int(steps.new_tokens[chunk & (steps.eager_step == 0)].max()),
                                    int(steps.new_tokens[chunk & (steps.eager_step == 1)].min()))
    assert split.largest_graph_step <= 2048 < split.smallest_eager_step
    assert split.admits(2048) and not split.admits(8192) and not split.admits(0)
    assert Calibration.load(cal.save(tmp_path / "c.json")).token_graphs == split
    wide = TokenGraphSplit(8192)  # no eager step: any cap from 8,192 up agrees
    assert wide.admits(8192) and wide.admits(16384) and not wide.admits(2048)
    assert "none eagerly" in wide.describe() and "eagerly from" in split.describe()
    old = cal.to_dict()
    del old["token_graphs"]  # files written before the record load with none
    assert Calibration.from_dict(old).token_graphs is None


def test_bad_calibrations_are_refused() -> None:
    cal = fit_calibration(synthetic_steps(300, 3), Provenance("h200", "m", 1))
    d = cal.to_dict()
    with pytest.raises(ValueError, match="version"):
        Calibration.from_dict({**d, "version": 99})
    bad = json.loads(json.dumps(d))
    bad["regimes"]["decode"]["terms"][1] = "no_such_feature"
    with pytest.raises(ValueError, match="unknown feature"):
        Calibration.from_dict(bad)
    del bad["regimes"]["decode"]
    with pytest.raises((ValueError, KeyError)):
        Calibration.from_dict(bad)


def test_nnls_matches_unconstrained_solution_when_positive_and_clips_otherwise() -> None:
    rng = np.random.default_rng(0)
    A = rng.random((50, 4)) * [1, 1e3, 1e-3, 1e6]
    x = np.array([1.0, 2e-3, 5e2, 3e-6])
    assert np.allclose(nnls(A, A @ x), x, rtol=1e-8)
    b = A @ np.array([1.0, -2e-3, 5e2, 3e-6])
    sol = nnls(A, b)
    assert np.all(sol >= 0) and sol[1] == 0.0
    # KKT: the gradient is >= 0 on zero coefficients (no descent direction is feasible)
    grad = A.T @ (A @ sol - b)
    assert grad[1] >= -1e-8 * np.abs(A.T @ b).max()


def test_noise_stream_is_fixed_by_seed_and_not_by_draw_sizes() -> None:
    levels, ratio = np.array([0.0, 0.5, 1.0]), np.array([0.9, 1.0, 1.2])
    a, b = StepNoise(levels, ratio, seed=7, block=16), StepNoise(levels, ratio, seed=7, block=16)
    xs = [a.one() for _ in range(5)] + list(a.take(40)) + list(a.peek(3))
    a.skip(3)
    ys = list(b.take(48))
    assert xs == ys
    assert a.one() == b.one()
    other = StepNoise(levels, ratio, seed=8, block=16).take(48)
    assert not np.array_equal(other, ys)
    assert min(ys) >= 0.9 and max(ys) <= 1.2


def _coef(fit, term):
    return dict(zip(fit.terms, fit.coef))[term]


@pytest.mark.parametrize("sync", [False, True])
def test_fit_reads_device_and_host_parts_off_the_timeline(sync: bool, timeline_steps) -> None:
    steps = pd.concat([timeline_steps(400, 0, sync), synthetic_steps(60, 3)], ignore_index=True)
    steps.loc[400:, ["iter_start", "sched_s", "launch_s", "launch_end", "plan_wait_s", "complete_s",
                     "tokens_at", "dev_start", "dev_end"]] = np.nan
    cal = fit_calibration(steps, Provenance("h200", "llama3-8b", 1), overlap=True,
                          terms={"decode": ("1", "num_seqs"), "prefill": TRUE_PREFILL_TERMS})
    h = cal.host
    assert h is not None and h.sync_graph is sync and h.sync_eager is False
    dec = cal.regimes["decode"]
    assert _coef(dec, "1") == pytest.approx(1e-3, rel=1e-6) and _coef(dec, "num_seqs") == pytest.approx(2e-5, rel=1e-6)
    assert dec.mape < 1e-9  # the span predicted from the measured timeline is exact
    assert _coef(h.launch["decode"], "1") == pytest.approx(300e-6, rel=1e-6)
    assert _coef(h.launch["decode"], "num_seqs") == pytest.approx(2e-6, rel=1e-6)


def test_fit_recovers_the_overlap_loop_host_parts(tmp_path: Path, timeline_steps) -> None:
    steps = pd.concat([timeline_steps(400, 0), synthetic_steps(60, 3)], ignore_index=True)
    cal = fit_calibration(steps, Provenance("h200", "llama3-8b", 1), overlap=True)
    h = cal.host
    assert h is not None
    assert dict(zip(h.sched.terms, h.sched.coef))["1"] == pytest.approx(50e-6, rel=1e-6)
    assert _coef(h.launch["decode"], "num_seqs") == pytest.approx(2e-6, rel=1e-6)
    assert dict(zip(h.complete.terms, h.complete.coef))["num_seqs"] == pytest.approx(1e-6, rel=1e-6)
    loop = dict(zip(h.loop.terms, h.loop.coef))
    assert loop["1"] == pytest.approx(30e-6, rel=1e-6) and loop["num_seqs"] == pytest.approx(0.0, abs=1e-12)
    # the parts survive the JSON file and reach the cost model
    path = cal.save(tmp_path / "c.json")
    model = COST_MODELS.create("calibrated", calibration=path)
    from twinserve.core.batch import BatchFeatures

    f = BatchFeatures(num_seqs=10, num_decodes=10, num_prefills=0, new_tokens=10, prefill_tokens=0,
                      decode_ctx=1000, prefill_ctx=0, prefill_attn=0, padded_decodes=10, max_ctx=100)
    hp = model.host_parts(f)
    assert (hp.sched, hp.launch, hp.complete, hp.loop) == pytest.approx((60e-6, 320e-6, 50e-6, 30e-6), rel=1e-6)
    # the plain loop's host time is the host's own work, not the recorded cpu_s (which may wait)
    assert model.cpu_time(f) == pytest.approx(60e-6 + 320e-6 + 50e-6 + 30e-6, rel=1e-6)
    assert model.cpu_times([f, f]) == pytest.approx([model.cpu_time(f)] * 2)
    assert Calibration.load(path).host == cal.host


def test_timeline_helpers_on_an_overlapped_log(timeline_steps) -> None:
    from twinserve.calibration.fit import predict_span
    from twinserve.calibration.timeline import ran_overlapped

    steps = timeline_steps(200, 4)
    assert ran_overlapped(steps) is True
    serial = steps.copy()  # tokens delivered before the next iteration starts: no overlap
    serial["tokens_at"] = serial["launch_end"] + 1e-6
    serial["iter_start"] = np.arange(len(serial)) * 1.0
    assert ran_overlapped(serial) is False
    assert ran_overlapped(steps.drop(columns="tokens_at")) is None
    both = pd.concat([steps, synthetic_steps(60, 3)], ignore_index=True)
    cal = fit_calibration(both, Provenance("h200", "llama3-8b", 1), overlap=True,
                          terms={"decode": ("1", "num_seqs"), "prefill": TRUE_PREFILL_TERMS})
    span = predict_span(cal, steps)
    assert np.allclose(span, steps["duration"].to_numpy(), rtol=1e-9)


def test_decode_offsets_per_graph_size_are_fitted_and_applied_alike_to_one_or_many_steps(tmp_path: Path) -> None:
    from twinserve.core.batch import BatchFeatures
    from twinserve.simulator.cost.base import FeatureColumns

    steps = synthetic_steps(4500, 5)  # ~60 decode rows per graph size
    bump = {8: 4e-4, 16: -2e-4}  # two graph sizes run slower / faster than the line says
    dec = steps["num_prefills"] == 0
    extra = steps["padded_decodes"].map(lambda b: bump.get(int(b), 0.0)).where(dec, 0.0)
    steps["duration"] = steps["duration"] + extra
    cal = fit_calibration(steps, Provenance("h200", "llama3-8b", 1), overlap=True)
    line = fit_calibration(steps, Provenance("h200", "llama3-8b", 1), overlap=True, bucket_offsets=False)
    assert cal.decode_offsets and not line.decode_offsets
    # the line alone cannot follow the two graph sizes; line + offsets reproduces them exactly
    assert line.regimes["decode"].mape > 1e-3 and cal.regimes["decode"].mape < 1e-7
    # no size grows differently with the context here: every factor is 1 to within rounding
    assert all(abs(v - 1.0) < 1e-5 for v in cal.decode_scales.values())
    model = COST_MODELS.create("calibrated", calibration=cal.save(tmp_path / "c.json"))
    feats = [BatchFeatures(num_seqs=b, num_decodes=b, num_prefills=0, new_tokens=b, prefill_tokens=0,
                           decode_ctx=500 * b, prefill_ctx=0, prefill_attn=0, padded_decodes=p, max_ctx=600)
             for b, p in [(7, 8), (8, 8), (13, 16), (30, 32)]]
    one = [model.step_time(f) for f in feats]
    many = model.step_times(FeatureColumns(feats))
    assert list(many) == one  # bit for bit, as fast-forward needs
    t = TRUE["decode"]
    for f, got in zip(feats, one):  # the true line plus the bump of the graph size
        want = (t["1"] + t["num_seqs"] * f.num_seqs + t["decode_ctx"] * f.decode_ctx
                + t["padded_decodes"] * f.padded_decodes + bump.get(f.padded_decodes, 0.0))
        assert got == pytest.approx(want, rel=1e-6)


def test_decode_factors_per_graph_size_follow_sizes_that_grow_at_their_own_rate(tmp_path: Path) -> None:
    """Two graph sizes whose time grows 1.6x and 0.7x as fast as the line with the context: the
    offsets alone cannot follow them, a factor per size does; the cost model applies ``fit *
    factor + offset`` alike to one step or many, and ``bucket_scales=False`` is the old fit."""
    from twinserve.core.batch import BatchFeatures
    from twinserve.simulator.cost.base import FeatureColumns

    steps = synthetic_steps(4500, 5)
    rate = {8: 1.6, 16: 0.7}
    dec = steps["num_prefills"] == 0
    t = TRUE["decode"]
    ctx_part = t["decode_ctx"] * steps["decode_ctx"]
    extra = (steps["padded_decodes"].map(lambda b: rate.get(int(b), 1.0)) - 1.0) * ctx_part
    steps["duration"] = steps["duration"] + extra.where(dec, 0.0)
    prov = Provenance("h200", "llama3-8b", 1)
    cal = fit_calibration(steps, prov, overlap=True)
    old = fit_calibration(steps, prov, overlap=True, bucket_scales=False)
    assert not old.decode_scales and old.decode_offsets
    assert cal.regimes["decode"].mape < 0.5 * old.regimes["decode"].mape
    sc = {int(k): v for k, v in cal.decode_scales.items()}
    assert sc[8] > 1.2 and sc[16] < 0.9
    again = Calibration.load(cal.save(tmp_path / "c.json"))
    assert again.decode_scales == cal.decode_scales
    model = COST_MODELS.create("calibrated", calibration=tmp_path / "c.json")
    feats = [BatchFeatures(num_seqs=b, num_decodes=b, num_prefills=0, new_tokens=b, prefill_tokens=0,
                           decode_ctx=c * b, prefill_ctx=0, prefill_attn=0, padded_decodes=p, max_ctx=c)
             for b, p, c in [(8, 8, 300), (8, 8, 3000), (13, 16, 2000), (30, 32, 900)]]
    one = [model.step_time(f) for f in feats]
    assert list(model.step_times(FeatureColumns(feats))) == one  # bit for bit, as fast-forward needs
    for f, got in zip(feats, one):  # the generating line with its size's rate on the context
        want = (t["1"] + t["num_seqs"] * f.num_seqs + t["decode_ctx"] * f.decode_ctx * rate.get(f.padded_decodes, 1.0)
                + t["padded_decodes"] * f.padded_decodes)
        assert got == pytest.approx(want, rel=0.03)
    # an older file without factors reads as factors of 1
    d = cal.to_dict()
    d.pop("decode_scales")
    assert Calibration.from_dict(d).decode_scales == {}


def test_a_profile_without_prefill_steps_is_a_user_error_naming_the_regime() -> None:
    from twinserve.core.errors import UserError
    steps = synthetic_steps(300, 3)
    decode_only = steps[steps["num_prefills"] == 0].reset_index(drop=True)
    with pytest.raises(UserError, match=r"too few step records .*\['prefill'\].*--budget-s"):
        fit_calibration(decode_only, Provenance("h200", "llama3-8b", 1), overlap=True)
