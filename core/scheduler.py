"""`Scheduler`: the one loop both backends drive (see DESIGN.md, "The one loop")."""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from twinserve.core.batch import Batch
from twinserve.core.config import SchedulerConfig
from twinserve.core.contracts import AllocatorLike, CacheLike, MemoryLike, SchedulingLike
from twinserve.core.graph_plan import GraphPlan
from twinserve.core.records import StepRecord
from twinserve.core.request import Req, ReqState
from twinserve.core.spec_step import SpecDecoding

_RUNNING = ReqState.RUNNING
_WAITING = ReqState.WAITING
_FINISHED = ReqState.FINISHED


class Scheduler:
    """Owns the waiting queue, the running set and the three policies; forms one batch per step.

    Protocol: ``add`` requests as they arrive; ``schedule(now)`` returns the next ``Batch`` (or
    None) and launches it: lengths and pages advance at once and every request that will sample a
    token gets a placeholder output; ``complete(batch, tokens, now)`` delivers the sampled values,
    applies stop rules and releases finished requests. ``schedule`` may be called again before the
    previous batch completes (overlap scheduling); batches must complete in launch order.

    Batch formation per step, under the token budget (the configured one, or with chunked
    prefill the one the scheduling policy's ``step_budget`` sets): running requests first, in
    admission order (one token per decode, a chunk per unfinished prefill), then waiting
    requests in the order the scheduling policy gives, until one does not fit (head-of-line
    blocking). In prefill-first mode
    (``mixed=False``) a step holds only prefill work when there is any, else only decodes.
    When a running request needs a page and none is free (even after evicting unlocked cached
    prefixes), a victim chosen by the scheduling policy among the running requests not yet served
    in this step (the needy request included) is preempted by recompute: its computed full pages go to the prefix cache, the
    rest are freed, and it waits again (it is not re-admitted in the same step).

    Invariants (``check_invariants``): every page is exactly one of free, owned by a live request,
    or owned by the prefix cache, so free + used + cached == num_pages; a request's cached prefix
    stays locked while it holds it; a FINISHED or ABORTED request holds nothing once no launched
    batch still contains it.

    Besides ``schedule``/``complete``, a backend that applies several steps at once (the
    simulator's fast-forward) uses only ``step``, ``count_steps``, ``num_inflight``,
    ``prune_ended``, ``take_pages``, ``shared_context``, ``page_counts`` and the public attributes;
    it must leave the invariants exactly as the same steps run one by one would.
    """

    def __init__(
        self,
        config: SchedulerConfig,
        policy: SchedulingLike,
        memory: MemoryLike,
        cache: CacheLike,
        allocator: AllocatorLike,
        eos_token_ids: Iterable[int] = (),
    ) -> None:
        config.validate()
        if allocator.num_pages != config.num_pages:
            raise ValueError("allocator size differs from SchedulerConfig.num_pages")
        if cache.page_size != config.page_size:
            raise ValueError("cache page size differs from SchedulerConfig.page_size")
        self.config = config
        self.policy = policy
        self.memory = memory
        self.cache = cache
        self.allocator = allocator
        self.eos = frozenset(int(t) for t in eos_token_ids)
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self._live: dict[int, Req] = {}
        self._step = 0
        self._inflight = 0
        self._dirty = False
        self._last_preempted = 0
        self.num_preemptions = 0
        self.spec: SpecDecoding | None = None  # speculative decoding (core/spec_step.py); None: off

    # ---- queue -----------------------------------------------------------------------------
    def add(self, req: Req) -> None:
        """Queue ``req`` (ValueError as `check` says)."""
        self.check(req)
        req.state = _WAITING
        self.waiting.append(req)
        self._live[req.rid] = req
        self.policy.on_add(req, req.arrival)

    def check(self, req: Req) -> None:
        """Raise the ValueError that ``add(req)`` would raise (too long for the model or the pool,
        over the token budget without chunked prefill, a duplicate id); queue nothing."""
        cfg = self.config
        total = req.prompt_len + req.params.max_tokens
        if total > cfg.max_model_len:
            raise ValueError(f"request {req.rid}: prompt ({req.prompt_len}) + max_tokens "
                             f"({req.params.max_tokens}) = {total} exceeds max_model_len {cfg.max_model_len}")
        if -(-total // cfg.page_size) > cfg.num_pages:
            raise ValueError(f"request {req.rid}: {total} tokens can never fit in "
                             f"{cfg.num_pages} pages of {cfg.page_size}")
        if not cfg.chunked_prefill and req.prompt_len > cfg.max_num_batched_tokens:
            raise ValueError(f"request {req.rid}: prompt of {req.prompt_len} tokens exceeds the token "
                             f"budget {cfg.max_num_batched_tokens} and chunked prefill is off")
        if req.rid in self._live:
            raise ValueError(f"request id {req.rid} is already in the scheduler")

    def abort(self, rid: int, now: float | None = None) -> Req | None:
        """Abort a request; its pages return at once, or when its last launched batch completes."""
        req = self._live.get(rid)
        if req is None or req.done:
            return None
        req.state = ReqState.ABORTED
        req.finish_reason = "abort"
        req.t_finish = now
        self._dirty = True
        if req.inflight == 0:
            self._release(req, insert=False)
        return req

    @property
    def num_waiting(self) -> int:
        self.prune_ended()
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        self.prune_ended()
        return len(self.running)

    @property
    def has_work(self) -> bool:
        self.prune_ended()
        return bool(self.waiting or self.running or self._inflight)

    @property
    def step(self) -> int:
        """Id of the last launched batch (0 before the first); ids count up by one."""
        return self._step

    @property
    def num_inflight(self) -> int:
        """Launched batches whose ``complete()`` is outstanding."""
        return self._inflight

    def get(self, rid: int) -> Req | None:
        return self._live.get(rid)

    def page_counts(self) -> tuple[int, int, int]:
        free = self.allocator.free_count
        cached = self.cache.num_pages
        return free, self.config.num_pages - free - cached, cached

    # ---- one step --------------------------------------------------------------------------
    def schedule(self, now: float) -> Batch | None:
        self.prune_ended()
        if not self.running and not self.waiting:
            return None
        entries: list[tuple[Req, int, bool]] = []
        preempted: set[int] = set()
        budget = self.config.max_num_batched_tokens
        if self.policy.sets_budget and self.config.chunked_prefill:  # whole prompts need the full budget
            budget = self.policy.step_budget(self.waiting, self.running, budget)
        if self.spec is not None:
            self.spec.prepare_step(self.running)
        if self.config.mixed:
            budget = self._serve_running(now, entries, budget, preempted, True, True)
            self._admit(now, entries, budget, preempted)
        else:
            left = self._serve_running(now, entries, budget, preempted, False, True)
            self._admit(now, entries, left, preempted)
            if not entries:
                self._serve_running(now, entries, budget, preempted, True, False)
        self._last_preempted = len(preempted)
        if not entries:
            return None
        return self._launch(entries)

    def _launch(self, entries: list[tuple[Req, int, bool]]) -> Batch:
        self._step += 1
        on_compute = self.policy.on_compute if self.policy.tracks_compute else None
        starts: list[int] = []
        news: list[int] = []
        emits: list[bool] = []
        out_pos: list[int] = []
        decs: list[bool] = []
        nodes: list = []  # the decodes' cached prefixes, for the pages they read in common
        cached = 0
        drafts: list[int] | None = None
        for r, n, dec in entries:
            s = r.num_computed
            if dec and n > 1:  # a speculative decode: verify its n - 1 draft tokens
                if drafts is None:
                    drafts = [0] * len(starts)
                self.spec.stage(r, n - 1)
                drafts.append(n - 1)
                dec = False
            elif drafts is not None:
                drafts.append(0)
            starts.append(s)
            news.append(n)
            decs.append(dec)
            if dec and r.cache_node is not None:
                nodes.append(r.cache_node)
                cached += r.num_cache_pages
            r.num_computed = s + n
            r.inflight += 1
            if s + n == r.num_tokens:
                out_pos.append(r.append_placeholder())
                r.pending += 1
                emits.append(True)
                if on_compute is not None:
                    on_compute(r, 0 if dec else n, 1)
            else:
                out_pos.append(-1)
                emits.append(False)
                if on_compute is not None:
                    on_compute(r, n, 0)
        self._inflight += 1
        return Batch(self._step, [e[0] for e in entries], starts, news, emits, out_pos, decs,
                     self.shared_context(nodes, cached), drafts)

    def shared_context(self, nodes: Sequence[object], cached: int) -> int:
        """Tokens of the cached-prefix pages ``nodes`` (holding ``cached`` pages in all) that
        more than one of their requests reads, counted once per extra reader."""
        if len(nodes) < 2:
            return 0
        return (cached - self.cache.distinct_path_pages(nodes)) * self.config.page_size

    def _prefill_chunk(self, rem: int, budget: int, batch_has_work: bool) -> int:
        """Tokens of a ``rem``-token prefill this step: a chunk under chunked prefill, else all of
        it if it fits the budget (or runs alone: a recomputation may outgrow the budget), else 0."""
        cfg = self.config
        if cfg.chunked_prefill:
            return min(rem, cfg.chunk_size, budget)
        if rem <= budget or not batch_has_work:
            return rem
        return 0

    def _serve_running(self, now: float, entries: list[tuple[Req, int, bool]], budget: int,
                       preempted: set[int], decodes: bool, prefills: bool) -> int:
        cfg = self.config
        ps = cfg.page_size
        running = self.running
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            rem = r.num_tokens - r.num_computed
            if rem <= 0 or r.num_tokens - r.prompt_len >= r.params.max_tokens:
                i += 1  # its last token is sampled; only its complete() is outstanding
                continue
            dec = rem == 1 and r.num_tokens > r.prompt_len
            if (dec and not decodes) or (not dec and not prefills):
                i += 1
                continue
            if dec:
                n = 1 if self.spec is None else 1 + self.spec.draft(r, budget)
            else:
                n = self._prefill_chunk(rem, budget, bool(entries))
                if n == 0:
                    i += 1
                    continue
            if -(-(r.num_computed + n) // ps) > len(r.pages) and not self._grow(r, r.num_computed + n):
                if not self.memory.preempts:
                    raise RuntimeError("out of KV pages under a reserving memory policy")
                served = {id(e[0]) for e in entries}
                victim_is_self = False
                while True:
                    # any running request not served in this step may be the victim, r included
                    v = self.policy.victim([x for x in running if id(x) not in served], now)
                    vi = running.index(v)
                    self._preempt(v)
                    preempted.add(v.rid)
                    if v is r:
                        victim_is_self = True
                        break
                    if vi < i:
                        i -= 1
                    if self._grow(r, r.num_computed + n):
                        break
                if victim_is_self:
                    continue  # running[i] is now the next request
            entries.append((r, n, dec))
            budget -= n
            i += 1
        return budget

    def _admit(self, now: float, entries: list[tuple[Req, int, bool]], budget: int,
               preempted: set[int]) -> None:
        if not self.waiting or budget <= 0:
            return
        cfg = self.config
        cache = self.cache
        alloc = self.allocator
        ps = cfg.page_size
        admitted = False
        for r in self.policy.order(self.waiting, now, cache):
            if len(self.running) >= cfg.max_running or budget <= 0:
                break
            if r.pending or r.rid in preempted:
                continue
            total = r.num_tokens
            # a request that wants its prompt's logprobs computes the whole prompt
            m = cache.match(r.tokens[: total - 1] if r.params.prompt_logprobs is None else r.tokens[:0])
            start = m.num_tokens
            rem = total - start
            n = self._prefill_chunk(rem, budget, bool(entries))
            if n == 0:
                break
            need = self.memory.admission_pages(r, start, n, ps) - len(m.pages)
            if m.node is not None:
                cache.lock(m.node)
            avail = alloc.free_count + cache.evictable_pages
            # with nothing running there is nothing to keep headroom for: the watermark is waived
            if need > avail or (self.running and not self.memory.can_admit(need, avail, alloc.num_pages)):
                if m.node is not None:
                    cache.unlock(m.node)
                break
            r.pages = list(m.pages)
            if need > 0:
                r.pages.extend(self.take_pages(need))  # cannot fail: need <= avail
            r.num_cache_pages = len(m.pages)
            r.cache_node = m.node
            r.num_computed = start
            r.num_cached = start
            if start > r.max_cached:
                r.max_cached = start
            cache.stats.queried_tokens += total
            cache.stats.hit_tokens += start
            r.state = _RUNNING
            if r.t_scheduled is None:
                r.t_scheduled = now
            self.running.append(r)
            entries.append((r, n, False))
            budget -= n
            admitted = True
        if admitted:
            self.waiting = [w for w in self.waiting if w.state is _WAITING]

    def complete(self, batch: Batch, tokens: Sequence[int] | np.ndarray, now: float,
                 verified: Sequence[np.ndarray | None] | None = None) -> list[Req]:
        """Deliver a launched batch's sampled tokens; returns the requests released by this call.
        ``verified[i]``: the target's tokens at the ``1 + d`` positions of a speculative row
        (``batch.drafts[i] = d > 0``; `SpecDecoding.accept` settles it)."""
        if len(tokens) != len(batch.reqs):
            raise ValueError(f"complete: {len(tokens)} tokens for a batch of {len(batch.reqs)}")
        self._inflight -= 1
        eos = self.eos
        toks = tokens.tolist() if isinstance(tokens, np.ndarray) else tokens
        ended: list[Req] = []
        emits = batch.emits
        is_decode = batch.is_decode
        out_pos = batch.out_pos
        live = self._live
        drafts = batch.drafts
        if drafts is not None:
            self.spec.settle_step(batch.step, sum(drafts))
        for i, r in enumerate(batch.reqs):
            r.inflight -= 1
            if drafts is not None and drafts[i] and emits[i]:
                r.pending -= 1
                if r.state is _RUNNING:
                    self.spec.accept(self, r, batch.starts[i], drafts[i], out_pos[i], verified[i], now)
            elif emits[i]:
                r.pending -= 1
                pos = out_pos[i]
                if (r.state is _RUNNING or r.state is _WAITING) and pos < r.num_tokens - r.prompt_len:
                    tok = int(toks[i])
                    r.set_output(pos, tok, now)
                    p = r.params
                    if pos + 1 >= p.max_tokens:
                        self._finish(r, "length", pos + 1, now)
                    elif (tok in eos and not p.ignore_eos) or tok in p.stop_token_ids:
                        self._finish(r, "stop", pos + 1, now)
            if not is_decode[i] and r.state is _RUNNING:
                # a prefill chunk's full pages become shareable as soon as their KV exists
                self._cache_prefix(r, min(batch.starts[i] + batch.new_tokens[i], r.num_computed))
            if r.inflight == 0 and r.state is not _RUNNING and r.state is not _WAITING and r.rid in live:
                self._release(r, insert=r.state is _FINISHED)
                ended.append(r)
        return ended

    # ---- pages -----------------------------------------------------------------------------
    def take_pages(self, n: int) -> list[int] | None:
        """``n`` pages off the free list, evicting unlocked cached prefixes (LRU) when it runs
        dry; None when free + evictable pages fall short. The caller owns the pages."""
        alloc = self.allocator
        short = n - alloc.free_count
        if short > 0:
            if short > self.cache.evictable_pages:
                return None
            alloc.free(self.cache.evict(short))
            if alloc.free_count < n:
                return None
        return alloc.alloc(n)

    def _grow(self, r: Req, tokens: int) -> bool:
        need = -(-tokens // self.config.page_size) - len(r.pages)
        if need <= 0:
            return True
        pages = self.take_pages(need)
        if pages is None:
            return False
        r.pages.extend(pages)
        return True

    def _known_computed(self, r: Req) -> int:
        """Tokens whose KV is computed and whose values are known (no placeholder)."""
        n = min(r.num_computed, r.num_tokens)
        if n > r.prompt_len:
            holes = np.flatnonzero(r.tokens[r.prompt_len : n] < 0)
            if holes.size:
                n = r.prompt_len + int(holes[0])
        return n

    def _cache_prefix(self, r: Req, n_tokens: int) -> None:
        """Offer the request's full pages up to ``n_tokens`` to the prefix cache."""
        ps = self.config.page_size
        npages = min(n_tokens, r.num_tokens) // ps
        if npages <= r.num_cache_pages:
            return
        res = self.cache.insert(r.tokens[: npages * ps], r.pages[:npages])
        tree = res.pages
        if len(tree) < npages:
            return  # the cache kept nothing: the pages stay private
        pages = r.pages
        dup: list[int] = []
        for i in range(r.num_cache_pages, npages):
            t = tree[i]
            if t != pages[i]:
                dup.append(pages[i])
                pages[i] = t
        if dup:
            self.allocator.free(dup)
        self.cache.lock(res.node)
        if r.cache_node is not None:
            self.cache.unlock(r.cache_node)
        r.cache_node = res.node
        r.num_cache_pages = npages

    def _drop_pages(self, r: Req) -> None:
        if r.cache_node is not None:
            self.cache.unlock(r.cache_node)
        self.allocator.free(r.pages[r.num_cache_pages:])
        r.pages = []
        r.num_cache_pages = 0
        r.cache_node = None

    def _release(self, r: Req, insert: bool) -> None:
        if insert:
            self._cache_prefix(r, self._known_computed(r))
        self._drop_pages(r)
        del self._live[r.rid]
        self.policy.on_exit(r)

    def _preempt(self, v: Req) -> None:
        self._cache_prefix(v, self._known_computed(v))
        self._drop_pages(v)
        v.num_computed = 0
        v.num_cached = 0
        v.state = _WAITING
        v.num_preemptions += 1
        self.num_preemptions += 1
        self.running.remove(v)
        self.waiting.append(v)

    def _finish(self, r: Req, reason: str, n_out: int, now: float) -> None:
        r.truncate_outputs(n_out)
        r.state = _FINISHED
        r.finish_reason = reason
        r.t_finish = now
        self._dirty = True

    def prune_ended(self) -> None:
        """Drop finished and aborted requests from ``waiting`` and ``running`` (kept there
        lazily until a reader needs the lists exact)."""
        if self._dirty:
            self.running = [r for r in self.running if r.state is _RUNNING]
            self.waiting = [r for r in self.waiting if r.state is _WAITING]
            self._dirty = False

    # ---- records ---------------------------------------------------------------------------
    def record(self, batch: Batch, plan: GraphPlan, start: float, duration: float, cpu_s: float = 0.0,
               replica: int = 0) -> StepRecord:
        """The step record of ``batch`` as the backend's ``plan`` runs it; call it right after
        ``schedule()`` returned it."""
        free, used, cached = self.page_counts()
        return StepRecord(batch.step, start, duration, batch.features(plan), len(self.waiting),
                          len(self.running), free, used, cached, self._last_preempted, cpu_s, replica)

    def count_steps(self, k: int) -> int:
        """Account for ``k`` batches that ran outside ``schedule()``/``complete()`` (a
        simulator's fast-forward); returns the id of the first of them."""
        first = self._step + 1
        self._step += k
        return first

    # ---- checks ----------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raise AssertionError if any page is lost, shared or leaked, or a lock is broken."""
        ps = self.config.page_size
        free = self.allocator.free_pages()
        cached = self.cache.all_pages()
        private: list[int] = []
        for r in self._live.values():
            private.extend(r.pages[r.num_cache_pages:])
            if r.num_cache_pages:
                assert self.cache.is_locked(r.cache_node), f"{r}: cached prefix not locked"
                assert self.cache.path_pages(r.cache_node) == r.pages[: r.num_cache_pages], \
                    f"{r}: cached prefix pages differ from the tree"
            if r.state is _RUNNING:
                assert len(r.pages) * ps >= r.num_computed, f"{r}: pages do not cover its KV"
            if r.state is _WAITING:
                assert not r.pages and r.cache_node is None, f"{r}: waiting but holds pages"
            if r.done:
                assert r.inflight > 0, f"{r}: ended and idle but still live"
        every = free + cached + private
        assert len(every) == self.config.num_pages, \
            f"pages: {len(free)} free + {len(cached)} cached + {len(private)} used != {self.config.num_pages}"
        assert len(set(every)) == len(every), "a page is owned twice"
        f, u, c = self.page_counts()
        assert (f, u, c) == (len(free), len(private), len(cached)), "page counters drifted"
        self.cache.check()
