"""Per-request latencies and SLO attainment from a run's requests.parquet."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True, slots=True)
class SLO:
    """Latency objectives of one request, in milliseconds (vLLM bench ``--goodput`` style).

    A request meets the SLO when it completed, its TTFT is at most ``ttft_ms`` and its TPOT at
    most ``tpot_ms`` (a one-token request has no TPOT and passes that test). None disables a bound.
    """

    ttft_ms: float | None = None
    tpot_ms: float | None = None

    def label(self) -> str:
        parts = [f"TTFT<={self.ttft_ms:g}ms" if self.ttft_ms is not None else "",
                 f"TPOT<={self.tpot_ms:g}ms" if self.tpot_ms is not None else ""]
        return ", ".join(p for p in parts if p) or "none"


def request_latencies(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per completed request: ``ttft_ms``, ``tpot_ms`` (NaN for one-token outputs),
    ``e2el_ms`` and ``queue_ms``, with the formulas of vLLM's serving benchmark:
    TTFT = first token - arrival, TPOT = (finish - first token) / (output tokens - 1)."""
    if requests.empty:
        return pd.DataFrame(columns=["ttft_ms", "tpot_ms", "e2el_ms", "queue_ms"])
    done = requests
    if "finish_reason" in done:
        done = done[done["finish_reason"].astype(str) != "abort"]
    done = done[done["first_token_s"].notna() & done["finish_s"].notna()]
    out_tokens = done["output_tokens"].to_numpy(dtype=float)
    decode_s = (done["finish_s"] - done["first_token_s"]).to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(out_tokens > 1, decode_s / (out_tokens - 1), np.nan)
    return pd.DataFrame({
        "ttft_ms": 1e3 * (done["first_token_s"] - done["arrival_s"]).to_numpy(dtype=float),
        "tpot_ms": 1e3 * tpot,
        "e2el_ms": 1e3 * (done["finish_s"] - done["arrival_s"]).to_numpy(dtype=float),
        "queue_ms": 1e3 * (done["scheduled_s"] - done["arrival_s"]).to_numpy(dtype=float)
        if "scheduled_s" in done else np.nan,
    }, index=done.index)


def slo_met(lat: pd.DataFrame, slo: SLO) -> np.ndarray:
    """Boolean mask over ``request_latencies`` rows: which requests meet ``slo``."""
    ok = np.ones(len(lat), dtype=bool)
    if slo.ttft_ms is not None:
        ok &= lat["ttft_ms"].to_numpy() <= slo.ttft_ms
    if slo.tpot_ms is not None:
        tpot = lat["tpot_ms"].to_numpy()
        ok &= np.isnan(tpot) | (tpot <= slo.tpot_ms)
    return ok


def slo_attainment(requests: pd.DataFrame, slo: SLO) -> float:
    """Fraction of ALL requests (aborted ones count as misses) that completed within ``slo``."""
    if requests.empty:
        return float("nan")
    return float(slo_met(request_latencies(requests), slo).sum()) / len(requests)
