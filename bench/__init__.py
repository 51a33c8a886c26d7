"""Benchmarks of the platform itself (`twinserve-bench NAME`): the scheduler core, the workload
layer, the simulator, and HTTP serving against in-process serving. Tools, not runtime: nothing
in `core`, `policies`, `simulator`, `engine` or `server` imports this package."""
