"""`makespan`: longest outputs first, and a step budget that spreads the prefill over the run."""

from __future__ import annotations

from helpers_core import make_req, make_sched, step

from twinserve.policies import SCHEDULING
from twinserve.policies.cache import NoCache
from twinserve.policies.scheduling.makespan import outputs_left, prefill_left


def rids(reqs) -> list[int]:
    return [r.rid for r in reqs]


def test_orders_by_outputs_left_then_arrival() -> None:
    reqs = [make_req(0, 4, max_tokens=5, arrival=0.0), make_req(1, 4, max_tokens=50, arrival=2.0),
            make_req(2, 4, max_tokens=50, arrival=1.0), make_req(3, 4, max_tokens=20, arrival=0.5)]
    assert rids(SCHEDULING.create("makespan").order(reqs, 3.0, NoCache(4))) == [2, 1, 3, 0]


def test_victim_has_the_fewest_outputs_left() -> None:
    pol = SCHEDULING.create("makespan")
    a, b, c = make_req(0, 4, max_tokens=30), make_req(1, 4, max_tokens=10), make_req(2, 4, max_tokens=10, arrival=1.0)
    assert pol.victim([a, b, c], 2.0) is c  # 10 left for both b and c: the later arrival


def test_prefill_left_counts_prompt_tokens_before_the_next_decode() -> None:
    s = make_sched("makespan", max_num_batched_tokens=8, chunk_size=8)
    r = make_req(0, 20, max_tokens=3)
    s.add(r)
    assert prefill_left(r) == 20 and outputs_left(r) == 3
    step(s, 0.0)  # a chunk of 8
    assert prefill_left(r) == 12
    step(s, 1.0)
    step(s, 2.0)  # the last 4 prompt tokens and the first output
    assert prefill_left(r) == 0 and outputs_left(r) == 2


def test_budget_is_the_configured_one_without_waiting_prompts() -> None:
    pol = SCHEDULING.create("makespan", target_tokens=16)
    s = make_sched("makespan", max_num_batched_tokens=64)
    s.add(make_req(0, 8, max_tokens=40))
    step(s, 0.0)
    assert pol.step_budget(s.waiting, s.running, 64) == 64  # one decode, nothing to prefill


def test_budget_spreads_prefill_over_the_longest_request() -> None:
    pol = SCHEDULING.create("makespan", target_tokens=4)
    # 3 waiting prompts of 30 tokens; the longest wants 50 outputs, the shortest waiting 20:
    # 90 tokens over 50 - 20 = 30 steps, 3 a step, under the floor of 4
    waiting = [make_req(0, 30, max_tokens=50), make_req(1, 30, max_tokens=20), make_req(2, 30, max_tokens=30)]
    assert pol.step_budget(waiting, [], 1000) == 4
    waiting.append(make_req(3, 300, max_tokens=25))  # 390 tokens over 30 steps: 13 a step
    assert pol.step_budget(waiting, [], 1000) == 13
    assert pol.step_budget(waiting, [], 10) == 10  # never over the configured budget


def test_steps_hold_target_tokens_while_prompts_wait() -> None:
    s = make_sched("makespan", max_num_batched_tokens=256, chunk_size=256, max_running=16, num_pages=256)
    s.policy.target_tokens = 24
    for i in range(6):
        s.add(make_req(i, 40, max_tokens=10 + 5 * i))
    shapes = []
    firsts = []
    t = 0.0
    while s.has_work:
        shape, _ = step(s, t)
        shapes.append(sum(n for _, n in shape))
        firsts.append(shape[0][0])
        t += 1
    # the longest request goes first and every step is full (24 tokens) until the prompts are in
    assert firsts[0] == 5
    assert s.get(5) is None  # finished
    prefill_steps = -(-240 // 24)
    assert all(n == 24 for n in shapes[: prefill_steps - 1])
    assert len(shapes) <= 45 + 2  # the longest request's outputs, plus its own prefill steps


def test_budget_ignored_without_chunked_prefill() -> None:
    s = make_sched("makespan", max_num_batched_tokens=64, chunk_size=64, chunked_prefill=False)
    for i in range(3):
        s.add(make_req(i, 40, max_tokens=5))
    shape, _ = step(s, 0.0)
    assert sum(n for _, n in shape) == 40  # a whole prompt, although the policy's floor is 320


def test_budget_binds_again_when_a_request_arrives_after_the_queue_emptied() -> None:
    pol = SCHEDULING.create("makespan", target_tokens=16)
    running = [make_req(0, 8, max_tokens=40)]
    running[0].num_computed = 8
    running[0].append_placeholder()  # decoding
    assert pol.step_budget([], running, 64) == 64
    assert pol.step_budget([], running, 64) == 64  # settled: no scan
    late = make_req(1, 200, max_tokens=10)
    assert pol.step_budget([late], running, 64) == 16  # 200 tokens over 39 - 10 steps: 7 a step, floor 16
