"""Property-based: random add / schedule / complete / abort sequences keep every invariant."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twinserve.core.config import SchedulerConfig
from twinserve.core.request import Req, ReqState
from twinserve.core.sampling import SamplingParams
from twinserve.policies import build_scheduler

EOS = 3

_add = st.tuples(st.just("add"), st.integers(0, 3), st.integers(1, 40), st.integers(1, 24),
                 st.booleans())
ops = st.lists(
    st.one_of(
        _add, _add, _add,
        st.tuples(st.just("step"), st.integers(0, 5)),
        st.tuples(st.just("overlap"), st.integers(0, 5)),
        st.tuples(st.just("abort"), st.integers(0, 30)),
    ),
    min_size=20,
    max_size=80,
)

configs = st.tuples(
    st.sampled_from(["fcfs", "sjf", "lpm", "priority", "vtc", "makespan"]),
    st.sampled_from(["on_demand", "reserve"]),
    st.sampled_from(["radix", "none"]),
    st.booleans(),  # mixed
    st.booleans(),  # chunked
    st.integers(6, 30),  # pages
)


def _prompt(group: int, length: int, rid: int) -> np.ndarray:
    # groups share a 16-token prefix so the radix cache gets real hits
    base = np.arange(100 * (group + 1), 100 * (group + 1) + 16, dtype=np.int32)
    tail = np.full(max(0, length - 16), 5000 + rid, dtype=np.int32)
    return np.concatenate([base, tail])[:length]


def _finish_clean(reqs: list[Req]) -> None:
    for r in reqs:
        if r.done and r.inflight == 0:
            assert r.pages == [] and r.cache_node is None, f"{r} still holds pages"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs, ops, st.randoms(use_true_random=False))
def test_random_operation_sequences_keep_invariants(cfg, operations, rnd) -> None:
    scheduling, memory, cache, mixed, chunked, pages = cfg
    config = SchedulerConfig(num_pages=pages, page_size=4, max_num_batched_tokens=48, chunk_size=16,
                             max_running=6, mixed=mixed, chunked_prefill=chunked, max_model_len=160)
    kwargs = {"target_tokens": 8} if scheduling == "makespan" else None  # under the budget of 48: it binds
    s = build_scheduler(config, scheduling, memory, cache, eos_token_ids=(EOS,), checked=True,
                        scheduling_kwargs=kwargs)
    reqs: list[Req] = []
    inflight: list = []
    now = 0.0

    def complete_one() -> None:
        b = inflight.pop(0)
        toks = [rnd.choice([EOS, 7, 8, 9, 10]) for _ in b.reqs]
        s.complete(b, toks, now)

    for op in operations:
        now += 1.0
        if op[0] == "add":
            _, group, length, max_tokens, ignore = op
            r = Req(len(reqs), _prompt(group, length, len(reqs)),
                    SamplingParams(max_tokens=max_tokens, ignore_eos=ignore), arrival=now,
                    priority=group, tenant=f"t{group}")
            try:
                s.add(r)
            except ValueError:
                continue
            reqs.append(r)
        elif op[0] in ("step", "overlap"):
            for _ in range(op[1] + 1):
                b = s.schedule(now)
                if b is not None:
                    inflight.append(b)
                depth = 2 if op[0] == "overlap" else 1
                while len(inflight) >= depth or (b is None and inflight):
                    complete_one()
                s.check_invariants()
        else:
            if reqs:
                s.abort(reqs[op[1] % len(reqs)].rid, now)
        s.check_invariants()
        _finish_clean(reqs)
    # drain: everything ends, nothing leaks
    for _ in range(2000):
        if not s.has_work and not inflight:
            break
        now += 1.0
        b = s.schedule(now)
        if b is not None:
            inflight.append(b)
        if inflight:
            complete_one()
        s.check_invariants()
    assert not s.has_work, (cfg, [(r, r.pending, r.inflight, r.num_preemptions) for r in s.running + s.waiting], inflight)
    free, used, cached = s.page_counts()
    assert used == 0 and free + cached == pages
    for r in reqs:
        assert r.state in (ReqState.FINISHED, ReqState.ABORTED)
        assert r.pages == [] and r.cache_node is None
        if r.state is ReqState.FINISHED:
            assert 1 <= r.num_output <= r.params.max_tokens
            assert (r.output_ids >= 0).all()
            assert r.t_first_token is not None and r.t_finish is not None
