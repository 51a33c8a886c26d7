"""Serving metrics from per-request timestamps, with vLLM ``benchmark_serving`` key names.

One row per request (`requests_frame`), then `summarize` turns a frame into the summary dict:

- TTFT = first_token - arrival; E2E latency (``e2el``) = finish - arrival;
  queueing delay (``queue``) = first scheduled - arrival.
- TPOT = (finish - first_token) / (output_tokens - 1), over requests with more than one output
  token (the others are left out of the TPOT statistics, and count as meeting a TPOT SLO).
- ITL: every gap between consecutive output-token times of a request, pooled over requests.
- Throughputs divide by ``duration`` (default: last finish - first arrival).
- Latency statistics and token totals cover completed requests only (vLLM's convention);
  ``failed`` counts aborted requests. An empty statistic is NaN (vLLM would print 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from twinserve.core.request import Req, ReqState

COLUMNS = ("rid", "replica", "tenant", "priority", "arrival_s", "scheduled_s", "first_token_s",
           "finish_s", "prompt_tokens", "output_tokens", "cached_tokens", "preemptions",
           "finish_reason", "token_times")
LATENCIES = ("ttft", "tpot", "itl", "e2el", "queue")
_NAN = float("nan")


def _f(x: float | None) -> float:
    return _NAN if x is None else float(x)


def requests_frame(reqs: Iterable[Req], replica: int = 0) -> pd.DataFrame:
    """One row per request with exactly `COLUMNS`. Times are absolute seconds on the backend's
    clock (NaN where an event did not happen); ``output_tokens`` counts outputs whose values have
    arrived (a request still running under overlap scheduling may have placeholders in flight:
    ``req.pending``); ``token_times`` holds a float64 array of those outputs' times (a list
    column in parquet); an aborted request's ``finish_reason`` is ``"abort"``."""
    rows = []
    for r in reqs:
        reason = r.finish_reason
        if reason is None and r.state is ReqState.ABORTED:
            reason = "abort"
        known = r.num_output - r.pending        # placeholders still in flight have no value/time
        rows.append((r.rid, replica, r.tenant, r.priority, r.arrival, _f(r.t_scheduled),
                     _f(r.t_first_token), _f(r.t_finish), r.prompt_len, known,
                     r.max_cached, r.num_preemptions, reason,
                     np.array(r.token_times[:known], dtype=np.float64)))
    cols = list(zip(*rows)) if rows else [()] * len(COLUMNS)
    data: dict[str, Any] = {}
    for name, col in zip(COLUMNS, cols):
        if name in ("tenant", "finish_reason", "token_times"):
            data[name] = pd.Series(list(col), dtype=object)
        elif name.endswith("_s"):
            data[name] = np.asarray(col, dtype=np.float64)
        else:
            data[name] = np.asarray(col, dtype=np.int64)
    return pd.DataFrame(data, columns=list(COLUMNS))


def _pword(p: float) -> str:
    return str(int(p)) if float(p) == int(p) else str(p)


def _stats(name: str, values_s: np.ndarray, percentiles: Sequence[float]) -> dict[str, float]:
    """mean, median, std (population, as numpy and vLLM) and percentiles, in ms. ``values_s`` is
    a temporary owned by the caller: it is reordered in place (no copy of large ITL arrays)."""
    v = np.asarray(values_s, dtype=np.float64)
    out: dict[str, float] = {}
    if v.size == 0:
        out[f"mean_{name}_ms"] = out[f"median_{name}_ms"] = out[f"std_{name}_ms"] = _NAN
        for p in percentiles:
            out[f"p{_pword(p)}_{name}_ms"] = _NAN
        return out
    out[f"mean_{name}_ms"] = float(v.mean()) * 1000.0
    out[f"std_{name}_ms"] = float(v.std()) * 1000.0
    qs = np.percentile(v, [50.0, *percentiles], overwrite_input=True) * 1000.0
    out[f"median_{name}_ms"] = float(qs[0])
    for p, q in zip(percentiles, qs[1:]):
        out[f"p{_pword(p)}_{name}_ms"] = float(q)
    return {k: out[k] for k in (f"mean_{name}_ms", f"median_{name}_ms", f"std_{name}_ms",
                                *(f"p{_pword(p)}_{name}_ms" for p in percentiles))}


def inter_token_latencies(token_times: Sequence[np.ndarray]) -> np.ndarray:
    """All gaps between consecutive entries of each array, pooled (seconds)."""
    arrays = [np.asarray(t, dtype=np.float64) for t in token_times]
    if not arrays:
        return np.empty(0)
    lens = np.fromiter((a.size for a in arrays), np.int64, len(arrays))
    flat = np.concatenate(arrays)
    if flat.size < 2:
        return np.empty(0)
    np.subtract(flat[1:], flat[:-1], out=flat[:-1])      # flat[j] = gap after token j
    ends = np.cumsum(lens) - 1                             # last token of each request
    keep = np.ones(flat.size, dtype=bool)
    keep[ends[lens > 0]] = False                           # its "gap" crosses requests
    return flat[keep]


