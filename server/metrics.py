"""Prometheus metrics of one server (its own registry: no global collector state)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0)
_ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
                0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)


def engine_gauges(stats: dict[str, Any]) -> dict[str, float]:
    """Normalize an engine's ``stats()`` dict to the gauge values we export.

    Reads ``running``/``waiting`` (or ``num_running``/``num_waiting``), KV usage as ``kv_usage``
    (fraction) or from ``used_pages``/``num_pages``, and ``cache_hit_rate``. Missing values are 0.
    """
    def num(*keys: str) -> float:
        for k in keys:
            v = stats.get(k)
            if isinstance(v, (int, float)):
                return float(v)
        return 0.0

    kv = stats.get("kv_usage")
    if not isinstance(kv, (int, float)):
        total = num("num_pages", "total_pages")
        kv = num("used_pages") / total if total else 0.0
    return {"running": num("running", "num_running"), "waiting": num("waiting", "num_waiting"),
            "kv_usage": float(kv), "cache_hit_rate": num("cache_hit_rate", "prefix_cache_hit_rate")}


class ServerMetrics:
    """The gauges, histograms and counters behind ``GET /metrics``.

    Latencies are measured in the API server, from the moment a request is parsed: TTFT to the
    first token, inter-token latency between consecutive token deltas, end-to-end to the last.
    Engine gauges are refreshed from the engine's ``EngineStats`` messages.
    """

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.running = Gauge("twinserve_num_requests_running", "Requests the engine is running", registry=r)
        self.waiting = Gauge("twinserve_num_requests_waiting", "Requests waiting in the engine queue", registry=r)
        self.kv_usage = Gauge("twinserve_kv_cache_usage_perc", "Fraction of KV pages held by requests", registry=r)
        self.hit_rate = Gauge("twinserve_prefix_cache_hit_rate", "Prefix-cache hit rate (tokens)", registry=r)
        self.in_flight = Gauge("twinserve_http_requests_in_flight", "Generation requests the API server holds", registry=r)
        self.ttft = Histogram("twinserve_time_to_first_token_seconds", "Time to first token",
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("twinserve_inter_token_latency_seconds", "Time between consecutive tokens",
                             buckets=_ITL_BUCKETS, registry=r)
        self.e2e = Histogram("twinserve_e2e_request_latency_seconds", "End-to-end request latency",
                             buckets=_LATENCY_BUCKETS, registry=r)
        self.prompt_tokens = Counter("twinserve_prompt_tokens", "Prompt tokens of finished requests", registry=r)
        self.cached_tokens = Counter("twinserve_prompt_cached_tokens", "Prompt tokens served from the prefix cache", registry=r)
        self.generation_tokens = Counter("twinserve_generation_tokens", "Generated tokens", registry=r)
        self.finished = Counter("twinserve_request_success", "Finished requests", ["finish_reason"], registry=r)
        self.rejected = Counter("twinserve_request_rejected", "Requests answered with an error", ["status"], registry=r)
        # speculative decoding's totals (engine stats `spec_decode_*`; 0 without speculation)
        self.spec_draft = Gauge("twinserve_spec_decode_num_draft_tokens", "Tokens proposed by speculation",
                                registry=r)
        self.spec_accepted = Gauge("twinserve_spec_decode_num_accepted_tokens",
                                   "Proposed tokens the model accepted", registry=r)
        self.info = Gauge("twinserve_model_info", "Served model", ["model_name"], registry=r)
        self.info.labels(model_name=model_name).set(1)

    def update_engine(self, stats: dict[str, Any]) -> None:
        g = engine_gauges(stats)
        self.running.set(g["running"])
        self.waiting.set(g["waiting"])
        self.kv_usage.set(g["kv_usage"])
        self.hit_rate.set(g["cache_hit_rate"])
        self.spec_draft.set(float(stats.get("spec_decode_num_draft_tokens", 0)))
        self.spec_accepted.set(float(stats.get("spec_decode_num_accepted_tokens", 0)))

    def render(self) -> bytes:
        return generate_latest(self.registry)
