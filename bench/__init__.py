"""Benchmarks and probes: tools that measure the runtime packages, kept apart from them."""
