"""`scraped_gauges`: the queue and KV gauges a router can use, read from a server's Prometheus
``/metrics`` text (twinserve's or vLLM's names)."""

from __future__ import annotations

# metric name -> the `ReplicaView` gauge it gives (twinserve's names, then vLLM's)
SCRAPED = {
    "twinserve_num_requests_waiting": "waiting",
    "twinserve_kv_cache_usage_perc": "kv_usage",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
}


def scraped_gauges(text: str) -> dict[str, float]:
    """``{"waiting": ..., "kv_usage": ...}`` from Prometheus text: each gauge summed over its
    label sets (a server exports one per model); a gauge the text lacks is left out. Comment
    lines and other metrics are skipped; a value that is not a number skips its line."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name_end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=-1)
        if name_end < 0:
            continue
        key = SCRAPED.get(line[:name_end])
        if key is None:
            continue
        rest = line[name_end:]
        if rest[0] == "{":
            rest = rest.rsplit("}", 1)[-1]
        try:
            value = float(rest.split()[0])  # a timestamp may follow the value
        except (ValueError, IndexError):
            continue
        out[key] = out.get(key, 0.0) + value
    return out
