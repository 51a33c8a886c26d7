"""Simulator-vs-engine comparison of one workload: metric table with signed errors + step diff.

    python -m twinserve.experiments.compare --out outputs/cmp model=qwen3-0.6b hardware=h200 \
        workload=azure_conv workload.duration_s=30 workload.rate=8
    python -m twinserve.experiments.compare --runs ENGINE_RUN_DIR SIM_RUN_DIR --out DIR
        # e.g. the two folders of `twinserve-run -m experiment=compare`

The first form composes the `twinserve-run` config (same overrides), runs ``backend=engine``
into ``OUT/engine`` and then ``backend=sim`` into ``OUT/sim`` with the engine's KV pool size
(``kv.num_pages``), so that both schedule against the same memory. Backend-specific keys are
given as ``engine.K=V`` or ``sim.K=V`` (e.g. ``engine.device=cpu``). Writes into ``OUT``:
``compare.csv`` / ``compare.md`` (metric, engine, sim, signed error % = 100 (sim - engine) /
engine) and ``step_diff.json`` (the first step index whose batch features differ, if any).
"""

from __future__ import annotations

import argparse
import json
import math
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from twinserve.core.batch import BatchFeatures
from twinserve.core.errors import UserError

# (key in the metrics dict, label)
METRICS: tuple[tuple[str, str], ...] = (
    ("mean_ttft_ms", "TTFT mean (ms)"), ("median_ttft_ms", "TTFT p50 (ms)"), ("p99_ttft_ms", "TTFT p99 (ms)"),
    ("mean_tpot_ms", "TPOT mean (ms)"), ("median_tpot_ms", "TPOT p50 (ms)"), ("p99_tpot_ms", "TPOT p99 (ms)"),
    ("mean_itl_ms", "ITL mean (ms)"), ("median_itl_ms", "ITL p50 (ms)"), ("p99_itl_ms", "ITL p99 (ms)"),
    ("mean_e2el_ms", "E2E mean (ms)"), ("median_e2el_ms", "E2E p50 (ms)"), ("p99_e2el_ms", "E2E p99 (ms)"),
    ("request_throughput", "request throughput (req/s)"),
    ("output_throughput", "output throughput (tok/s)"),
    ("total_token_throughput", "total token throughput (tok/s)"),
    ("kv_usage_mean", "KV usage mean (fraction of pages)"), ("kv_usage_max", "KV usage max"),
    ("total_preemptions", "preemptions"), ("cache_hit_rate", "prefix cache hit rate"),
    ("num_steps", "steps"), ("duration", "duration (s)"),
)
FEATURES: tuple[str, ...] = tuple(BatchFeatures.names())


def run_metrics(summary: dict[str, Any], steps: pd.DataFrame) -> dict[str, float]:
    """The summary's vLLM keys plus KV usage (per-step used / total pages: step-duration
    weighted mean, and max), the prefix-cache hit rate (cached / prompt tokens) and step count."""
    m = {k: summary.get(k) for k, _ in METRICS}
    if len(steps):
        total = (steps["free_pages"] + steps["used_pages"] + steps["cached_pages"]).to_numpy(np.float64)
        use = steps["used_pages"].to_numpy(np.float64) / np.maximum(total, 1)
        w = steps["duration"].to_numpy(np.float64)
        m["kv_usage_mean"] = float(np.average(use, weights=w) if w.sum() > 0 else use.mean())
        m["kv_usage_max"] = float(use.max())
    m["num_steps"] = int(len(steps))
    tin = summary.get("total_input_tokens") or 0
    m["cache_hit_rate"] = (summary.get("total_cached_tokens") or 0) / tin if tin else float("nan")
    return {k: (float(v) if v is not None else float("nan")) for k, v in m.items()}


def signed_error(sim: float, real: float) -> float:
    if not (math.isfinite(sim) and math.isfinite(real)) or real == 0:
        return 0.0 if sim == real else float("nan")
    return 100.0 * (sim - real) / real


def compare_table(engine: dict[str, float], sim: dict[str, float]) -> pd.DataFrame:
    rows = [{"metric": label, "key": k, "engine": engine.get(k, float("nan")), "sim": sim.get(k, float("nan")),
             "err_pct": signed_error(sim.get(k, float("nan")), engine.get(k, float("nan")))}
            for k, label in METRICS]
    return pd.DataFrame(rows)


