"""Cost models: presets, roofline terms, scalar == vector evaluation, calibrated regimes."""

from __future__ import annotations

import numpy as np
import pytest

from twinserve.core.batch import BatchFeatures
from twinserve.core.model_shapes import get_shape
from twinserve.simulator.cost import COST_MODELS, FeatureColumns
from twinserve.simulator.cost.calibration import Calibration, CpuFit, LinearFit, Provenance
from twinserve.simulator.hardware import HARDWARE, get_hardware


def decode(b: int, ctx: int) -> BatchFeatures:
    return BatchFeatures(num_seqs=b, num_decodes=b, new_tokens=b, decode_ctx=b * ctx,
                         padded_decodes=b, max_ctx=ctx)


def prefill(n: int, start: int = 0) -> BatchFeatures:
    return BatchFeatures(num_seqs=1, num_prefills=1, new_tokens=n, prefill_tokens=n,
                         prefill_ctx=start + n, prefill_attn=n * start + n * (n + 1) // 2,
                         max_ctx=start + n)


def random_features(rng: np.random.Generator, n: int) -> list[BatchFeatures]:
    out = []
    for _ in range(n):
        nd, npf = int(rng.integers(0, 64)), int(rng.integers(0, 3))
        nd = nd if nd or npf else 1
        pt = int(rng.integers(1, 4000)) * (npf > 0)
        start = int(rng.integers(0, 3000))
        dctx = int(rng.integers(nd, 4000 * nd + 1)) if nd else 0
        out.append(BatchFeatures(num_seqs=nd + npf, num_decodes=nd, num_prefills=npf,
                                 new_tokens=nd + pt, prefill_tokens=pt, decode_ctx=dctx,
                                 prefill_ctx=(start + pt) * (npf > 0),
                                 prefill_attn=(pt * start + pt * (pt + 1) // 2) * (npf > 0),
                                 padded_decodes=nd + (-nd) % 8, max_ctx=4000))
    return out


def test_presets() -> None:
    assert {"h200", "h100", "cpu"} <= set(HARDWARE.names())
    h = get_hardware("h200")
    assert h.flops == pytest.approx(790e12) and h.hbm_bw == pytest.approx(4.3e12)
    assert h.memory == pytest.approx(141e9) and h.link_bw == pytest.approx(450e9)
    assert get_hardware("h200", hbm_bw=1e12).hbm_bw == 1e12
    with pytest.raises(KeyError):
        get_hardware("tpu")


def test_roofline_decode_is_weight_bound_and_prefill_compute_bound() -> None:
    shape, hw = get_shape("llama3-8b"), get_hardware("h200")
    m = COST_MODELS.create("roofline", shape=shape, hardware=hw, step_overhead_s=0.0)
    weights = 2 * (shape.param_count() - shape.vocab_size * shape.hidden_size)  # no embedding read
    t1 = m.step_time(decode(1, 100))
    assert t1 == pytest.approx(weights / (hw.hbm_bw * 0.9), rel=0.05)
    # more context -> more KV bytes; more sequences at short context cost almost nothing extra
    assert m.step_time(decode(1, 8000)) > t1
    assert m.step_time(decode(8, 100)) < 1.1 * t1
    # a long prefill is compute bound: 2 * linear params * tokens at gemm_eff, plus attention
    # (4 * layers * q_size per causal pair) at attn_eff
    f = prefill(8192)
    lin = 2 * shape.num_layers * (shape.layer_params() - 2 * shape.hidden_size) * 8192 \
        + 2 * shape.vocab_size * shape.hidden_size
    attn = 4 * shape.num_layers * shape.q_size * f.prefill_attn
    t = m.step_time(f)
    assert t == pytest.approx(lin / (hw.flops * 0.85) + attn / (hw.flops * 0.6), rel=0.01)
    assert m.step_time(prefill(4096)) < t < 2.5 * m.step_time(prefill(4096))


def test_roofline_tensor_parallel_splits_work_and_adds_communication() -> None:
    shape, hw = get_shape("llama3-70b"), get_hardware("h100")
    t1 = COST_MODELS.create("roofline", shape=shape, hardware=hw, tp=1).step_time(prefill(4096))
    m4 = COST_MODELS.create("roofline", shape=shape, hardware=hw, tp=4)
    t4 = m4.step_time(prefill(4096))
    assert t1 / 4 < t4 < t1 / 2
    slow_link = COST_MODELS.create("roofline", shape=shape, hardware=hw.with_overrides(link_bw=1e9), tp=4)
    assert slow_link.step_time(prefill(4096)) > 2 * t4


@pytest.mark.parametrize("name", ["roofline", "calibrated", "constant"])
def test_scalar_and_vector_paths_agree_bit_for_bit(name: str, tiny_calibration: Calibration) -> None:
    kw = {"roofline": dict(shape=get_shape("qwen3-8b"), hardware=get_hardware("h100"), tp=2),
          "calibrated": dict(calibration=tiny_calibration), "constant": dict(step_s=0.02, cpu_s=0.001)}[name]
    m = COST_MODELS.create(name, **kw)
    feats = random_features(np.random.default_rng(1), 300)
    vec, cpu = m.step_times(feats), m.cpu_times(feats)
    assert vec.shape == (300,) and np.all(vec > 0)
    for f, v, c in zip(feats, vec, cpu):
        assert m.step_time(f) == v and m.cpu_time(f) == c


def test_feature_columns_arithmetic_matches_explicit_features() -> None:
    feats = [decode(5, 100 + j) for j in range(40)]
    cols = FeatureColumns.arithmetic(feats[0], feats[1], 3, 30)
    ref = FeatureColumns(feats[3:33])
    for n in BatchFeatures.names():
        assert np.array_equal(np.broadcast_to(cols.column(n), (30,)), ref.column(n)), n


def test_overlap_hides_cpu_time() -> None:
    on = COST_MODELS.create("constant", step_s=0.01, cpu_s=0.004, overlap=True)
    off = COST_MODELS.create("constant", step_s=0.01, cpu_s=0.004, overlap=False)
    f = decode(4, 10)
    assert on.wall_time(on.step_time(f), on.cpu_time(f)) == 0.01
    assert off.wall_time(off.step_time(f), off.cpu_time(f)) == pytest.approx(0.014)
    slow_cpu = COST_MODELS.create("constant", step_s=0.01, cpu_s=0.03, overlap=True)
    assert slow_cpu.wall_time(0.01, 0.03) == 0.03


@pytest.fixture
def tiny_calibration() -> Calibration:
    return Calibration(
        provenance=Provenance(gpu="h200", model="tiny-llama", tp=1, engine_version="test"),
        regimes={"decode": LinearFit(["1", "num_seqs", "decode_ctx"], [1e-3, 2e-5, 1e-8]),
                 "prefill": LinearFit(["1", "new_tokens", "prefill_attn"], [2e-3, 1e-5, 1e-10]),
                 "mixed": LinearFit(["1", "new_tokens", "decode_ctx", "num_decodes*max_ctx"],
                                    [3e-3, 1e-5, 1e-8, 1e-12])},
        cpu=CpuFit(["1", "num_seqs"], [1e-4, 1e-6], overlap=False),
    )


def test_calibrated_picks_the_regime(tiny_calibration: Calibration) -> None:
    m = COST_MODELS.create("calibrated", calibration=tiny_calibration)
    assert m.overlap is False
    assert m.step_time(decode(4, 100)) == pytest.approx(1e-3 + 4 * 2e-5 + 400 * 1e-8)
    p = prefill(100)
    assert m.step_time(p) == pytest.approx(2e-3 + 100 * 1e-5 + p.prefill_attn * 1e-10)
    mixed = BatchFeatures(num_seqs=3, num_decodes=2, num_prefills=1, new_tokens=102,
                          prefill_tokens=100, decode_ctx=50, prefill_ctx=100, prefill_attn=5050,
                          padded_decodes=2, max_ctx=100)
    assert m.step_time(mixed) == pytest.approx(3e-3 + 102e-5 + 50e-8 + 2 * 100 * 1e-12)
    assert m.cpu_time(mixed) == pytest.approx(1e-4 + 3e-6)


def test_calibrated_without_mixed_falls_back_to_prefill(tiny_calibration: Calibration) -> None:
    del tiny_calibration.regimes["mixed"]
    m = COST_MODELS.create("calibrated", calibration=tiny_calibration)
    mixed = BatchFeatures(num_seqs=2, num_decodes=1, num_prefills=1, new_tokens=11,
                          prefill_tokens=10, decode_ctx=20, prefill_ctx=10, prefill_attn=55,
                          padded_decodes=1, max_ctx=20)
    assert m.step_time(mixed) == pytest.approx(2e-3 + 11e-5 + 55e-10)


@pytest.mark.parametrize("model", ["qwen3-0.6b", "llama3-8b"])
def test_committed_calibrations_agree_bit_for_bit_on_mixed_columns_and_stretches(model: str) -> None:
    """The H200 files (host parts, decode offsets, llama3-8b's dense curve): one step, columns of
    every regime, and a fast-forward stretch (one regime: evaluated alone) give the same times."""
    from pathlib import Path

    import twinserve

    path = Path(twinserve.__file__).parent / "experiments" / "calibrations" / f"h200_{model}_tp1.json"
    m = COST_MODELS.create("calibrated", calibration=str(path))
    feats = random_features(np.random.default_rng(2), 300)
    vec, cpu = m.step_times(feats), m.cpu_times(feats)
    assert all(m.step_time(f) == v and m.cpu_time(f) == c for f, v, c in zip(feats, vec, cpu))
    steps = [decode(48, 600 + j) for j in range(40)]
    cols = FeatureColumns.arithmetic(steps[0], steps[1], 0, 40)
    assert isinstance(cols.num_prefills, float)  # the one-regime path
    assert list(m.step_times(cols)) == [m.step_time(f) for f in steps]
    assert list(m.cpu_times(cols)) == [m.cpu_time(f) for f in steps]
