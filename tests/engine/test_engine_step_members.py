"""Rebuilding each engine step's batch from a run's tables (`experiments.step_members`), on CPU."""

from __future__ import annotations

import numpy as np
import pytest

from twinserve.core.metrics import requests_frame
from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.engine.config import EngineConfig
from twinserve.engine.engine import Engine
from twinserve.experiments.backends.engine import steps_frame
from twinserve.experiments.step_members import decode_batches, error_table, step_members


def test_members_rebuild_every_decode_batch_and_its_contexts(tiny_model_dir):
    eng = Engine(EngineConfig(model=str(tiny_model_dir("tiny-llama")), device="cpu", cpu_kv_tokens=4096,
                              cache="none", scheduler={"max_num_batched_tokens": 64, "chunk_size": 64}))
    rng = np.random.default_rng(0)
    reqs = []
    for rid, (plen, out) in enumerate([(10, 6), (37, 9), (90, 4), (5, 12)]):  # 90: two prefill chunks
        r = Req(rid, rng.integers(3, 500, plen).astype(np.int32), SamplingParams(max_tokens=out, ignore_eos=True))
        eng.add(r)
        reqs.append(r)
        eng.step()  # staggered arrivals: decode batches of different sizes
    while eng.has_work():
        eng.step()
    steps, requests = steps_frame(eng.steps), requests_frame(reqs)
    eng.shutdown()
    members = step_members(steps, requests)
    # every output token is placed at the step that produced it, with the request's context then
    assert len(members) == int(requests["output_tokens"].sum()) == 6 + 9 + 4 + 12
    first = members[members["token"] == 0].set_index("rid")["context"]
    assert first.to_dict() == {0: 10, 1: 37, 2: 90, 3: 5}
    # each step's members are its emitting sequences: the decodes plus the prefills that finished
    per_step = members.groupby("step").size()
    emitting = steps["num_decodes"] + steps["num_prefills"]
    finishing = (per_step.reindex(steps.index, fill_value=0) <= emitting)
    assert finishing.all()
    dec = (steps["num_prefills"] == 0) & (steps["num_decodes"] > 0)
    batches = decode_batches(steps, members)
    assert len(batches) == int(dec.sum()) and set(batches.index) == set(steps.index[dec])
    assert (batches["ctx_sum"] == steps.loc[batches.index, "decode_ctx"]).all()
    assert (batches["ctx_max"] == steps.loc[batches.index, "max_ctx"]).all()
    assert sorted(batches["n"].unique()) == sorted(steps.loc[dec, "num_decodes"].unique())
    # the error table: a prediction 10 % long reads +10 everywhere
    t = error_table(steps, batches, 1.1 * steps["duration"].to_numpy())
    assert t["steps"].sum() == len(batches) and np.allclose(t["median"], 10.0)


def test_members_need_an_engine_runs_timeline():
    import pandas as pd

    with pytest.raises(ValueError, match="tokens_at"):
        step_members(pd.DataFrame({"duration": [1.0]}), pd.DataFrame({"rid": [], "prompt_tokens": [], "token_times": []}))
