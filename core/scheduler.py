"""`Scheduler`: the one loop both backends drive (see DESIGN.md, "The one loop")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from twinserve.core.batch import Batch, BatchFeatures, graph_features, padded_batch_size
from twinserve.core.config import SchedulerConfig
from twinserve.core.contracts import AllocatorLike, CacheLike, MemoryLike, SchedulingLike
from twinserve.core.records import StepRecord
from twinserve.core.request import Req, ReqState
from twinserve.core.spec_step import SpecDecoding

_RUNNING = ReqState.RUNNING
_WAITING = ReqState.WAITING
_FINISHED = ReqState.FINISHED


@dataclass(frozen=True, slots=True)
class StretchColumns:
    """Per-step counts of a fast-forwarded decode stretch (arrays of length ``k``)."""

    first_step: int
    k: int
    num_waiting: int
    num_running: int
    free_pages: np.ndarray
    used_pages: np.ndarray
    cached_pages: np.ndarray


class Scheduler:
    """Owns the waiting queue, the running set and the three policies; forms one batch per step.

    Protocol: ``add`` requests as they arrive; ``schedule(now)`` returns the next ``Batch`` (or
    None) and launches it: lengths and pages advance at once and every request that will sample a
    token gets a placeholder output; ``complete(batch, tokens, now)`` delivers the sampled values,
    applies stop rules and releases finished requests. ``schedule`` may be called again before the
    previous batch completes (overlap scheduling); batches must complete in launch order.

    Batch formation per step, under the token budget: running requests first, in admission order
    (one token per decode, a chunk per unfinished prefill), then waiting requests in the order the
    scheduling policy gives, until one does not fit (head-of-line blocking). In prefill-first mode
    (``mixed=False``) a step holds only prefill work when there is any, else only decodes.
    When a running request needs a page and none is free (even after evicting unlocked cached
    prefixes), a victim chosen by the scheduling policy among the running requests not yet served
    in this step (the needy request included) is preempted by recompute: its computed full pages go to the prefix cache, the
    rest are freed, and it waits again (it is not re-admitted in the same step).

    Invariants (``check_invariants``): every page is exactly one of free, owned by a live request,
    or owned by the prefix cache, so free + used + cached == num_pages; a request's cached prefix
    stays locked while it holds it; a FINISHED or ABORTED request holds nothing once no launched
    batch still contains it.
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
        self._ff_key: tuple[int, int, int] | None = None
        self._ff_arrays: tuple[np.ndarray, np.ndarray] | None = None
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
        self._clean()
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        self._clean()
        return len(self.running)

    @property
    def has_work(self) -> bool:
        self._clean()
        return bool(self.waiting or self.running or self._inflight)

    def get(self, rid: int) -> Req | None:
        return self._live.get(rid)

    def page_counts(self) -> tuple[int, int, int]:
        free = self.allocator.free_count
        cached = self.cache.num_pages
        return free, self.config.num_pages - free - cached, cached

    # ---- one step --------------------------------------------------------------------------
    def schedule(self, now: float) -> Batch | None:
        self._clean()
        if not self.running and not self.waiting:
            return None
        entries: list[tuple[Req, int, bool]] = []
        preempted: set[int] = set()
        budget = self.config.max_num_batched_tokens
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
        on_compute = self.policy.on_compute if getattr(self.policy, "tracks_compute", True) else None
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
                     self.config.max_graph_bs, self._shared_ctx(nodes, cached),
                     self.config.piecewise_max_tokens, self.config.token_graph_mode, self.config.max_running,
                     self.config.hybrid_decode_heavy, self.config.gqa_group, drafts)

    def _shared_ctx(self, nodes: list, cached: int) -> int:
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
            m = cache.match(r.tokens[: total - 1])
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
                r.pages.extend(self._alloc(need))  # cannot fail: need <= avail
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
        self._ff_key = None
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
    def _alloc(self, n: int) -> list[int] | None:
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
        pages = self._alloc(need)
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

    def _clean(self) -> None:
        if self._dirty:
            self.running = [r for r in self.running if r.state is _RUNNING]
            self.waiting = [r for r in self.waiting if r.state is _WAITING]
            self._dirty = False

    # ---- records ---------------------------------------------------------------------------
    def record(self, batch: Batch, start: float, duration: float, cpu_s: float = 0.0,
               replica: int = 0) -> StepRecord:
        """The step record of ``batch``; call it right after ``schedule()`` returned it."""
        free, used, cached = self.page_counts()
        return StepRecord(batch.step, start, duration, batch.features(), len(self.waiting),
                          len(self.running), free, used, cached, self._last_preempted, cpu_s, replica)

    # ---- fast-forward (simulator) ----------------------------------------------------------
    def decode_stretch(self, limit: int) -> int:
        """How many upcoming steps are certainly the same decode-only batch with no finish.

        Holds when no batch is in flight, every running request is decoding with ``ignore_eos``
        (or no EOS ids) and no stop ids, nothing can be admitted, and the pages those steps need
        are free or evictable from the prefix cache (no preemption). Assumes no arrival during
        the stretch (the caller's ``limit``).
        """
        self._clean()
        if limit < 1 or self._inflight:
            return 0
        running = self.running
        b = len(running)
        cfg = self.config
        if b == 0 or b > cfg.max_num_batched_tokens:
            return 0
        if self.waiting and b < cfg.max_running and b < cfg.max_num_batched_tokens:
            return 0
        eos = bool(self.eos)
        left = limit + 1
        for r in running:
            if r.num_tokens - r.num_computed != 1 or r.num_tokens == r.prompt_len:
                return 0
            p = r.params
            if (eos and not p.ignore_eos) or p.stop_token_ids:
                return 0
            lft = p.max_tokens - (r.num_tokens - r.prompt_len)
            if lft < left:
                left = lft
        k = min(limit, left - 1)
        if k < 1:
            return 0
        c, npg = self._stretch_arrays()
        avail = self.allocator.free_count + self.cache.evictable_pages
        ps = cfg.page_size

        def pages_needed(steps: int) -> int:
            return int(np.maximum(0, -(-(c + steps) // ps) - npg).sum())

        if pages_needed(k) <= avail:
            return k
        lo, hi = 0, k  # pages_needed(lo) <= avail < pages_needed(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if pages_needed(mid) <= avail:
                lo = mid
            else:
                hi = mid
        return lo

    def _stretch_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Computed tokens and pages of each running request, memoised until the state moves."""
        key = (self._step, self._inflight, len(self.running))
        if self._ff_key == key and self._ff_arrays is not None:
            return self._ff_arrays
        n = len(self.running)
        c = np.fromiter((r.num_computed for r in self.running), dtype=np.int64, count=n)
        npg = np.fromiter((len(r.pages) for r in self.running), dtype=np.int64, count=n)
        self._ff_key, self._ff_arrays = key, (c, npg)
        return c, npg

    def stretch_features(self, k: int) -> list[BatchFeatures]:
        """Features of each of the next ``k`` decode-only steps (see ``decode_stretch``)."""
        c, _ = self._stretch_arrays()
        b = len(c)
        total = int(c.sum())
        top = int(c.max())
        padded = padded_batch_size(b, self.config.max_graph_bs)
        cfg = self.config
        rows, eager, replay, wide = graph_features(b, b, b, cfg.max_graph_bs, cfg.piecewise_max_tokens,
                                                   cfg.token_graph_mode, cfg.max_running, cfg.hybrid_decode_heavy)
        cached = [r for r in self.running if r.cache_node is not None]
        shared = self._shared_ctx([r.cache_node for r in cached], sum(r.num_cache_pages for r in cached))
        return [
            BatchFeatures(num_seqs=b, num_decodes=b, num_prefills=0, new_tokens=b, prefill_tokens=0,
                          decode_ctx=total + b * j, prefill_ctx=0, prefill_attn=0,
                          padded_decodes=padded, max_ctx=top + j,
                          decode_unique_ctx=total + b * j - shared, padded_tokens=rows,
                          eager_step=eager, graph_replay=replay, wide_tiles=wide)
            for j in range(1, k + 1)
        ]

    def advance_decodes_columns(self, ends: np.ndarray) -> StretchColumns:
        """Apply ``len(ends)`` decode steps at once, exactly as that many schedule()/complete()
        pairs would: the same pages are taken (cached prefixes evicted in the same LRU order when
        the free list runs dry), token values come from ``output_hint`` (else 0) and each token
        is stamped with its step's end. Valid only for ``len(ends) <= decode_stretch(...)``.
        Returns the per-step queue and page counts as columns."""
        k = len(ends)
        self._ff_key = None
        running = self.running
        ps = self.config.page_size
        # page needs in the order step-by-step makes them: by step, then running order
        events: list[tuple[int, int]] = []
        for idx, r in enumerate(running):
            c = r.num_computed
            for q in range(len(r.pages), -(-(c + k) // ps)):
                events.append((q * ps - c + 1, idx))  # page q is first written at step q*ps-c+1
        per_step = np.zeros(k + 1, dtype=np.int64)
        free0 = self.allocator.free_count
        cached0 = self.cache.num_pages
        if events:
            events.sort()
            short = len(events) - free0
            if short > 0:
                self.allocator.free(self.cache.evict(short))
            for (j, idx), page in zip(events, self.allocator.alloc(len(events))):
                running[idx].pages.append(page)
                per_step[j] += 1
        on_compute = self.policy.on_compute if getattr(self.policy, "tracks_compute", True) else None
        for r in running:
            first = r.num_tokens - r.prompt_len
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
        total = self.config.num_pages
        first_step = self._step + 1
        self._step += k
        return StretchColumns(first_step, k, len(self.waiting), len(running), free,
                              total - free - cached, cached)

    def advance_decodes(self, starts: np.ndarray, durations: np.ndarray,
                        cpu_s: float | np.ndarray = 0.0, replica: int = 0) -> list[StepRecord]:
        """`advance_decodes_columns` with one `StepRecord` per step (start, duration as given)."""
        k = len(starts)
        if k == 0:
            return []
        starts = np.asarray(starts, dtype=np.float64)
        ends = starts + np.asarray(durations, dtype=np.float64)
        cpu = np.broadcast_to(np.asarray(cpu_s, dtype=np.float64), (k,))
        feats = self.stretch_features(k)
        cols = self.advance_decodes_columns(ends)
        return [StepRecord(cols.first_step + j, float(starts[j]), float(ends[j] - starts[j]), feats[j],
                           cols.num_waiting, cols.num_running, int(cols.free_pages[j]),
                           int(cols.used_pages[j]), int(cols.cached_pages[j]), 0, float(cpu[j]), replica)
                for j in range(k)]

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
        check = getattr(self.cache, "check", None)
        if check is not None:
            check()
