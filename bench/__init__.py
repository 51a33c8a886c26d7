"""Benchmarks of the platform itself (`twinserve-bench NAME`): the scheduler core, the workload
layer, the simulator, HTTP serving against in-process serving, and the side-by-side of the engine
against mini-sglang (`bench.sbs`). Tools, not runtime: nothing in `core`, `policies`,
`simulator`, `engine` or `server` imports this package."""
