"""Host-part fits: slow-host episodes left out, the graph launch's work before its wait."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from twinserve.core.batch import BatchFeatures
from twinserve.simulator.cost import COST_MODELS, Calibration, CpuFit, LinearFit, Provenance
from twinserve.calibration import fit_calibration
from twinserve.simulator.cost.calibration import HostFit
from twinserve.simulator.cost.base import CostModel, HostParts
from twinserve.calibration.host_episodes import slow_episodes
from twinserve.calibration.host_fit import HOST_TERMS, fit_host
from twinserve.calibration.timeline import detect_sync, timeline_frame


def _coef(fit, term):
    return dict(zip(fit.terms, fit.coef))[term]


def _with_prefill_rows(steps: pd.DataFrame) -> pd.DataFrame:
    """fit_calibration needs a prefill regime: a few eager prefill rows without a timeline."""
    rows = [dict(num_seqs=1, num_decodes=0, num_prefills=1, new_tokens=n, prefill_tokens=n,
                 decode_ctx=0, prefill_ctx=n, prefill_attn=n * (n + 1) // 2, padded_decodes=0,
                 max_ctx=n, duration=1e-3 + 1e-6 * n, cpu_s=1e-3) for n in range(64, 64 * 31, 64)]
    return pd.concat([steps, pd.DataFrame(rows)], ignore_index=True)


def test_a_slow_stretch_is_found_by_the_windowed_host_speed() -> None:
    n = 1200
    steps = pd.DataFrame({"iter_start": np.arange(n) * 1e-3})
    rng = np.random.default_rng(0)
    log_ratio = rng.normal(0, 0.1, n)          # single steps vary (stalls are not episodes)
    log_ratio[::50] += 2.0
    log_ratio[500:800] += np.log(1.8)          # a stretch of 300 steps 1.8x slower
    slow, factor = slow_episodes(steps, log_ratio)
    assert slow[520:780].all() and not slow[:480].any() and not slow[820:].any()
    assert np.median(factor[520:780]) == pytest.approx(1.8, rel=0.05)


@pytest.mark.parametrize("sync", [False, True])
def test_host_fits_leave_a_slow_host_episode_out(sync: bool, timeline_steps) -> None:
    steps = timeline_steps(1500, 0, sync=sync, slow=(600, 1000))
    tl = timeline_frame(steps)
    res = fit_host(steps, np.random.default_rng(0), tl=tl, sync=(sync, False))
    h = res.fit
    assert res.slow.iloc[620:980].all() and not res.slow.iloc[:560].any() and not res.slow.iloc[1040:].any()
    assert h.slow_share == pytest.approx(400 / 1500, abs=0.03) and h.slow_factor == pytest.approx(2.0, rel=0.05)
    assert _coef(h.launch["decode"], "1") == pytest.approx(300e-6, rel=1e-6)
    assert _coef(h.sched, "1") == pytest.approx(50e-6, rel=1e-6)
    assert _coef(h.complete, "num_seqs") == pytest.approx(1e-6, rel=1e-6)
    # fitted as if typical, the episode raises the fits
    blind = fit_host(steps, np.random.default_rng(0), tl=tl, sync=(sync, False), episodes=False).fit
    assert blind.slow_share == 0.0 and not fit_host(steps, np.random.default_rng(0), tl=tl, episodes=False).slow.any()
    assert _coef(blind.launch["decode"], "1") > 1.02 * 300e-6 or _coef(blind.launch["decode"], "num_seqs") > 1.02 * 2e-6


def test_graph_launch_work_before_its_wait_is_fitted_from_idle_launches(timeline_steps, tmp_path) -> None:
    pre = 400e-6
    steps = timeline_steps(1500, 1, sync=True, pre=pre, idle_every=10)
    tl = timeline_frame(steps)
    assert detect_sync(steps, tl, graph=True)
    h = fit_host(steps, np.random.default_rng(0), tl=tl, sync=(True, False)).fit
    assert _coef(h.pre, "1") == pytest.approx(pre, rel=1e-6) and _coef(h.pre, "num_seqs") == pytest.approx(0, abs=1e-12)
    assert _coef(h.launch["decode"], "1") == pytest.approx(300e-6, rel=1e-6)
    assert _coef(h.launch["decode"], "num_seqs") == pytest.approx(2e-6, rel=1e-6)
    # the whole calibration carries it to the cost model, and the simulator's host time counts it
    cal = fit_calibration(_with_prefill_rows(steps), Provenance("h200", "llama3-8b", 1), overlap=True,
                          terms={"decode": ("1", "num_seqs"), "prefill": ("1", "new_tokens")})
    model = COST_MODELS.create("calibrated", calibration=cal.save(tmp_path / "c.json"))
    f = BatchFeatures(num_seqs=10, num_decodes=10, num_prefills=0, new_tokens=10, prefill_tokens=0,
                      decode_ctx=1000, prefill_ctx=0, prefill_attn=0, padded_decodes=10, max_ctx=100)
    hp = model.host_parts(f)
    assert hp.sync and hp.graph and hp.pre == pytest.approx(pre, rel=1e-6)
    assert hp.launch == pytest.approx(320e-6, rel=1e-6)
    assert model.cpu_time(f) == pytest.approx(hp.sched + pre + hp.launch + hp.complete + hp.loop, rel=1e-9)
    # a step the engine runs without overlap: the host parts, the graph's span from its replay on
    # (its device-only work where the fit has one, else the step time given)
    gpu = model.step_time(f)
    dev = gpu if hp.device is None else hp.device
    want = hp.sched + pre + hp.launch - hp.post + max(hp.post, dev) + hp.complete + hp.loop
    assert model.serial_wall(f, gpu, model.cpu_time(f)) == pytest.approx(want, rel=1e-9)
    assert max(gpu, model.cpu_time(f)) < want <= gpu + model.cpu_time(f)
    # without idle launches nothing tells the part before the wait apart: it stays 0
    h0 = fit_host(timeline_steps(600, 2, sync=True, pre=pre), np.random.default_rng(0),
                  tl=timeline_frame(timeline_steps(600, 2, sync=True, pre=pre)), sync=(True, False)).fit
    assert h0.pre.coef == [0.0]


def test_a_recorded_runs_host_speed_is_read_back_and_replayed(timeline_steps, run_sim) -> None:
    from twinserve.core.workload import WORKLOADS
    from twinserve.simulator.cost.base import CostModel, HostParts
    from twinserve.calibration.host_fit import host_speed_trace
    from twinserve.simulator.host_speed import HostSpeed

    steps = timeline_steps(1500, 3, slow=(600, 1000))
    h = fit_host(steps, np.random.default_rng(0), tl=timeline_frame(steps)).fit
    times, factors = host_speed_trace(steps, h)
    assert np.all(np.diff(times) >= 0) and len(times) == len(steps)
    assert np.median(factors[650:950]) == pytest.approx(2.0, rel=0.02)
    assert np.median(factors[:550]) == pytest.approx(1.0, rel=0.02)
    speed = HostSpeed(np.array([0.0, 1.0]), np.array([1.0, 2.0]))
    assert speed.at(-1.0) == 1.0 and speed.at(0.5) == 1.0 and speed.at(1.0) == 2.0
    hp = speed.scale(HostParts(1e-3, 2e-3, 1e-3, 5e-4, tail=3e-4, pre=1e-4, device=0.01), 1.5)
    assert (hp.sched, hp.launch, hp.complete, hp.loop, hp.pre) == pytest.approx((2e-3, 4e-3, 2e-3, 1e-3, 2e-4))
    assert hp.tail == 3e-4 and hp.device == 0.01  # device work is not host work
    with pytest.raises(ValueError):
        HostSpeed(np.array([1.0, 0.0]), np.array([1.0, 1.0]))
    # a run that speculated is read against the speculating engine's fit
    from dataclasses import replace

    spec_fit = fit_host(timeline_steps(1500, 3, host_factor=1.4), np.random.default_rng(0)).fit
    h2 = replace(h, spec=replace(spec_fit, spec=None))
    drafted = timeline_steps(1500, 5, host_factor=1.4).assign(spec_num_draft_tokens=1)
    assert np.median(host_speed_trace(drafted, h2)[1]) == pytest.approx(1.0, rel=0.03)
    assert np.median(host_speed_trace(drafted.assign(spec_num_draft_tokens=0), h2)[1]) == pytest.approx(1.4, rel=0.03)

    class Fixed(CostModel):  # host-bound eager steps: 1 + 4 + 1 + 0.5 ms of host, 1 ms of device
        def _gpu(self, x, mx):
            return x.num_seqs * 0.0 + 0.001

        def host_parts(self, f):
            return HostParts(0.001, 0.004, 0.001, 0.0005)

    wl = WORKLOADS.create("poisson", num_requests=1, rate=1.0, seed=0, prompt_len=32,
                          output_len=20).with_vocab(1024)
    base = run_sim(wl, cost=Fixed(), num_pages=64, page_size=16, pipeline=True)
    slow = run_sim(wl, cost=Fixed(), num_pages=64, page_size=16, pipeline=True,
                   host_speed=HostSpeed(np.array([0.0]), np.array([2.0])))
    gap = lambda r: np.diff(np.asarray(r.requests.iloc[0]["token_times"])).mean()  # noqa: E731
    assert gap(slow) == pytest.approx(2 * gap(base), rel=1e-9)


def test_graph_work_is_read_from_its_replay_even_when_the_host_is_slow(timeline_steps, tmp_path) -> None:
    """The graph starts once its replay is enqueued, ``post`` before the launch ends. Read from
    ``replay_end``, every graph step's device work is exact, in a slow-host episode too; read
    from ``launch_end`` (profiles without the column) the episode's steps read short. The fit
    recovers ``post`` and the cost model hands it to the pipelined loop."""
    post = 150e-6
    steps = timeline_steps(1500, 4, post=post, slow=(600, 900), slow_factor=2.0, idle_every=2)
    true = 1e-3 + 2e-5 * steps["num_seqs"].to_numpy()
    tl = timeline_frame(steps)
    assert np.allclose(tl["device_s"].to_numpy(), true, rtol=0, atol=1e-12)
    old = timeline_frame(steps.drop(columns="replay_end"))["device_s"].to_numpy()
    ep = np.arange(len(steps))
    ep = (ep >= 600) & (ep < 900)
    idle = (tl["prev_end"] < steps["dev_start"] - 1e-9).to_numpy()  # the graph waited for its launch
    short = true - old
    assert idle[ep].sum() > 100 and np.allclose(short[idle & ep], 2 * post)  # slow host: 2x short
    assert np.allclose(short[idle & ~ep][1:], post) and (short[1:] >= -1e-12).all()
    h = fit_host(steps, np.random.default_rng(0), tl=tl).fit
    assert _coef(h.post, "1") == pytest.approx(post, rel=1e-6)
    assert h.slow_share == pytest.approx(0.2, abs=0.03)
    cal = fit_calibration(_with_prefill_rows(steps), Provenance("h200", "llama3-8b", 1), overlap=True,
                          terms={"decode": ("1", "num_seqs"), "prefill": ("1", "new_tokens")})
    assert cal.regimes["decode"].coef == pytest.approx([1e-3, 2e-5], rel=1e-3)
    model = COST_MODELS.create("calibrated", calibration=cal.save(tmp_path / "c.json"))
    f = BatchFeatures(num_seqs=10, num_decodes=10, num_prefills=0, new_tokens=10, prefill_tokens=0,
                      decode_ctx=1000, prefill_ctx=0, prefill_attn=0, padded_decodes=10, max_ctx=100)
    hp = model.host_parts(f)
    assert hp.graph and hp.post == pytest.approx(post, rel=1e-6)
    # without the column nothing is fitted: the graph starts at the launch's end, as before
    h0 = fit_host(steps.drop(columns="replay_end"), np.random.default_rng(0)).fit
    assert h0.post.coef == [0.0]


def test_slow_host_episodes_are_measured_and_drawn_again(timeline_steps, run_sim, poisson) -> None:
    """The profile's slow stretch (steps 600-899) is measured as one episode of its length;
    `HostSpeed.episodes` draws stretches with that share and length (seeded), and the pipelined
    loop under them runs slower than with the typical host."""
    from twinserve.simulator.host_speed import HostSpeed

    steps = timeline_steps(1500, 3, slow=(600, 900), slow_factor=2.0)
    h = fit_host(steps, np.random.default_rng(0), tl=timeline_frame(steps)).fit
    ep = steps.iloc[600:900]
    length = float(ep["tokens_at"].iloc[-1] - ep["iter_start"].iloc[0])
    assert h.slow_episode_s == pytest.approx(length, rel=0.15)
    hs = HostSpeed.episodes(0.3, 2.0, 0.5, horizon_s=2000.0, seed=1)
    assert np.array_equal(hs.times, HostSpeed.episodes(0.3, 2.0, 0.5, horizon_s=2000.0, seed=1).times)
    spans = np.diff(hs.times)
    slow = hs.factors[:-1] == 2.0
    assert spans[slow].sum() / spans.sum() == pytest.approx(0.3, abs=0.03)
    assert spans[slow].mean() == pytest.approx(0.5, rel=0.1)
    assert HostSpeed.episodes(0.0, 2.0, 0.5, horizon_s=10.0).at(5.0) == 1.0
    wl = poisson(n=40, rate=30.0, seed=2)
    base = run_sim(wl, cost=_HostBound(), num_pages=400, page_size=16, pipeline=True)
    slowed = run_sim(wl, cost=_HostBound(), num_pages=400, page_size=16, pipeline=True,
                     host_speed=HostSpeed.episodes(0.5, 3.0, 0.05, horizon_s=100.0, seed=0))
    assert slowed.requests["finish_s"].max() > base.requests["finish_s"].max()


class _HostBound(CostModel):
    """0.2 ms of device work and 2 ms of host launch per step: the host sets the pace."""

    def _gpu(self, x, mx):
        return x.num_seqs * 0.0 + 2e-4

    def host_parts(self, f: BatchFeatures) -> HostParts:
        return HostParts(2e-4, 2e-3, 1e-4, 1e-4)


def test_a_launch_that_runs_the_pieces_gets_a_term_of_its_own(timeline_steps, tmp_path) -> None:
    """Steps that run the pieces (`core.graph_plan.piece_step_of`: a graph replay per piece, the
    attention eager between) launch longer than one replay of the same batch: the launch fit
    reads that from ``piece_step`` and the cost model gives it back; the old terms cannot."""
    extra = 1.5e-3
    steps = timeline_steps(1500, 5, pieces_every=4, piece_launch=extra)
    h = fit_host(steps, np.random.default_rng(0)).fit
    launch = h.launch["decode"]
    assert "piece_step" in launch.terms
    assert _coef(launch, "piece_step") == pytest.approx(extra, rel=1e-3)
    assert _coef(launch, "1") == pytest.approx(300e-6, rel=1e-3)
    assert h.slow_share == 0.0  # the longer launches are not taken for a slow host
    old = {**HOST_TERMS, "launch": tuple(t for t in HOST_TERMS["launch"] if t != "piece_step")}
    blind = fit_host(steps, np.random.default_rng(0), terms=old).fit.launch["decode"]
    assert blind.mape > 10 * launch.mape
    rows = _with_prefill_rows(steps).fillna({"graph_replay": 0, "eager_step": 1})  # eager prefills
    cal = fit_calibration(rows, Provenance("h200", "llama3-8b", 1), overlap=True,
                          terms={"decode": ("1", "num_seqs"), "prefill": ("1", "new_tokens")})
    model = COST_MODELS.create("calibrated", calibration=cal.save(tmp_path / "c.json"))
    f = dict(num_seqs=10, num_decodes=10, num_prefills=0, new_tokens=10, prefill_tokens=0,
             decode_ctx=1000, prefill_ctx=0, prefill_attn=0, padded_decodes=10, max_ctx=100)
    whole, pieces = BatchFeatures(**f, graph_replay=1), BatchFeatures(**f, graph_replay=0)
    assert (whole.piece_step, pieces.piece_step) == (0, 1)
    gap = model.host_parts(pieces).launch - model.host_parts(whole).launch
    assert gap == pytest.approx(extra, rel=1e-3)


def test_a_step_that_verifies_drafts_gets_host_terms_of_its_own(timeline_steps, tmp_path) -> None:
    """A step with verify rows (speculative decoding) schedules the proposals, launches every
    draft position and completes the acceptance: ``verify_step`` (`core.batch.verify_step_of`)
    gets its own share of sched and complete, its launch a regime of its own (`host_regime`),
    and the cost model gives them back."""
    extra = (40e-6, 400e-6, 60e-6)
    steps = timeline_steps(1500, 7, verify_every=3, verify_extra=extra)
    h = fit_host(steps, np.random.default_rng(0)).fit
    assert _coef(h.sched, "verify_step") == pytest.approx(extra[0], rel=1e-3)
    assert _coef(h.launch["verify"], "1") == pytest.approx(300e-6 + extra[1], rel=1e-3)
    assert _coef(h.launch["verify"], "num_seqs") == pytest.approx(2e-6, rel=1e-3)
    assert "verify_step" not in h.launch["verify"].terms  # 1 on all its rows: it would only split "1"
    assert _coef(h.complete, "verify_step") == pytest.approx(extra[2], rel=1e-3)
    assert _coef(h.launch["decode"], "1") == pytest.approx(300e-6, rel=1e-3)
    assert h.slow_share == 0.0  # the longer steps are not taken for a slow host
    rows = _with_prefill_rows(steps).fillna({"verify_rows": 0})
    cal = fit_calibration(rows, Provenance("h200", "llama3-8b", 1), overlap=True,
                          terms={"decode": ("1", "num_seqs"), "prefill": ("1", "new_tokens")})
    model = COST_MODELS.create("calibrated", calibration=cal.save(tmp_path / "c.json"))
    f = dict(num_seqs=10, num_decodes=10, num_prefills=0, new_tokens=10, prefill_tokens=0,
             decode_ctx=1000, prefill_ctx=0, prefill_attn=0, padded_decodes=10, max_ctx=100)
    plain, verify = model.host_parts(BatchFeatures(**f)), model.host_parts(BatchFeatures(**f, verify_rows=2))
    assert verify.launch - plain.launch == pytest.approx(extra[1], rel=1e-3)
    assert verify.sched - plain.sched == pytest.approx(extra[0], rel=1e-3)
    assert verify.complete - plain.complete == pytest.approx(extra[2], rel=1e-3)


def test_the_eager_tail_grows_with_the_steps_sequences_and_is_fitted_on_their_spans(tmp_path) -> None:
    """Steps that are not one graph replay end no earlier than ``a + b * num_seqs`` after their
    launch (the device's work left after the host's last launch call): `_fit_tail` finds (a, b)
    on its grids from the spans of host-paced and device-bound steps alike, and the cost model
    hands the tail to the pipelined loop per step."""
    from twinserve.calibration.fit import TAIL_TERMS, _fit_tail
    from twinserve.calibration.timeline import coupled_span

    rng = np.random.default_rng(3)
    n, a, b = 600, 1e-4, 8e-6
    seqs = rng.integers(1, 200, n)
    start = np.cumsum(rng.uniform(5e-3, 2e-2, n))          # each launch's start
    launch = rng.uniform(5e-4, 6e-3, n)
    lead = rng.uniform(0.0, 1e-3, n)                        # the previous step still on the device
    device = 1e-3 + 2e-5 * seqs
    d0 = start + lead
    dev_end = np.maximum(d0 + device, start + launch + a + b * seqs)
    steps = pd.DataFrame(dict(num_seqs=seqs, num_decodes=seqs - 1, num_prefills=1, new_tokens=seqs + 99,
                              prefill_tokens=100, decode_ctx=500 * (seqs - 1), prefill_ctx=100,
                              prefill_attn=5050, padded_decodes=seqs, max_ctx=500, graph_replay=0,
                              eager_step=0, iter_start=start, sched_s=0.0, plan_wait_s=0.0, launch_s=launch,
                              launch_end=start + launch, dev_start=d0, dev_end=dev_end, duration=dev_end - d0))
    tl = timeline_frame(steps)
    paced = (start + launch + a + b * seqs) > d0 + device
    assert 0.2 < paced.mean() < 0.8  # both kinds of step are there
    fit = _fit_tail(steps, tl, device)
    assert fit.terms == list(TAIL_TERMS) and fit.coef == pytest.approx([a, b], rel=1e-9)
    assert fit.mape == pytest.approx(0.0, abs=1e-9)
    # the old constant tail cannot follow the sequences
    const = coupled_span(device, steps, np.zeros(n, bool), float(np.median(dev_end - steps.launch_end)))
    assert np.mean(np.abs(const / steps.duration.to_numpy() - 1)) > 0.02
    cal = Calibration(Provenance("h200", "qwen3-0.6b", 1), {"decode": LinearFit(["1"], [1e-3]),
                      "prefill": LinearFit(["1"], [1e-3])}, CpuFit(["1"], [0.0]),
                      host=HostFit(**{k: LinearFit(["1"], [1e-4]) for k in ("sched", "complete", "loop")},
                                   launch={r: LinearFit(["1"], [1e-3]) for r in ("decode", "prefill", "mixed")},
                                   tail=fit))
    model = COST_MODELS.create("calibrated", calibration=cal.save(tmp_path / "c.json"))
    f = BatchFeatures(num_seqs=50, num_decodes=49, num_prefills=1, new_tokens=149, prefill_tokens=100,
                      decode_ctx=24500, prefill_ctx=100, prefill_attn=5050, padded_decodes=49, max_ctx=500,
                      graph_replay=0)
    assert model.host_parts(f).tail == pytest.approx(a + b * 50, rel=1e-9)


def test_the_first_step_after_an_idle_wait_gets_its_own_wake_parts(timeline_steps, tmp_path) -> None:
    from twinserve.calibration.host_fit import WAKE_IDLE_S, idle_before

    steps = timeline_steps(1500, 4, wake_every=50, wake_launch=1.2e-3, wake_s=250e-6, wake_sched=90e-6)
    woke = steps.index[steps["num_decodes"] == 0]
    gap = idle_before(steps)
    assert (gap.loc[woke] > WAKE_IDLE_S).all() and gap.drop(woke).isna().all()
    h = fit_host(steps, np.random.default_rng(0), tl=timeline_frame(steps)).fit
    assert h.wake_launch.n == len(woke) and h.wake_launch.coef[0] == pytest.approx(1.2e-3, rel=1e-6)
    assert h.wake.n == len(woke) and h.wake.coef[0] == pytest.approx(250e-6)
    assert h.wake_sched.n == len(woke) and h.wake_sched.coef[0] == pytest.approx(90e-6, rel=1e-6)
    assert h.wake_idle_s == WAKE_IDLE_S
    # the other parts are fitted on the steps without a wait: the launch's base is untouched
    assert _coef(h.launch["decode"], "1") == pytest.approx(300e-6, rel=1e-6)
    # without the column there is no delay; with fewer woken steps than MIN_WAKE_ROWS, no extra
    assert fit_host(steps.drop(columns="wake_s"), np.random.default_rng(0)).fit.wake.coef == [0.0]
    few = timeline_steps(300, 4, wake_every=50, wake_launch=1.2e-3, wake_s=250e-6)
    hf = fit_host(few, np.random.default_rng(0), tl=timeline_frame(few)).fit
    assert hf.wake_launch.coef == [0.0] and hf.wake.coef == [0.0]
    # through a calibration file to the simulator's cost model
    cal = fit_calibration(_with_prefill_rows(steps), Provenance("h200", "llama3-8b", 1))
    path = cal.save(tmp_path / "c.json")
    wake = COST_MODELS.create("calibrated", calibration=str(path)).wake_parts()
    assert (wake.delay, wake.launch, wake.idle_s, wake.sched) == pytest.approx((250e-6, 1.2e-3, WAKE_IDLE_S, 90e-6),
                                                                               rel=1e-6)
    old = Calibration.load(path).to_dict()
    for k in ("wake", "wake_launch", "wake_idle_s", "wake_sched"):
        del old["host"][k]
    parts = COST_MODELS.create("calibrated", calibration=Calibration.from_dict(old)).wake_parts()
    assert parts.launch == 0.0 and parts.sched == 0.0


def test_a_speculating_engines_phase_gets_host_parts_of_its_own(timeline_steps, tmp_path) -> None:
    """The profile's speculative phase (``phase == "spec"``, engine/profile_spec.py) runs a host
    that does more per step: it is neither taken for a slow-host episode nor mixed into the
    plain engine's fits; it gets `HostFit.spec`, which a speculating simulation prices with."""
    from twinserve.calibration.host_fit import SPEC_PHASE

    plain = timeline_steps(1500, 8).assign(phase="replay")
    spec = timeline_steps(800, 9, host_factor=1.4).assign(phase=SPEC_PHASE)
    steps = pd.concat([plain, spec], ignore_index=True)
    res = fit_host(steps, np.random.default_rng(0), tl=timeline_frame(steps))
    h = res.fit
    assert not res.slow.any() and h.slow_share == 0.0
    assert _coef(h.launch["decode"], "1") == pytest.approx(300e-6, rel=1e-3)
    assert h.spec is not None and h.spec.spec is None
    assert _coef(h.spec.launch["decode"], "1") == pytest.approx(1.4 * 300e-6, rel=1e-3)
    assert _coef(h.spec.sched, "1") == pytest.approx(1.4 * 50e-6, rel=1e-3)
    assert _coef(h.spec.loop, "1") == pytest.approx(1.4 * 30e-6, rel=1e-3)
    # without the phase column there is none, and its rows read as a slow-host episode
    mixed = fit_host(steps.drop(columns="phase"), np.random.default_rng(0), tl=timeline_frame(steps)).fit
    assert mixed.spec is None and mixed.slow_share == pytest.approx(800 / 2300, abs=0.03)
    # through a file to the cost model: speculating() prices with the phase's parts
    cal = fit_calibration(_with_prefill_rows(steps), Provenance("h200", "llama3-8b", 1), overlap=True,
                          terms={"decode": ("1", "num_seqs"), "prefill": ("1", "new_tokens")})
    back = Calibration.load(cal.save(tmp_path / "c.json"))
    assert back.host.spec is not None and back.host.spec.to_dict() == cal.host.spec.to_dict()
    model = COST_MODELS.create("calibrated", calibration=str(tmp_path / "c.json"))
    f = BatchFeatures(num_seqs=10, num_decodes=10, num_prefills=0, new_tokens=10, prefill_tokens=0,
                      decode_ctx=1000, prefill_ctx=0, prefill_attn=0, padded_decodes=10, max_ctx=100)
    assert model.speculating().host_parts(f).launch == pytest.approx(1.4 * model.host_parts(f).launch, rel=1e-3)
    assert "spec" not in Calibration.load(fit_calibration(
        _with_prefill_rows(plain), Provenance("h200", "llama3-8b", 1), overlap=True,
        terms={"decode": ("1", "num_seqs"), "prefill": ("1", "new_tokens")}).save(tmp_path / "p.json")).to_dict()["host"]
    plain_model = COST_MODELS.create("calibrated", calibration=str(tmp_path / "p.json"))
    assert plain_model.speculating() is plain_model