@dataclass(slots=True)
class StepDiff:
    """Where two step logs part ways: ``first_diff`` is the first step index (in start order)
    whose batch features differ (None when every common step matches); ``matching`` counts
    equal steps among the ``common`` first ones; the two rows' features at the first
    difference are in ``engine_row`` / ``sim_row``."""

    engine_steps: int
    sim_steps: int
    common: int
    matching: int
    first_diff: int | None
    differing_features: list[str] = field(default_factory=list)
    engine_row: dict[str, Any] = field(default_factory=dict)
    sim_row: dict[str, Any] = field(default_factory=dict)
    engine_start_s: float | None = None
    sim_start_s: float | None = None


def step_diff(engine: pd.DataFrame, sim: pd.DataFrame) -> StepDiff:
    e = engine.sort_values("start", kind="stable").reset_index(drop=True) if len(engine) else engine
    s = sim.sort_values("start", kind="stable").reset_index(drop=True) if len(sim) else sim
    n = min(len(e), len(s))
    cols = [c for c in FEATURES if c in e and c in s]
    if n == 0 or not cols:
        first = None if len(e) == len(s) else 0
        return StepDiff(len(e), len(s), n, 0, first)
    a = e.loc[: n - 1, cols].to_numpy(np.int64)
    b = s.loc[: n - 1, cols].to_numpy(np.int64)
    eq = (a == b).all(axis=1)
    bad = np.flatnonzero(~eq)
    first = int(bad[0]) if bad.size else (None if len(e) == len(s) else n)
    d = StepDiff(len(e), len(s), n, int(eq.sum()), first)
    if first is not None and first < n:
        d.differing_features = [c for j, c in enumerate(cols) if a[first, j] != b[first, j]]
        d.engine_row = {c: int(a[first, j]) for j, c in enumerate(cols)}
        d.sim_row = {c: int(b[first, j]) for j, c in enumerate(cols)}
        d.engine_start_s = float(e.loc[first, "start"])
        d.sim_start_s = float(s.loc[first, "start"])
    return d


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return "n/a"
    return f"{x:,.4g}" if abs(x) < 1000 else f"{x:,.0f}"


def markdown(table: pd.DataFrame, diff: StepDiff, title: str, facts: dict[str, Any],
             labels: tuple[str, str] = ("engine", "sim")) -> str:
    """The comparison as Markdown; ``labels`` name the reference run and the compared one (the
    table's ``engine`` and ``sim`` columns)."""
    a, b = labels
    lines = [f"# {title}", ""]
    lines += [f"- {k}: {v}" for k, v in facts.items()]
    lines += ["", f"| metric | {a} | {b} | error |", "|---|---:|---:|---:|"]
    for r in table.itertuples():
        err = "n/a" if not math.isfinite(r.err_pct) else f"{r.err_pct:+.1f}%"
        lines.append(f"| {r.metric} | {_fmt(r.engine)} | {_fmt(r.sim)} | {err} |")
    lines += ["", "## Step-log diff", ""]
    lines.append(f"{a} {diff.engine_steps} steps, {b} {diff.sim_steps}; of the first {diff.common}, "
                 f"{diff.matching} have identical batch features.")
    if diff.first_diff is None:
        lines.append("No step differs.")
    else:
        lines.append(f"First differing step: index {diff.first_diff} ({a} start "
                     f"{diff.engine_start_s}, {b} start {diff.sim_start_s}); features that differ: "
                     f"{', '.join(diff.differing_features) or 'one log ends'}.")
        if diff.engine_row:
            lines += ["", f"| feature | {a} | {b} |", "|---|---:|---:|"]
            lines += [f"| {c} | {diff.engine_row[c]} | {diff.sim_row[c]} |" for c in diff.differing_features]
    return "\n".join(lines) + "\n"


class RequestMismatchWarning(UserWarning):
    """The two runs of a comparison did not serve the same requests."""


def differing_prompts(a: pd.DataFrame, b: pd.DataFrame) -> tuple[int, int]:
    """(requests whose prompt length differs, requests in both) of two request tables, by
    ``rid``: a count above 0 says the runs were not given the same workload (a real-text
    workload built from another interpreter's sources or another tokenizer, another seed)."""
    m = a[["rid", "prompt_tokens"]].merge(b[["rid", "prompt_tokens"]], on="rid")
    return int((m["prompt_tokens_x"] != m["prompt_tokens_y"]).sum()), len(m)


