"""`makespan`: finish a batch of requests known up front as early as possible (offline runs)."""

from __future__ import annotations

from typing import Sequence

from twinserve.core.request import Req
from twinserve.policies.cache.base import PrefixCache
from twinserve.policies.registries import SCHEDULING
from twinserve.policies.scheduling.base import SchedulingPolicy


def outputs_left(r: Req) -> int:
    """Output tokens ``r`` may still produce (``max_tokens`` minus those it has)."""
    return r.params.max_tokens - r.num_output


def prefill_left(r: Req) -> int:
    """Tokens ``r`` must compute before its next decode (0 for a decode or a launched step)."""
    n = r.remaining
    return n if n > 1 or r.num_computed < r.prompt_len else 0


# the step size makespan holds while prompts wait (``target_tokens``); the offline `LLM` sizes its
# whole-step token graphs to it
TARGET_TOKENS = 320


@SCHEDULING.register("makespan")
class Makespan(SchedulingPolicy):
    """Longest work first, with steps held near a fixed size while prompts wait.

    A run of requests that all arrive at once ends when its longest request ends: no schedule
    takes fewer steps than that request's output length. The rules that keep every one of
    those steps busy:

    - ``order``: the waiting requests with the most output tokens left come first (ties by
      arrival, then id), so the requests admitted last are the short ones, and they end by the
      time the long ones do (longest-processing-time-first, the classic makespan rule).
    - ``step_budget``: while prompt tokens wait to be computed, a step's token budget is
      ``max(target_tokens, decodes + ceil(P / max(1, H - h)))``, capped by the configured
      budget: ``P`` prompt tokens still to compute, ``H`` the most output tokens any request has
      left (the fewest steps the run still takes), ``h`` the fewest any waiting request has left.
      So the prefill is spread over the decode steps and ends in time for the last admitted
      request to finish with the longest one, and no step drops below ``target_tokens`` tokens,
      the size below which a step's dense layers cost the weight reads whatever they compute.
      Without waiting prompt tokens the configured budget holds.
    - ``victim``: the running request with the fewest output tokens left (ties: latest arrival).

    ``target_tokens`` (default 320) is the best of 256, 320 and 384 for llama3-8b and qwen3-0.6b
    on their H200 calibrations (docs/side_by_side.md). Each step reads every waiting and running
    request once: meant for offline batches, not for queues of thousands.
    """

    name = "makespan"
    sets_budget = True

    def __init__(self, target_tokens: int = TARGET_TOKENS) -> None:
        if target_tokens < 1:
            raise ValueError(f"makespan: target_tokens must be >= 1, got {target_tokens}")
        self.target_tokens = int(target_tokens)
        # no prompt token waited at the last call and none was queued: until a request enters the
        # queue (an arrival or a preemption) none can wait, so the configured budget holds
        self._settled = False

    def order(self, waiting: Sequence[Req], now: float, cache: PrefixCache) -> list[Req]:
        return sorted(waiting, key=lambda r: (-outputs_left(r), r.arrival, r.rid))

    def victim(self, candidates: Sequence[Req], now: float) -> Req:
        return min(candidates, key=lambda r: (outputs_left(r), -r.arrival, -r.rid))

    def step_budget(self, waiting: Sequence[Req], running: Sequence[Req], budget: int) -> int:
        if not waiting and self._settled:
            return budget
        prompt = sum(r.remaining for r in waiting)
        lefts = [outputs_left(r) for r in waiting]
        shortest = min(lefts, default=0)
        horizon = max(lefts, default=0)
        prefills = [p for p in map(prefill_left, running) if p]
        prompt += sum(prefills)
        self._settled = not waiting and prompt == 0
        if prompt == 0:
            return budget
        horizon = max(horizon, max(map(outputs_left, running), default=0))
        decodes = len(running) - len(prefills)
        quota = -(-prompt // max(1, horizon - shortest))
        return min(budget, max(self.target_tokens, decodes + quota))