def test_a_speculating_phase_on_a_two_speed_host_is_fitted_at_its_mean(timeline_steps) -> None:
    """A host that runs half the speculative phase 1.8x slower (two long stretches): the relative
    fit alone would follow one of the two speeds; the phase's fits are levelled to its mean
    (`host_fit._level`), which is what a run on that host averages, and carry no episodes."""
    from twinserve.calibration.host_fit import SPEC_PHASE, _Targets
    from twinserve.calibration.linear import fit_values, with_derived_features

    plain = timeline_steps(1500, 8).assign(phase="replay")
    spec = timeline_steps(800, 9, host_factor=1.4, slow=(200, 600), slow_factor=1.8).assign(phase=SPEC_PHASE)
    steps = pd.concat([plain, spec], ignore_index=True)
    tl = timeline_frame(steps)
    h = fit_host(steps, np.random.default_rng(0), tl=tl).fit
    assert h.spec is not None and h.spec.slow_share == 0.0 and h.spec.slow_factor == 1.0
    assert _coef(h.launch["decode"], "1") == pytest.approx(300e-6, rel=1e-3)  # the plain fit is untouched
    st = with_derived_features(steps)
    rows = (st["phase"] == SPEC_PHASE).to_numpy()
    y = _Targets(st, st, tl, (False, False))
    for fit, target in ((h.spec.launch["decode"], y.launch), (h.spec.sched, y.sched), (h.spec.complete, y.complete)):
        ok = rows & np.isfinite(target)
        ratio = fit_values(fit, st)[ok].sum() / target[ok].sum()
        assert ratio == pytest.approx(1.0, abs=0.03)
    # between the two speeds, not at either
    base = _coef(h.spec.launch["decode"], "1") / 300e-6
    assert 1.4 * 1.15 < base < 1.4 * 1.8 / 1.15
    # the spread around it holds both speeds; the plain fit has none
    assert h.spread is None and h.spec.spread is not None
    levels, ratio = np.asarray(h.spec.spread.levels), np.asarray(h.spec.spread.ratio)
    assert np.interp(0.25, levels, ratio) < 0.85 and np.interp(0.75, levels, ratio) > 1.15
    assert np.interp(0.75, levels, ratio) / np.interp(0.25, levels, ratio) == pytest.approx(1.8, rel=0.05)


