"""The GPU/CPU engine backend: models, paged KV pool, attention backends, runner, sampler.

Entry points: `twinserve.engine.engine.Engine`, `twinserve.engine.llm.LLM`,
`twinserve.engine.replay.replay_workload`; see docs/engine.md.
"""
