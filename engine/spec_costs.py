"""`measure_step_costs`: an engine's own plain-decode and verify step times at a few batch sizes
(``spec.max_batch_size=auto``, core/spec_cutoff.py).

For each size ``B`` it runs ``B`` throw-away requests (random 32-token prompts, greedy, EOS
ignored) through the engine's real step path (CUDA graphs, token graphs, its host work), and
times ``steps`` whole ``Engine.step`` calls with speculation held off, then ``steps`` in which
every request verifies a full ``k``-token draft (a repeated last token: the verify step costs
the same whatever is accepted). Each series starts with one untimed step. The medians form the
`StepCosts`; the requests are aborted, the prefix cache flushed, their step records dropped and
the speculation counters reset, so serving starts as without the measurement.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.core.spec_cutoff import StepCosts

if TYPE_CHECKING:
    from twinserve.engine.engine import Engine

COST_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)  # measured up to the scheduler's max_running
PROMPT_LEN = 32


def cost_batch_sizes(max_running: int, token_slots: int, per_request: int) -> list[int]:
    """The sizes of `COST_BATCH_SIZES` within ``max_running`` whose requests (``per_request``
    tokens each) fit half the pool's ``token_slots``."""
    return [b for b in COST_BATCH_SIZES if b <= max_running and b * per_request <= token_slots // 2]


def measure_step_costs(eng: "Engine", steps: int = 8, seed: int = 0) -> StepCosts:
    """Median seconds per engine step of plain decodes and of full-draft verify steps at each
    size of `cost_batch_sizes` (see the module docstring); only while idle."""
    if eng.has_work():
        raise RuntimeError("measure_step_costs needs an idle engine")
    spec = eng.scheduler.spec
    k = spec.k
    max_tokens = 2 * (steps + 1) * (k + 1) + 4
    sc = eng.sched_config
    sizes = cost_batch_sizes(sc.max_running, sc.num_pages * sc.page_size, PROMPT_LEN + max_tokens)
    if not sizes:
        raise RuntimeError("the KV pool is too small to measure speculation's step costs")
    rng = np.random.default_rng(seed)
    vocab = eng.model_config.vocab_size
    propose, cap = spec.propose, spec.max_batch
    n0 = len(eng.steps)
    full = lambda r, room: np.full(room, r.tokens[r.num_tokens - 1], dtype=np.int32)  # noqa: E731
    decode_s: dict[int, float] = {}
    verify_s: dict[int, float] = {}
    try:
        for b in sizes:
            rids = [-10_000 - b * 100 - i for i in range(b)]
            spec.max_batch = 0  # prefill and plain decodes: no drafts
            for rid in rids:
                ids = rng.integers(1, vocab, size=PROMPT_LEN).astype(np.int32)
                eng.add(Req(rid, ids, SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True),
                            arrival=eng.now()))
            while any(eng.scheduler.get(rid).num_output == 0 for rid in rids):
                eng.step()
            decode_s[b] = _median_step(eng, steps)
            spec.max_batch, spec.propose = float("inf"), full
            verify_s[b] = _median_step(eng, steps)
            spec.max_batch, spec.propose = 0, propose
            for rid in rids:
                eng.abort(rid)
            while eng.has_work():
                eng.step()
    finally:
        spec.propose, spec.max_batch = propose, cap
    eng.flush_cache()
    del eng.steps[n0:]
    spec.reset_counters()
    return StepCosts(decode_s, verify_s)


def _median_step(eng: "Engine", steps: int) -> float:
    eng.step()  # untimed: the first step of a series may set up its shape
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        eng.step()
        times.append(time.perf_counter() - t)
    return float(np.median(times))