def test_a_speculating_engine_wakes_at_its_own_pace(timeline_steps) -> None:
    """The speculating engine's loop takes longer from an arrival to its start after an idle
    wait (``wake_s``) and to schedule the step after it: `HostFit.spec` has the medians of its
    phase's, the plain fit its own."""
    from twinserve.calibration.host_fit import SPEC_PHASE

    plain = timeline_steps(1500, 8, wake_every=50, wake_s=150e-6, wake_sched=40e-6).assign(phase="replay")
    spec = timeline_steps(800, 9, wake_every=16, wake_s=280e-6, wake_sched=120e-6).assign(phase=SPEC_PHASE)
    steps = pd.concat([plain, spec], ignore_index=True)
    h = fit_host(steps, np.random.default_rng(0), tl=timeline_frame(steps)).fit
    assert _coef(h.spec.wake, "1") == pytest.approx(280e-6, rel=1e-6)
    assert _coef(h.wake, "1") == pytest.approx(150e-6, rel=1e-6)
    assert _coef(h.spec.wake_sched, "1") == pytest.approx(120e-6, rel=0.05)  # its phase's schedule
    assert _coef(h.wake_sched, "1") == pytest.approx(40e-6, rel=0.05)


def test_a_host_as_fast_as_the_device_paces_steps_by_the_slower_of_the_two(run_sim) -> None:
    """Host and device each 1 ms a step: at the fit alone the steps come every 1 ms; with the
    host's spread (half the steps 0.5x, half 1.5x: the same mean) the device waits for the host
    on the slow half, so steps come slower, as on the engine."""
    from twinserve.core.workload import WORKLOADS

    class Even(CostModel):
        spread: tuple[np.ndarray, np.ndarray] | None = None

        def _gpu(self, x, mx):
            return x.num_seqs * 0.0 + 1e-3

        def host_parts(self, f):
            return HostParts(1e-4, 8e-4, 5e-5, 5e-5, graph=True, device=1e-3)

        def host_spread(self):
            return self.spread

    wl = WORKLOADS.create("poisson", num_requests=1, rate=1.0, seed=0, prompt_len=32,
                          output_len=400).with_vocab(1024)
    gap = lambda r: np.diff(np.asarray(r.requests.iloc[0]["token_times"])).mean()  # noqa: E731
    class Spread(Even):
        spread = (np.array([0.0, 0.5, 0.5, 1.0]), np.array([0.5, 0.5, 1.5, 1.5]))

    base = gap(run_sim(wl, cost=Even(), num_pages=64, page_size=16, pipeline=True))
    spread = gap(run_sim(wl, cost=Spread(), num_pages=64, page_size=16, pipeline=True))
    assert base == pytest.approx(1e-3, rel=0.01)
    assert spread > 1.15 * base