def write_report(engine_dir: Path, sim_dir: Path, out: Path, title: str | None = None) -> tuple[pd.DataFrame, StepDiff]:
    """Read two run folders, write compare.csv, compare.md and step_diff.json into ``out``. The
    second is usually a simulator run; two runs of one backend (an engine run and its repeat)
    are labelled by backend in compare.md, "(repeat)" on the second."""
    from twinserve.experiments.run import load_run

    e_reqs, e_steps, e_sum = load_run(engine_dir)
    s_reqs, s_steps, s_sum = load_run(sim_dir)
    differ, both = differing_prompts(e_reqs, s_reqs)
    if differ:
        warnings.warn(f"{differ} of {both} requests have other prompt lengths in {sim_dir} than in {engine_dir}: "
                      "the runs did not serve the same workload (code_edit built elsewhere: pass "
                      "workload.stdlib_dir= with that host's sources)", RequestMismatchWarning, stacklevel=2)
    table = compare_table(run_metrics(e_sum, e_steps), run_metrics(s_sum, s_steps))
    diff = step_diff(e_steps, s_steps)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "compare.csv", index=False)
    (out / "step_diff.json").write_text(json.dumps(asdict(diff), indent=2) + "\n")
    run = e_sum.get("run", {})
    srun = s_sum.get("run", {})
    cm = srun.get("cost_model") or {}
    a, b = str(run.get("backend") or "engine"), str(srun.get("backend") or "sim")
    labels = (a, f"{b} (repeat)") if a == b else (a, b)
    facts: dict[str, Any] = {"model": run.get("model"), "hardware": run.get("hardware"),
                             "workload": (run.get("workload") or {}).get("label"), "requests": e_sum.get("completed"),
                             "policies": f"{run.get('scheduler')}/{run.get('memory')}/{run.get('cache')}"}
    if b == "sim":
        facts["sim cost model"] = f"{cm.get('name')} ({srun.get('cost_model_source')})"
        facts["sim loop"] = f"{srun.get('loop')}" + (", slow-host episodes drawn" if srun.get("host_episodes") else "")
    facts.update({f"{labels[0]} run": str(engine_dir), f"{labels[1]} run": str(sim_dir)})
    if differ:
        facts["requests with other prompt lengths"] = f"{differ} of {both}: not the same workload"
    title = title or f"Simulator vs engine: {run.get('model')} on {run.get('hardware')}"
    (out / "compare.md").write_text(markdown(table, diff, title, facts, labels))
    return table, diff


def compose_config(overrides: Sequence[str]) -> Any:
    from twinserve.core.conf_compose import compose

    _launcher_stub()
    return compose(overrides)


def _launcher_stub(force: bool = False) -> None:
    """config.yaml selects the joblib launcher; composing one run launches nothing, so where the
    plugin is not installed (some GPU hosts) a plain config node stands in for its config."""
    try:
        if force:
            raise ImportError
        import hydra_plugins.hydra_joblib_launcher  # noqa: F401
    except ImportError:
        from hydra.core.config_store import ConfigStore

        ConfigStore.instance().store(group="hydra/launcher", name="joblib",
                                     node={"_target_": "none (joblib launcher not installed)", "n_jobs": 1})


def for_backend(overrides: Sequence[str], name: str) -> list[str]:
    """The overrides of one side: ``engine.K=V`` / ``sim.K=V`` become ``backend.K=V`` on their
    side only (each backend has its own keys); everything else goes to both."""
    out = []
    for o in overrides:
        head, _, rest = o.lstrip("+~").partition(".")
        if head in ("engine", "sim"):
            if head == name:
                out.append(o[: len(o) - len(o.lstrip("+~"))] + "backend." + rest)
            continue
        out.append(o)
    return out


def engine_overlapped(summary: dict[str, Any]) -> bool:
    """Whether the engine run used overlap scheduling (its default: on for CUDA, off on CPU;
    with speculation ``spec_overlap``, for the steps that could not speculate); the simulator
    then replays the same pipelined loop (``backend.pipeline``)."""
    run = summary.get("run", {})
    ecfg = run.get("engine_config", {})
    ov = ecfg.get("spec_overlap", ecfg.get("overlap"))
    if ov is not None:
        return bool(ov)
    return str(run.get("hardware", "")) != "cpu"


