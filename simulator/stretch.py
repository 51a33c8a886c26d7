"""`DecodeStretch`: several identical decode-only steps of a `Scheduler`, applied at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np

from twinserve.core.batch import BatchFeatures
from twinserve.core.config import SchedulerConfig
from twinserve.core.contracts import CacheLike, SchedulingLike
from twinserve.core.graph_plan import GraphPlan
from twinserve.core.request import Req


class StretchScheduler(Protocol):
    """The part of `twinserve.core.scheduler.Scheduler` a stretch reads and moves."""

    config: SchedulerConfig
    eos: frozenset[int]
    policy: SchedulingLike
    cache: CacheLike
    waiting: list[Req]
    running: list[Req]

    @property
    def step(self) -> int: ...
    @property
    def num_inflight(self) -> int: ...
    def prune_ended(self) -> None: ...
    def page_counts(self) -> tuple[int, int, int]: ...
    def take_pages(self, n: int) -> list[int] | None: ...
    def shared_context(self, nodes: Sequence[Any], cached: int) -> int: ...
    def count_steps(self, k: int) -> int: ...
    def check_invariants(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StretchColumns:
    """Per-step counts of an applied stretch (arrays of length ``k``); the queue lengths are
    constant over it."""

    first_step: int
    k: int
    num_waiting: int
    num_running: int
    free_pages: np.ndarray
    used_pages: np.ndarray
    cached_pages: np.ndarray


class DecodeStretch:
    """The next ``k`` steps of a scheduler, certain to be the same decode-only batch with no
    finish, admission or preemption (`find` says when that holds).

    Invariant: it describes the scheduler as it was when found; it is valid until the
    scheduler's state moves (``add``, ``schedule``, ``complete``, ``abort``) and may be applied
    once, for at most ``k`` steps.
    """

    def __init__(self, sched: StretchScheduler, k: int, computed: np.ndarray, pages: np.ndarray) -> None:
        self.sched = sched
        self.k = k
        self._computed = computed  # num_computed of each running request
        self._pages = pages  # pages held by each running request
        self._applied = False

    @classmethod
    def find(cls, sched: StretchScheduler, limit: int) -> DecodeStretch | None:
        """The longest stretch of at most ``limit`` steps, or None when there is none.

        One exists when no batch is in flight, every running request is decoding with
        ``ignore_eos`` (or no EOS ids) and no stop ids, nothing can be admitted, and the pages
        those steps need are free or evictable from the prefix cache (no preemption). Assumes
        no arrival during the stretch (the caller's ``limit``).
        """
        sched.prune_ended()
        if limit < 1 or sched.num_inflight:
            return None
        running = sched.running
        b = len(running)
        cfg = sched.config
        if b == 0 or b > cfg.max_num_batched_tokens:
            return None
        if sched.waiting and b < cfg.max_running and b < cfg.max_num_batched_tokens:
            return None
        eos = bool(sched.eos)
        left = limit + 1
        for r in running:
            if r.num_tokens - r.num_computed != 1 or r.num_output == 0:
                return None
            p = r.params
            if (eos and not p.ignore_eos) or p.stop_token_ids:
                return None
            lft = p.max_tokens - r.num_output
            if lft < left:
                left = lft
        k = min(limit, left - 1)
        if k < 1:
            return None
        c = np.fromiter((r.num_computed for r in running), dtype=np.int64, count=b)
        npg = np.fromiter((len(r.pages) for r in running), dtype=np.int64, count=b)
        free, _, _ = sched.page_counts()
        avail = free + sched.cache.evictable_pages
        ps = cfg.page_size

        def pages_needed(steps: int) -> int:
            return int(np.maximum(0, -(-(c + steps) // ps) - npg).sum())

        if pages_needed(k) > avail:
            lo, hi = 0, k  # pages_needed(lo) <= avail < pages_needed(hi)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if pages_needed(mid) <= avail:
                    lo = mid
                else:
                    hi = mid
            k = lo
        return cls(sched, k, c, npg) if k >= 1 else None

    def features(self, k: int, plan: GraphPlan) -> list[BatchFeatures]:
        """Features of each of the first ``k`` steps, as ``plan`` runs them. Only the first step
        can hold first decodes (`BatchFeatures.first_decodes`): the requests whose prefill ended
        with the step before the stretch."""
        sched, c = self.sched, self._computed
        first = sum(1 for r in sched.running if r.num_output == 1)
        b = len(c)
        total = int(c.sum())
        top = int(c.max())
        padded = plan.padded_decodes(b)
        rows, eager, replay, wide = plan.step_shape(b, b, b)
        cached = [r for r in sched.running if r.cache_node is not None]
        shared = sched.shared_context([r.cache_node for r in cached], sum(r.num_cache_pages for r in cached))
        return [
            BatchFeatures(num_seqs=b, num_decodes=b, num_prefills=0, new_tokens=b, prefill_tokens=0,
                          decode_ctx=total + b * j, prefill_ctx=0, prefill_attn=0,
                          padded_decodes=padded, max_ctx=top + j,
                          decode_unique_ctx=total + b * j - shared, padded_tokens=rows,
                          eager_step=eager, graph_replay=replay, wide_tiles=wide,
                          first_decodes=first if j == 1 else 0)
            for j in range(1, k + 1)
        ]

    def apply(self, ends: np.ndarray) -> StretchColumns:
        """Apply ``len(ends)`` steps at once, exactly as that many ``schedule()``/``complete()``
        pairs would: the same pages are taken (cached prefixes evicted in the same LRU order when
        the free list runs dry), token values come from ``output_hint`` (else 0) and each token
        is stamped with its step's end. Returns the per-step queue and page counts."""
        k = len(ends)
        if self._applied or not 1 <= k <= self.k:
            raise RuntimeError(f"a stretch of {self.k} steps applied twice or for {k} steps")
        self._applied = True
        sched = self.sched
        running = sched.running
        ps = sched.config.page_size
        # page needs in the order step-by-step makes them: by step, then running order
        events: list[tuple[int, int]] = []
        for idx, r in enumerate(running):
            c = r.num_computed
            for q in range(len(r.pages), -(-(c + k) // ps)):
                events.append((q * ps - c + 1, idx))  # page q is first written at step q*ps-c+1
        per_step = np.zeros(k + 1, dtype=np.int64)
        free0, _, cached0 = sched.page_counts()
        if events:
            events.sort()
            pages = sched.take_pages(len(events))
            if pages is None:
                raise RuntimeError(f"a stretch of {k} steps needs {len(events)} pages that are not there")
            for (j, idx), page in zip(events, pages):
                running[idx].pages.append(page)
                per_step[j] += 1
        policy = sched.policy
        on_compute = policy.on_compute if policy.tracks_compute else None
        for r in running:
            first = r.num_output
            hint = r.output_hint
            if hint is not None and first + k <= len(hint):
                vals: np.ndarray | int = hint[first : first + k]
            elif hint is not None:
                vals = np.array([int(hint[p]) if p < len(hint) else 0 for p in range(first, first + k)],
                                dtype=np.int32)
            else:
                vals = 0
            r.append_outputs(vals, ends)
            r.num_computed += k
            if on_compute is not None:
                for _ in range(k):
                    on_compute(r, 0, 1)
        # free pages shrink by each step's allocations; once none are free, every allocation
        # evicts one cached page instead
        alloc_cum = np.cumsum(per_step[1:])
        free = np.maximum(free0 - alloc_cum, 0)
        evicted = np.maximum(alloc_cum - free0, 0)
        cached = cached0 - evicted
        total = sched.config.num_pages
        first_step = sched.count_steps(k)
        return StretchColumns(first_step, k, len(sched.waiting), len(running), free,
                              total - free - cached, cached)
