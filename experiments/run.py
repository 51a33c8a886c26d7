"""`run_experiment`: one resolved config -> requests.parquet, steps.parquet, summary.json."""

from __future__ import annotations

import json
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from twinserve.core.metrics import format_summary, summarize
from twinserve.core.run_config import from_cfg
from twinserve.experiments.backends import BACKENDS, BackendResult, RunContext
from twinserve.experiments.build import (CalibrationMismatchWarning, build_workload, hardware_spec, plain,
                                         resolve_model, scheduler_config)
from twinserve.core.config_checks import check_kv_fits, check_tp, no_request_ran
from twinserve.experiments.checks import check_config
from twinserve.experiments.prefix_report import filter_lines, filters_record, prefix_cache_record

REQUESTS_FILE = "requests.parquet"
STEPS_FILE = "steps.parquet"
SUMMARY_FILE = "summary.json"


def _json_safe(x: Any) -> Any:
    """NaN and inf become null (strict JSON); numpy scalars become Python numbers."""
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _progress(setting: Any) -> bool:
    return sys.stderr.isatty() if setting is None else bool(setting)


def run_metadata(cfg: Mapping[str, Any], ctx: RunContext, workload: Any) -> dict[str, Any]:
    """The facts of a run that identify it (identical for identical configs)."""
    rc = from_cfg(cfg)
    return {
        "backend": cfg["backend"]["name"], "model": ctx.shape.name, "hardware": ctx.hardware.name,
        "tp": rc.tp, "replicas": rc.replicas, "router": rc.router,
        "scheduler": rc.policies.scheduling, "memory": rc.policies.memory,
        "cache": rc.policies.cache, "seed": rc.seed,
        "workload": {"name": cfg["workload"]["name"], "label": workload.name, **workload.stats()},
    }


def requests_table(df: pd.DataFrame) -> pa.Table:
    """The requests frame as an Arrow table; ``token_times`` (one float64 array per row) becomes
    a list<double> column built from one flat buffer (no per-token Python objects)."""
    if "token_times" not in df:
        return pa.Table.from_pandas(df, preserve_index=False)
    times = [np.asarray(t, dtype=np.float64) if t is not None else np.empty(0) for t in df["token_times"]]
    offsets = np.zeros(len(times) + 1, dtype=np.int64)
    np.cumsum([t.size for t in times], out=offsets[1:])
    flat = np.concatenate(times) if times else np.empty(0)
    table = pa.Table.from_pandas(df.drop(columns="token_times"), preserve_index=False)
    if offsets[-1] < 2**31:
        col = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(flat))
    else:
        col = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(flat))
    return table.add_column(list(df.columns).index("token_times"), "token_times", col)


