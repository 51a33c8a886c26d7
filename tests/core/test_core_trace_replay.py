"""A trivial clock (1 ms per step, dummy tokens) replays 2,000 Azure conv requests to completion."""

from __future__ import annotations

import pytest

from twinserve.core.config import SchedulerConfig
from twinserve.core.request import Req, ReqState
from twinserve.core.sampling import SamplingParams
from twinserve.core.workload import load_azure
from twinserve.policies import build_scheduler


@pytest.mark.parametrize("memory,cache,mixed", [("on_demand", "radix", True), ("reserve", "none", False)])
def test_azure_conv_slice_replays_with_invariants(memory: str, cache: str, mixed: bool) -> None:
    wl = load_azure("azure_conv").head(2000)
    assert len(wl) == 2000
    # a small pool (16k tokens) so that admission control and, on demand, preemption really happen
    cfg = SchedulerConfig(num_pages=1024, page_size=16, max_num_batched_tokens=4096, chunk_size=1024,
                          max_running=64, mixed=mixed, max_model_len=16384)
    s = build_scheduler(cfg, "fcfs", memory, cache, checked=True)
    specs = list(wl)
    nxt = 0
    now = 0.0
    done: list[Req] = []
    steps = 0
    while nxt < len(specs) or s.has_work:
        while nxt < len(specs) and specs[nxt].arrival <= now:
            sp = specs[nxt]
            s.add(Req(sp.rid, wl.prompt_tokens(sp), SamplingParams(max_tokens=sp.output_len, ignore_eos=True),
                      arrival=sp.arrival))
            nxt += 1
        b = s.schedule(now)
        if b is None:
            now = specs[nxt].arrival  # idle until the next arrival
            continue
        now += 0.001
        done.extend(s.complete(b, [0] * len(b), now))
        steps += 1
        if steps % 50 == 0:
            s.check_invariants()
    s.check_invariants()
    assert len(done) == 2000 and all(r.state is ReqState.FINISHED for r in done)
    by_rid = {sp.rid: sp for sp in specs}
    assert all(r.num_output == by_rid[r.rid].output_len for r in done)
    assert all(r.pages == [] for r in done)
    free, used, cached = s.page_counts()
    assert used == 0 and free + cached == cfg.num_pages
    if memory == "reserve":
        assert s.num_preemptions == 0