def test_rare_host_terms_are_fitted_from_the_rows_that_have_them(timeline_steps) -> None:
    """A prompt chunk's longer loop and a first decode's longer launch show on a few percent of
    the rows, which the trimmed fit would leave out as outliers: `_rare_terms` sets their
    coefficients from those rows' median residual."""
    steps = timeline_steps(1500, 10, prompt_every=40, prompt_loop=300e-6, first_every=40, first_launch=250e-6)
    h = fit_host(steps, np.random.default_rng(0), tl=timeline_frame(steps)).fit
    assert _coef(h.loop, "prompt_rows") == pytest.approx(300e-6, rel=0.02)
    assert _coef(h.loop, "1") == pytest.approx(30e-6, rel=0.02)
    assert _coef(h.launch["decode"], "first_decodes") == pytest.approx(250e-6, rel=0.02)
    assert _coef(h.launch["decode"], "1") == pytest.approx(300e-6, rel=0.02)
    # fitted as one more term, they are trimmed away
    from twinserve.calibration.host_fit import RARE_TERMS
    import twinserve.calibration.host_fit as hf
    try:
        hf.RARE_TERMS = ()
        blind = fit_host(steps, np.random.default_rng(0), tl=timeline_frame(steps)).fit
    finally:
        hf.RARE_TERMS = RARE_TERMS
    assert _coef(blind.loop, "prompt_rows") < 150e-6