def write_outputs(out_dir: Path, result: BackendResult, summary: dict[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    pq.write_table(requests_table(result.requests), out_dir / REQUESTS_FILE)
    result.steps.to_parquet(out_dir / STEPS_FILE, index=False)
    (out_dir / SUMMARY_FILE).write_text(json.dumps(_json_safe(summary), indent=2) + "\n")


def run_experiment(cfg_node: Any, out_dir: str | Path, backend: Any = None) -> dict[str, Any]:
    """Build the workload and the backend from ``cfg_node`` (a composed run config, as a
    DictConfig or its plain container), run it, write the three files into ``out_dir``, print
    the summary table, return the summary.

    summary.json: the vLLM benchmark keys of `core.metrics.summarize` at top level, ``run`` (what
    ran: backend, model, hardware, policies, workload; plus backend facts such as the cost model),
    ``over_long`` (requests whose prompt + output exceed max_model_len: count and first ids; they
    are reported, not trimmed), ``filtered`` (what workload filters such as
    ``workload.max_prompt_tokens`` dropped), ``prefix_cache`` (hit rate, the trace's
    infinite-cache bound and their ratio: `prefix_report.prefix_cache_record`),
    ``spec`` (with speculative decoding: the ``spec_decode_*`` counters) and ``timing`` (wall time, simulation speed: the only part that
    differs between two identical runs). ``backend`` (a `Backend` instance) replaces the one the
    config names, e.g. an `EngineBackend` holding an engine shared by several runs.
    """
    t0 = time.perf_counter()
    cfg = plain(cfg_node)
    check_config(cfg)
    out = Path(out_dir)
    rc = from_cfg(cfg)
    model = resolve_model(cfg["model"])
    shape = model.shape
    check_tp(rc.tp, shape)
    hw = hardware_spec(cfg["hardware"])
    ctx = RunContext(cfg, shape, hw, out, _progress(cfg["progress"]))
    workload = build_workload(cfg["workload"], shape.vocab_size)
    for line in filter_lines(workload):
        print(line, file=sys.stderr)
    if rc.num_pages:
        sc = scheduler_config(cfg, shape, hw)
        check_kv_fits(sc.num_pages, sc.page_size, workload.prompt_lens, workload.output_lens)
    max_len = rc.max_model_len or shape.max_position_embeddings
    over = workload.over_long(max_len)
    if over:
        print(f"[twinserve] {len(over)} request(s) exceed max_model_len={max_len} and are not run "
              f"(not trimmed); first ids: {over[:10]}", file=sys.stderr)
    backend = backend if backend is not None else BACKENDS.create(str(cfg["backend"]["name"]))
    result = backend.run(ctx, workload)
    no_request_ran(len(workload), result.rejected)
    slo = cfg["slo"]
    summary: dict[str, Any] = summarize(result.requests, slo_ttft_ms=slo.get("ttft_ms"),
                                        slo_tpot_ms=slo.get("tpot_ms"), slo_e2e_ms=slo.get("e2e_ms"))
    summary["run"] = cost_facts({**run_metadata(cfg, ctx, workload), **result.meta}, model.mismatch)
    if "spec" in summary["run"]:  # speculative decoding's spec_decode_* counters (docs/speculation.md)
        summary["spec"] = summary["run"].pop("spec")
    summary["over_long"] = {"max_model_len": max_len, "count": len(over), "first_ids": over[:10]}
    summary["filtered"] = filters_record(workload)
    summary["prefix_cache"] = prefix_cache_record(result.requests, workload)
    summary["rejected"] = {"count": len(result.rejected),
                           "first": [{"rid": r, "reason": why} for r, why in result.rejected[:10]]}
    summary["timing"] = {**result.timing, "run_wall_s": time.perf_counter() - t0}
    write_outputs(out, result, summary)
    if cfg["print_summary"]:
        print(run_header(summary["run"]))
        title = f"{summary['run']['backend']}: {shape.name} on {summary['run']['hardware']}, {workload.name}"
        print(format_summary(_numbers_only(summary), title=title[:48]))
        print(f"outputs: {out}")
    return summary


def cost_facts(run: dict[str, Any], model_mismatch: str | None) -> dict[str, Any]:
    """``run`` with the pricing facts every summary.json carries: ``cost_model`` (what priced the
    steps, None for a measured backend), ``calibration`` (its file, or None) and
    ``calibration_mismatch`` (why the calibration may not describe this run, or None). A model
    at ``model.path`` that is not the preset ``model.name`` is warned about here."""
    out = {"cost_model": None, "cost_model_source": None, **run}
    out["calibration"] = out["cost_model_source"]
    notes = [n for n in (model_mismatch, run.get("calibration_mismatch")) if n]
    if model_mismatch:
        cm = out["cost_model"]
        priced = (f"priced by the {cm['name']} cost model" + (f" ({out['calibration']})" if out["calibration"] else "")
                  if isinstance(cm, dict) else "measured, not priced")
        notes[0] = f"{model_mismatch}; {priced}"
        warnings.warn(notes[0], CalibrationMismatchWarning, stacklevel=3)
    out["calibration_mismatch"] = "; ".join(notes) or None
    return out


def run_header(run: Mapping[str, Any]) -> str:
    """One line naming what ran: backend, model, hardware, policies and the cost model."""
    cm = run.get("cost_model")
    priced = (f"cost model {cm['name']}" + (f" ({Path(run['calibration']).name})" if run.get("calibration") else "")
              if isinstance(cm, dict) else "measured (no cost model)")
    return (f"[twinserve] {run['backend']}: {run['model']} on {run['hardware']}, tp={run['tp']}, "
            f"{run['scheduler']}/{run['memory']}/{run['cache']}; {priced}")


def _numbers_only(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if not isinstance(v, dict)}


def load_run(out_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """The three files of a run folder: (requests, steps, summary)."""
    d = Path(out_dir)
    return (pd.read_parquet(d / REQUESTS_FILE), pd.read_parquet(d / STEPS_FILE),
            json.loads((d / SUMMARY_FILE).read_text()))
