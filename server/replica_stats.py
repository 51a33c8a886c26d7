"""`merge_stats`: the engine gauges of several replicas as one ``stats()``-shaped dict."""

from __future__ import annotations

from typing import Any, Mapping

from twinserve.server.metrics import ENGINE_COUNTERS

CUMULATIVE_STATS = frozenset(ENGINE_COUNTERS)  # counters that only grow: a dead replica's stay counted
_PER_PAGE = ("kv_usage", "kv_cached")  # fractions of a replica's pool: weighted by its ``num_pages``
_FIRST = ("tp_size",)  # the same on every replica


def merge_stats(by_replica: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """One replica: its stats as they are. Several: numbers summed, except pool fractions
    (weighted by each replica's ``num_pages``), other ``*_rate`` values (averaged;
    ``cache_hit_rate`` is recomputed from the summed prefix counters when they are there) and
    ``tp_size``; other values are replica 0's (or the lowest live replica's)."""
    if len(by_replica) == 1:
        return dict(next(iter(by_replica.values())))
    parts = [by_replica[k] for k in sorted(by_replica)]
    out: dict[str, Any] = {}
    keys = [k for p in parts for k in p]
    for key in dict.fromkeys(keys):
        vals = [p[key] for p in parts if key in p]
        nums = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(nums) != len(vals) or key in _FIRST:
            out[key] = vals[0]
        elif key in _PER_PAGE:
            pages = [float(p.get("num_pages", 0) or 0) for p in parts if key in p]
            total = sum(pages)
            out[key] = sum(v * w for v, w in zip(nums, pages)) / total if total else sum(nums) / len(nums)
        elif key.endswith("_rate"):
            out[key] = sum(nums) / len(nums)
        else:
            out[key] = sum(nums)
    queried = out.get("prefix_cache_queried_tokens")
    if isinstance(queried, float) and queried > 0:
        out["cache_hit_rate"] = float(out.get("prefix_cache_hit_tokens", 0.0)) / queried
    return out
