"""The prefix-cache and workload-filter records of summary.json."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from twinserve.core.workload.prefix_bound import prefix_bound
from twinserve.core.workload.workload import Workload


def prefix_cache_record(requests: pd.DataFrame, workload: Workload) -> dict[str, Any]:
    """summary.json's ``prefix_cache``: over the completed requests (the ones the hit rate of
    `core.metrics.summarize` counts), ``hit_rate`` (cached tokens / prompt tokens), the trace's
    own infinite-cache ``bound_hit_rate`` (`core.workload.prefix_bound`) and ``of_bound``
    (their ratio; None when the bound is 0)."""
    done = np.isfinite(requests["finish_s"].to_numpy(np.float64)) & (requests["finish_reason"] != "abort").to_numpy()
    c = requests[done]
    prompt = int(c["prompt_tokens"].sum())
    cached = int(c["cached_tokens"].sum())
    bound = prefix_bound(workload, set(c["rid"].astype(int).tolist()))
    rate = cached / prompt if prompt else float("nan")
    return {"hit_rate": rate, "cached_tokens": cached, "prompt_tokens": prompt,
            "bound_hit_rate": bound.hit_rate, "bound_tokens": bound.hit_tokens,
            "of_bound": rate / bound.hit_rate if bound.hit_tokens else None}


def filters_record(workload: Workload) -> dict[str, Any]:
    """summary.json's ``filtered``: per workload filter, its limit, dropped and kept counts."""
    return {name: {**dataclasses.asdict(d), "first_ids": list(d.first_ids)}
            for name, d in workload.filters.items()}


def filter_lines(workload: Workload) -> list[str]:
    """One log line per filter that dropped requests."""
    return [f"[twinserve] workload.{name}={d.limit} dropped {d.dropped} request(s) of the slice "
            f"({d.kept} kept); first ids: {list(d.first_ids)}"
            for name, d in workload.filters.items() if d.dropped]
