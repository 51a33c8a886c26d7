"""The side-by-side benchmark's parts that run without a GPU: its requests, kernel families,
tables, and one twinserve worker run on the CPU."""

from __future__ import annotations

import json
import random

import pytest

from twinserve.bench.kernel_families import KernelTime, Profile, busy_time, family_of, family_table
from twinserve.bench.recipe import recipe
from twinserve.bench.sbs import throughput_table


def test_seed_zero_is_mini_sglangs_own_draw():
    random.seed(0)  # mini-sglang's benchmark draws with the global generator in this order
    prompts = [[random.randint(0, 10000) for _ in range(random.randint(100, 1024))] for _ in range(256)]
    outs = [random.randint(100, 1024) for _ in range(256)]
    r = recipe(0)
    assert r.prompts == prompts and r.output_lens == outs
    assert recipe(1).prompts[0] != prompts[0]  # another run's seed shares no prompt


@pytest.mark.parametrize("name, family", [
    ("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN", "gemm"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float>", "gemm"),
    ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<", "attention (prefill kernel)"),
    ("void flashinfer::PersistentVariableLengthMergeStatesKernel<8u, 16u>", "attention (prefill kernel)"),
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<", "attention (decode kernel)"),
    ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>", "norm"),
    ("void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<", "rope"),
    ("void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, &(silu(float const&))>", "activation"),
    ("void flashinfer::sampling::TopKTopPSamplingFromProbKernel<", "sampling"),
    ("Memcpy HtoD (Pinned -> Device)", "copies"),
    ("void at::native::index_elementwise_kernel<128, 4>", "copies"),
    ("some_unknown_kernel", "other"),
])
def test_kernel_families(name, family):
    assert family_of(name) == family


def test_busy_time_is_the_union_of_intervals():
    assert busy_time([(0, 2), (1, 3), (5, 6)]) == pytest.approx(4.0)
    assert busy_time([(5, 6), (0, 10)]) == pytest.approx(10.0)
    assert busy_time([]) == 0.0


def test_gaps_are_bucketed_by_length():
    from twinserve.bench.kernel_families import gap_buckets

    us = 1e-6
    spans = [(0, 10 * us), (12 * us, 20 * us), (15 * us, 30 * us), (40 * us, 50 * us), (150 * us, 160 * us)]
    g = gap_buckets(spans)  # gaps of 2, 10 and 100 us; the overlapping pair leaves none
    assert g["under 5 us"] == [pytest.approx(2 * us), 1]
    assert g["5-50 us"] == [pytest.approx(10 * us), 1]
    assert g["over 50 us"] == [pytest.approx(100 * us), 1]
    assert sum(s for s, _ in g.values()) == pytest.approx(160 * us - busy_time(spans))
    p = Profile("x", [KernelTime("nvjet_a", 1, 1.0)], span_s=2.0, busy_s=1.0, gaps={"under 5 us": [0.25, 3]})
    q = Profile.from_dict(json.loads(json.dumps(p.to_dict())))
    assert q == p
    table = family_table([q, Profile("y", [], 1.0, 1.0)])
    assert "| gaps under 5 us (count) | 0.250 (3) |  |" in table


def test_family_table_sums_and_idle():
    p = Profile("x", [KernelTime("nvjet_a", 2, 1.5), KernelTime("nvjet_b", 1, 0.5), KernelTime("RMSNorm", 4, 0.25)],
                span_s=3.0, busy_s=2.25)
    q = Profile.from_dict(json.loads(json.dumps(p.to_dict())))
    assert q == p and q.by_family()["gemm"] == pytest.approx(2.0) and q.idle_s == pytest.approx(0.75)
    table = family_table([p, q])
    assert "| gemm | 2.000 | 2.000 |" in table and "| idle gaps between kernels | 0.750 | 0.750 |" in table


def test_throughput_table_medians_and_ratio():
    runs = [{"engine": "mini-sglang", "tok_s": v} for v in (100.0, 120.0, 110.0)]
    runs += [{"engine": "twinserve", "tok_s": v} for v in (150.0, 130.0)]
    t = throughput_table(runs, ["mini-sglang", "twinserve"])
    assert "| mini-sglang | 100 / 120 / 110 | 110 | 1.00x |" in t
    assert "| twinserve | 150 / 130 | 140 | 1.27x |" in t


def test_twinserve_worker_runs_on_cpu(tmp_path, capsys):
    pytest.importorskip("torch")
    from twinserve.bench import sbs_worker
    from twinserve.engine.model_maker import make_model

    mdir = make_model("tiny-llama", tmp_path / "m", weights=False)
    sbs_worker.main(["tw", str(mdir), "--seeds", "3", "--num-requests", "3", "--warmup-requests", "1",
                     "--lens", "4", "8", "--set", "device=cpu", "scheduler.mixed=false"])
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    run = [r for r in rows if r["event"] == "run"][0]
    assert run["generated_tokens"] == run["requested_tokens"] == recipe(3, n=3, lo=4, hi=8, vocab=1023).output_tokens
    assert run["prefill_steps"] >= 1 and run["preemptions"] == 0


def test_a_variant_splits_engine_overrides_from_environment_variables():
    from twinserve.bench.sbs import parse_variant

    spec = parse_variant("nopdl:kernels=flashinfer,env.TWINSERVE_TRITON_PDL=0,scheduler.max_running=8")
    assert spec.label == "nopdl" and spec.kind == "tw"
    assert spec.sets == ["kernels=flashinfer", "scheduler.max_running=8"]
    assert spec.env == {"TWINSERVE_TRITON_PDL": "0"}
