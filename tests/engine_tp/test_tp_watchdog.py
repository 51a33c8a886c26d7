"""A rank that stalls in a step: the TPGroupError names it, the step and the phase (gloo, tp=2)."""

from __future__ import annotations

import re
import time

import pytest

from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.engine.engine import Engine, EngineConfig
from twinserve.engine.testing import random_prompts
from twinserve.engine.tp.errors import TPGroupError
from twinserve.engine.tp.faults import ENV

TIMEOUT_S = 2.0


def test_sleeping_follower_is_named_with_its_step(tiny_dir, monkeypatch):
    monkeypatch.setenv(ENV, "rank=1,sleep_step=3,sleep_s=60")
    eng = Engine(EngineConfig(model=str(tiny_dir("tiny-llama")), device="cpu", cpu_kv_tokens=4096, tp_size=2,
                              tp_timeout_s=TIMEOUT_S))
    pid = eng.tp_pids()[1]
    for i, p in enumerate(random_prompts([30, 12], seed=5)):
        eng.add(Req(i, p, SamplingParams(temperature=0.0, max_tokens=50, ignore_eos=True)))
    t0 = time.monotonic()
    try:
        with pytest.raises(TPGroupError) as info:
            while eng.has_work():
                eng.step()
    finally:
        eng.shutdown()
    assert time.monotonic() - t0 < TIMEOUT_S + 15
    msg = str(info.value)
    assert f"tensor-parallel rank 1 (pid {pid}) did not arrive: it is at step 3, forward (after 0 all-reduces)" in msg
    assert re.search(r"rank 0 waits at step 3, all-reduce #0 \(the embedding\)", msg), msg