def sim_matching_engine(steps: pd.DataFrame, summary: dict[str, Any]) -> list[str]:
    """Simulator overrides that match an engine run: its KV pool size (``kv.num_pages``, when it
    ran a step), its loop (``backend.pipeline`` when it overlapped) and its token graphs
    (``scheduler.piecewise_max_tokens``, ``scheduler.token_graph_mode``,
    ``scheduler.hybrid_decode_heavy`` and ``scheduler.token_graph_rows`` from the engine config
    it recorded; an engine that
    recorded a cap but no mode had piecewise graphs only, one without the decode-heavy flag
    sent decode-heavy steps of over 32 sequences to the pieces), and ``backend.share_gpu=true``
    when its replicas shared one GPU (``replicas_share_gpu``)."""
    out = []
    if len(steps):
        pages = int((steps["free_pages"] + steps["used_pages"] + steps["cached_pages"]).iloc[0])
        out.append(f"kv.num_pages={pages}")
    out.append(f"backend.pipeline={str(engine_overlapped(summary)).lower()}")
    ecfg = (summary.get("run") or {}).get("engine_config") or {}
    if (summary.get("run") or {}).get("replicas_share_gpu"):
        out.append("backend.share_gpu=true")
    if "piecewise_max_tokens" in ecfg:
        out.append(f"scheduler.piecewise_max_tokens={int(ecfg['piecewise_max_tokens'])}")
        out.append(f"scheduler.token_graph_mode={ecfg.get('token_graph_mode', 'piecewise')}")
        out.append(f"scheduler.hybrid_decode_heavy={str(bool(ecfg.get('hybrid_decode_heavy', False))).lower()}")
        out.append(f"scheduler.token_graph_rows={int(ecfg.get('token_graph_rows', 0))}")
    return out


def run_compare(overrides: Sequence[str], out: str | Path, title: str | None = None,
                engine_run: str | Path | None = None) -> tuple[pd.DataFrame, StepDiff]:
    """Run the engine, then the simulator on the engine's pool size (and, with speculation and
    no acceptance given, the engine's measured acceptance: ``spec.acceptance_file``), then
    `write_report`. ``engine_run``: an engine run folder made earlier with the same overrides
    (on a GPU host, say), compared instead of running the engine."""
    from twinserve.experiments.run import load_run, run_experiment

    out = Path(out)
    clean = [o for o in overrides if not o.startswith(("backend=", "kv.num_pages="))]
    if engine_run is None:
        engine_dir = out / "engine"
        run_experiment(compose_config([*for_backend(clean, "engine"), "backend=engine"]), engine_dir)
    else:
        engine_dir = Path(engine_run)
        if not (engine_dir / "summary.json").is_file():
            raise UserError(f"--engine-run {engine_dir}: no summary.json there (an engine run folder)")
    _, steps, summary = load_run(engine_dir)
    user_loop = any(o.startswith(("sim.pipeline=", "backend.pipeline=")) for o in clean)
    extra = [o for o in sim_matching_engine(steps, summary) if not (user_loop and o.startswith("backend.pipeline="))]
    if "spec" in summary and not any(o.startswith(("spec.acceptance=", "spec.acceptance_file=")) for o in clean):
        # the simulator's acceptance model: what the engine measured on this workload
        extra.append(f"spec.acceptance_file={engine_dir / 'summary.json'}")
    run_experiment(compose_config([*for_backend(clean, "sim"), "backend=sim", *extra]), out / "sim")
    return write_report(engine_dir, out / "sim", out, title)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Compare the simulator with the engine on one workload.")
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", nargs=2, metavar=("ENGINE_DIR", "SIM_DIR"), default=None,
                    help="compare two existing run folders instead of running")
    ap.add_argument("--engine-run", default=None, metavar="DIR",
                    help="an engine run folder made with the same overrides: rerun only the simulator against it")
    ap.add_argument("--title", default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads for the engine")
    ap.add_argument("overrides", nargs="*", help="twinserve-run overrides (group=option key=value)")
    args = ap.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.runs:
        table, diff = write_report(Path(args.runs[0]), Path(args.runs[1]), Path(args.out), args.title)
    else:
        table, diff = run_compare(args.overrides, args.out, args.title, args.engine_run)
    print((Path(args.out) / "compare.md").read_text())


def cli() -> None:
    """``python -m twinserve.experiments.compare``: `main` with user errors as one line, exit 2."""
    import sys

    from twinserve.core.cli_errors import report_user_errors, take_debug_flag

    argv = sys.argv[1:]
    debug = take_debug_flag(argv)
    report_user_errors("compare", debug, lambda: main(argv))


if __name__ == "__main__":
    cli()
