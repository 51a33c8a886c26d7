"""One pandas DataFrame, one row per run: summary keys, overrides, labels and SLO columns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd

from twinserve.core.config_checks import lookup
from twinserve.experiments.report.latency import SLO, request_latencies, slo_met
from twinserve.experiments.report.runs import RunFolder, load_runs

# Config groups and knobs that name what a run was; read from summary.json (top level, then its
# ``run`` section), then the overrides, then the composed Hydra config. A group node (a dict)
# is named by its first key found in NAME_KEYS.
LABEL_KEYS = ("backend", "model", "hardware", "scheduler", "memory", "cache", "cost_model",
              "workload", "rate")
NAME_KEYS = ("name", "policy", "_name_", "kind")
# Where a rate may hide in the composed config when the summary has none.
RATE_PATHS = ("rate", "workload.rate", "workload.request_rate", "workload.qps")


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts become dotted keys; lists become JSON strings (so parquet stays tidy)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        elif isinstance(v, (list, tuple)):
            out[key] = json.dumps(v)
        else:
            out[key] = v
    return out


def _name_of(node: Any) -> Any:
    if isinstance(node, Mapping):
        for k in NAME_KEYS:
            if isinstance(node.get(k), (str, int, float)):
                return node[k]
        return None
    return node


def policy_label(scheduler: Any) -> str:
    """A short policy name: ``pkg.mod:MyPolicy`` -> ``MyPolicy``; None -> ``?``."""
    if scheduler is None:
        return "?"
    return str(scheduler).rpartition(":")[2]


def label_values(run: RunFolder) -> dict[str, Any]:
    """The LABEL_KEYS of one run as scalars: summary value (top level or ``run.<key>``), else
    override, else config node. ``rate`` is the offered rate of the config (``workload.rate``), not
    the measured one."""
    out: dict[str, Any] = {}
    meta = run.summary.get("run") if isinstance(run.summary.get("run"), Mapping) else {}
    for key in LABEL_KEYS:
        value = _name_of(run.summary.get(key))
        if value is None and key != "rate":
            value = _name_of(meta.get(key))
        if value is None:
            value = _name_of(run.overrides.get(key))
        if value is None:
            paths = RATE_PATHS if key == "rate" else (key,)
            value = next((v for v in (_name_of(lookup(run.config, p)) for p in paths)
                          if v is not None), None)
        out[key] = value
    return out


def run_row(run: RunFolder, slo: SLO | None = None, root: Path | None = None) -> dict[str, Any]:
    """One row: every summary key (flattened), every override (summary wins on a clash, the raw
    overrides stay in ``overrides``), the labels, ``policy``/``combo`` names and, when ``slo`` is
    given, ``slo_attainment`` and ``slo_goodput`` computed from requests.parquet."""
    row: dict[str, Any] = {}
    row.update(flatten(run.summary))
    for k, v in run.overrides.items():
        row.setdefault(k, v)
    for k, v in label_values(run).items():
        if row.get(k) is None:
            row[k] = v
    row["overrides"] = " ".join(f"{k}={v}" for k, v in run.overrides.items())
    row["path"] = str(run.path)
    row["run_name"] = str(run.path.relative_to(root)) if root and run.path.is_relative_to(root) else run.path.name
    row["policy"] = policy_label(row.get("scheduler"))
    row["combo"] = row["policy"] if row.get("cache") is None else f"{row['policy']}+{row['cache']}"
    if slo is not None:
        reqs = run.requests()
        n = len(reqs)
        met = int(slo_met(request_latencies(reqs), slo).sum()) if n else 0
        row["slo_attainment"] = met / n if n else float("nan")
        duration = row.get("duration")
        row["slo_goodput"] = met / duration if isinstance(duration, (int, float)) and duration > 0 \
            else float("nan")
    return row


def runs_frame(runs: Iterable[RunFolder], slo: SLO | None = None) -> pd.DataFrame:
    """The runs table. Columns: summary keys, override keys, LABEL_KEYS, ``overrides``, ``path``,
    ``run_name``, ``policy``, ``combo`` (and SLO columns); one row per run, in the given order."""
    runs = list(runs)
    root = _common_root([r.path for r in runs])
    rows = [run_row(r, slo, root) for r in runs]
    df = pd.DataFrame(rows)
    # A column mixing numbers and strings cannot go to parquet: make such columns strings.
    for col in df.columns:
        kinds = {type(v) for v in df[col].dropna()}
        if len(kinds) > 1 and not kinds <= {int, float, bool}:
            df[col] = df[col].map(lambda v: v if v is None or pd.isna(v) else str(v))
    return df


def build_frame(paths: Iterable[Path | str], slo: SLO | None = None) -> pd.DataFrame:
    """Find every run under ``paths`` (run or multirun folders) and build the runs table."""
    return runs_frame(load_runs(paths), slo)


def _common_root(paths: list[Path]) -> Path | None:
    if not paths:
        return None
    parents = [p.parent for p in paths]
    root = parents[0]
    while not all(p.is_relative_to(root) for p in parents):
        root = root.parent
    return root
