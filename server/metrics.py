"""Prometheus metrics of one server (its own registry: no global collector state).

Every series carries a ``model_name`` label, like vLLM's; docs/serving.md maps each name to
vLLM's.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0)
_ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
                0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
_PHASE_BUCKETS = (0.0, *_LATENCY_BUCKETS, 320.0, 640.0, 1280.0, 2560.0)

# engine stats key -> counter attribute; the engine reports running totals
ENGINE_COUNTERS = {"num_preemptions": "preemptions",
                   "prefix_cache_queried_tokens": "prefix_queries",
                   "prefix_cache_hit_tokens": "prefix_hits",
                   "spec_decode_num_draft_tokens": "spec_draft",
                   "spec_decode_num_accepted_tokens": "spec_accepted"}


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
    Queue, prefill and decode times come from the engine's clock (`messages.RequestTimes`).
    Engine gauges are refreshed from the engine's ``EngineStats`` messages and zeroed by
    `reset_engine` when no engine reports them any more; engine counters follow the engine's
    running totals (a total that goes down, a restarted engine, starts a new base).
    """

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        r, m = self.registry, model_name
        lbl = ["model_name"]

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, lbl, registry=r).labels(model_name=m)

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, lbl, buckets=buckets, registry=r).labels(model_name=m)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, lbl, registry=r).labels(model_name=m)

        def family(name: str, doc: str, label: str) -> Any:
            fam = Counter(name, doc, [*lbl, label], registry=r)
            return _Bound(fam, m, label)

        self.running = gauge("twinserve_num_requests_running", "Requests the engine is running")
        self.waiting = gauge("twinserve_num_requests_waiting", "Requests waiting in the engine queue")
        self.kv_usage = gauge("twinserve_kv_cache_usage_perc", "Fraction of KV pages held by requests")
        self.hit_rate = gauge("twinserve_prefix_cache_hit_rate", "Prefix-cache hit rate (tokens)")
        self.in_flight = gauge("twinserve_http_requests_in_flight", "Generation requests the API server holds")
        self.ttft = hist("twinserve_time_to_first_token_seconds", "Time to first token", _LATENCY_BUCKETS)
        self.itl = hist("twinserve_inter_token_latency_seconds", "Time between consecutive tokens", _ITL_BUCKETS)
        self.e2e = hist("twinserve_e2e_request_latency_seconds", "End-to-end request latency", _LATENCY_BUCKETS)
        self.queue_time = hist("twinserve_request_queue_time_seconds",
                               "Time a request waited in the engine before it was first scheduled", _PHASE_BUCKETS)
        self.prefill_time = hist("twinserve_request_prefill_time_seconds",
                                 "First scheduled to first token", _PHASE_BUCKETS)
        self.decode_time = hist("twinserve_request_decode_time_seconds",
                                "First token to the request's end", _PHASE_BUCKETS)
        self.prompt_tokens = counter("twinserve_prompt_tokens", "Prompt tokens of finished requests")
        self.cached_tokens = counter("twinserve_prompt_cached_tokens", "Prompt tokens served from the prefix cache")
        self.generation_tokens = counter("twinserve_generation_tokens", "Generated tokens")
        self.preemptions = counter("twinserve_num_preemptions", "Requests preempted by the scheduler")
        self.prefix_queries = counter("twinserve_prefix_cache_queries",
                                      "Prompt tokens looked up in the prefix cache")
        self.prefix_hits = counter("twinserve_prefix_cache_hits", "Prompt tokens found in the prefix cache")
        self.spec_draft = counter("twinserve_spec_decode_num_draft_tokens", "Tokens proposed by speculative decoding")
        self.spec_accepted = counter("twinserve_spec_decode_num_accepted_tokens",
                                     "Proposed tokens the target model accepted")
        self.finished = family("twinserve_request_success", "Finished requests", "finish_reason")
        self.rejected = family("twinserve_request_rejected", "Requests the pipeline answered with an error",
                               "status")
        self.aborted = family("twinserve_request_aborted",
                              "Requests ended before they finished (client gone, timeout, server fault)",
                              "reason")
        self.http = family("twinserve_http_requests", "HTTP responses by status code", "status")
        self.info = gauge("twinserve_model_info", "Served model")
        self.info.set(1)
        self._totals: dict[str, float] = {}

    def update_engine(self, stats: dict[str, Any]) -> None:
        g = engine_gauges(stats)
        self.running.set(g["running"])
        self.waiting.set(g["waiting"])
        self.kv_usage.set(g["kv_usage"])
        self.hit_rate.set(g["cache_hit_rate"])
        for key, attr in ENGINE_COUNTERS.items():
            v = stats.get(key)
            if not isinstance(v, (int, float)):
                continue
            last = self._totals.get(key, 0.0)
            if v > last:
                getattr(self, attr).inc(v - last)
            self._totals[key] = float(v)

    def reset_engine(self) -> None:
        """Zero the engine gauges (the engine is gone or stalled: its last values are stale)."""
        for g in (self.running, self.waiting, self.kv_usage, self.hit_rate):
            g.set(0.0)

    def observe_request_times(self, times: Any) -> None:
        """One `messages.RequestTimes`."""
        for h, col in ((self.queue_time, times.queue_s), (self.prefill_time, times.prefill_s),
                       (self.decode_time, times.decode_s)):
            for v in col:
                h.observe(max(0.0, float(v)))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Bound:
    """A labelled counter family with ``model_name`` fixed: ``.labels(<label>=v)`` gives a child,
    the same one for the same value (kept here: the family's own lookup is per call)."""

    def __init__(self, family: Counter, model_name: str, label: str) -> None:
        self._family = family
        self._model = model_name
        self._label = label
        self._children: dict[str, Counter] = {}

    def labels(self, **kw: str) -> Counter:
        value = kw[self._label]
        child = self._children.get(value)
        if child is None:
            child = self._children[value] = self._family.labels(model_name=self._model, **{self._label: value})
        return child