def test_a_woken_graph_step_runs_more_of_its_launch_after_the_replay(timeline_steps, tmp_path) -> None:
    steps = timeline_steps(1500, 11, post=100e-6, wake_every=50, wake_launch=1.2e-3, wake_post=400e-6)
    h = fit_host(steps, np.random.default_rng(0), tl=timeline_frame(steps)).fit
    assert _coef(h.post, "1") == pytest.approx(100e-6, rel=1e-3)
    assert h.wake_post.coef[0] == pytest.approx(400e-6, rel=1e-3)
    cal = fit_calibration(_with_prefill_rows(steps), Provenance("h200", "llama3-8b", 1))
    wake = COST_MODELS.create("calibrated", calibration=str(cal.save(tmp_path / "c.json"))).wake_parts()
    assert wake.post == pytest.approx(400e-6, rel=1e-3) and wake.launch == pytest.approx(1.2e-3, rel=1e-3)


def test_the_device_fits_leave_the_speculative_phase_out(timeline_steps) -> None:
    """The speculative phase profiles a second engine's host; its device spans (here 0.5 ms
    longer, as a GPU clocked down for it would give) do not move the device fits."""
    from twinserve.calibration.host_fit import SPEC_PHASE

    plain = timeline_steps(1500, 12, post=100e-6).assign(phase="replay")
    spec = timeline_steps(800, 13, post=100e-6).assign(phase=SPEC_PHASE)
    spec["dev_end"] += 5e-4
    steps = _with_prefill_rows(pd.concat([plain, spec], ignore_index=True))
    terms = {"decode": ("1", "num_seqs"), "prefill": ("1", "new_tokens")}
    cal = fit_calibration(steps, Provenance("h200", "llama3-8b", 1), overlap=True, terms=terms,
                          bucket_offsets=False)
    d = cal.regimes["decode"]
    assert _coef(d, "1") == pytest.approx(1e-3, rel=1e-3) and _coef(d, "num_seqs") == pytest.approx(2e-5, rel=1e-3)
    mixed = fit_calibration(steps.drop(columns="phase"), Provenance("h200", "llama3-8b", 1), overlap=True,
                            terms=terms, bucket_offsets=False)
    assert _coef(mixed.regimes["decode"], "1") > 1.05e-3