def summarize(df: pd.DataFrame, duration_s: float | None = None, slo_ttft_ms: float | None = None,
              slo_tpot_ms: float | None = None, slo_e2e_ms: float | None = None,
              percentiles: Sequence[float] = (50, 90, 99)) -> dict[str, Any]:
    """The vLLM-style summary of a `requests_frame` (see the module docstring).

    Keys: completed, failed, incomplete (neither finished nor aborted), total_input_tokens,
    total_output_tokens, total_cached_tokens, total_preemptions, duration, request_throughput,
    request_goodput (None without an SLO), output_throughput, total_token_throughput, and
    ``{mean,median,std,p<P>}_{ttft,tpot,itl,e2el,queue}_ms``.
    """
    reason = df["finish_reason"]
    failed = (reason == "abort").to_numpy()
    finish = df["finish_s"].to_numpy(np.float64)
    done = np.isfinite(finish) & ~failed
    c = df[done]
    arrival = c["arrival_s"].to_numpy(np.float64)
    first = c["first_token_s"].to_numpy(np.float64)
    fin = c["finish_s"].to_numpy(np.float64)
    sched = c["scheduled_s"].to_numpy(np.float64)
    nout = c["output_tokens"].to_numpy(np.int64)
    nin = c["prompt_tokens"].to_numpy(np.int64)

    if duration_s is None:
        fin_all = finish[np.isfinite(finish)]
        duration_s = float(fin_all.max() - df["arrival_s"].min()) if fin_all.size else 0.0
    dur = float(duration_s)

    def per_s(x: float) -> float:
        return x / dur if dur > 0 else _NAN

    ttft = first - arrival
    e2el = fin - arrival
    multi = nout > 1
    tpot_all = np.zeros(nout.size)
    tpot_all[multi] = (fin[multi] - first[multi]) / (nout[multi] - 1)
    itl = inter_token_latencies(c["token_times"].tolist())

    out: dict[str, Any] = {
        "completed": int(done.sum()),
        "failed": int(failed.sum()),
        "incomplete": int((~done & ~failed).sum()),
        "total_input_tokens": int(nin.sum()),
        "total_output_tokens": int(nout.sum()),
        "total_cached_tokens": int(c["cached_tokens"].sum()),
        "total_preemptions": int(df["preemptions"].sum()),
        "duration": dur,
        "request_throughput": per_s(float(done.sum())),
        "request_goodput": None,
        "output_throughput": per_s(float(nout.sum())),
        "total_token_throughput": per_s(float(nin.sum() + nout.sum())),
    }
    slos = [(ttft, slo_ttft_ms), (tpot_all, slo_tpot_ms), (e2el, slo_e2e_ms)]
    if any(s is not None for _, s in slos):
        good = np.ones(nout.size, dtype=bool)
        for values, slo in slos:
            if slo is not None:
                good &= values * 1000.0 <= slo
        out["request_goodput"] = per_s(float(good.sum()))
    for name, values in (("ttft", ttft), ("tpot", tpot_all[multi]), ("itl", itl),
                         ("e2el", e2el), ("queue", sched - arrival)):
        out.update(_stats(name, values, percentiles))
    return out


_SECTIONS = (("ttft", "Time to First Token", "TTFT"),
             ("tpot", "Time per Output Token (excl. 1st token)", "TPOT"),
             ("itl", "Inter-token Latency", "ITL"), ("e2el", "End-to-end Latency", "E2EL"),
             ("queue", "Queueing Delay", "Queue"))


def format_summary(summary: dict[str, Any], title: str = "Serving Benchmark Result") -> str:
    """A fixed-width text table in the manner of vLLM's benchmark_serving printout."""
    width = 50
    lines = [f" {title} ".center(width, "=")]

    def row(label: str, value: Any) -> None:
        if value is None:
            text = "-"
        elif isinstance(value, float):
            text = f"{value:.2f}"
        else:
            text = str(value)
        lines.append(f"{label:<40}{text:>10}")

    row("Successful requests:", summary["completed"])
    row("Failed requests:", summary["failed"])
    row("Benchmark duration (s):", summary["duration"])
    row("Total input tokens:", summary["total_input_tokens"])
    row("Total generated tokens:", summary["total_output_tokens"])
    row("Request throughput (req/s):", summary["request_throughput"])
    if summary.get("request_goodput") is not None:
        row("Request goodput (req/s):", summary["request_goodput"])
    row("Output token throughput (tok/s):", summary["output_throughput"])
    row("Total token throughput (tok/s):", summary["total_token_throughput"])
    for key, heading, short in _SECTIONS:
        lines.append(f"{heading}".center(width, "-"))
        for stat in ("mean", "median"):
            row(f"{stat.capitalize()} {short} (ms):", summary[f"{stat}_{key}_ms"])
        for k in summary:
            if k.startswith("p") and k.endswith(f"_{key}_ms") and k[1].isdigit():
                row(f"P{k[1:-len(key) - 4]} {short} (ms):", summary[k])
    lines.append("=" * width)
    return "\n".join(lines)
