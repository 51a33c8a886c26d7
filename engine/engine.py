"""`Engine`: one device's model, KV pool and runner driven by the shared core `Scheduler`.

Stable API (a ZMQ worker drives exactly this)::

    eng = Engine(EngineConfig(model="/path/to/model"))
    eng.add(Req(rid, prompt_ids, SamplingParams(...), arrival=eng.now()))
    while eng.has_work():
        for out in eng.step():          # list[StepOutput]
            ...
    eng.abort(rid); eng.stats(); eng.steps  # list[StepRecord]
    eng.shutdown()
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from twinserve.core.batch import Batch
from twinserve.core.records import StepRecord
from twinserve.core.request import PLACEHOLDER, Req
from twinserve.core.spec import MODEL_METHODS, SpecConfig
from twinserve.core.spec_step import SpecDecoding
from twinserve.engine.config import EngineConfig
from twinserve.engine.executor import RankExecutor, require_device, resolve_device
from twinserve.engine.heap import settle_heap, unsettle_heap
from twinserve.engine.layers.parallel import SINGLE
from twinserve.engine.outputs import StepOutput
from twinserve.engine.request_options import RequestOptions
from twinserve.engine.spec_costs import measure_step_costs
from twinserve.engine.spec_draft import build_draft
from twinserve.engine.runner import InFlight

__all__ = ["Engine", "EngineConfig", "resolve_device"]


class Engine:
    """Owns the scheduler, model runner and step log of one engine instance.

    Contract: ``add`` validates and queues a request (ValueError on bad input; times are on this
    engine's clock ``now()``). ``step`` runs one scheduler step; with overlap it launches step
    k+1 before completing step k, so tokens of a step are reported by the next ``step`` call
    (with speculation only steps that cannot have verify rows overlap: docs/speculation.md).
    Every request yields StepOutputs whose ``new_token_ids`` concatenate to its output ids, the
    last one with ``finished=True``. ``steps`` gets one StepRecord per executed step (batch
    features, device-measured duration, host cpu_s of schedule+complete+launch) whose ``extra``
    holds the step's timeline on the ``now()`` clock (what the simulator's host model is fitted
    on): ``iter_start`` (the ``step()`` call that launched it began), ``sched_s``, ``launch_s``
    (host work, device waits excluded), ``launch_end``, ``replay_end`` (a graph step's replay
    was enqueued, so the device could start it; NaN for eager steps), ``plan_wait_s``,
    ``launch_cpu_s`` (this thread's CPU time over the launch: well below ``launch_s`` when the
    thread was descheduled or blocked; a spinning device wait counts as CPU), ``device_busy`` (1.0
    when the previous step was still running at launch), ``wait_s`` (blocked on the device
    before completing it), ``tokens_at`` (its tokens reached the scheduler), ``complete_s``,
    ``dev_start`` / ``dev_end`` (its device span: CUDA events against an origin taken at
    ``reset_clock``; the host span on CPU), ``graph_tokens`` (the padded token count of a step
    whose dense layers replayed piecewise graphs; 0 otherwise).
    A step launched after the engine sat idle also has ``wake_s``: from the arrival of the first
    request ``add`` got while idle to the ``step()`` call that launched it (NaN on other steps).

    Tensor parallelism (``tp_size > 1``): this process is rank 0 and the only one with a
    scheduler; it starts ranks 1..N-1 (`TPLeader`) and sends each step's `StepInputs` to them
    before executing its own shard. A failed rank raises `TPGroupError` from the constructor or
    ``step()`` (and from every later ``step()``); the other ranks are stopped.
    """

    def __init__(self, cfg: EngineConfig) -> None:
        cfg.check()
        self.cfg = cfg
        self.device = resolve_device(cfg.device, 0)
        require_device(self.device)
        self.tp = None
        ex_kw: dict[str, Any] = {}
        if cfg.tp_size > 1:
            from twinserve.engine.tp.leader import TPLeader

            self.tp = TPLeader(cfg, self.device)
            ex_kw = dict(agree_pages=self.tp.agree_pages, make_log=self.tp.capture_log,
                         agree_schedule=self.tp.agree_schedule)
            if self.device.type == "cuda":
                ex_kw["wait_event"] = self.tp.wait_event
        try:
            ex = RankExecutor(cfg, self.tp.group if self.tp else SINGLE, self.device, **ex_kw)
            if self.tp is not None:
                self.tp.wait_ready(ex.capture_log.records)
        except BaseException:
            if self.tp is not None and self.tp.failed is None:
                self.tp.check()  # a follower that died explains the failure best (raises)
                self.tp.stop(kill=True)  # followers still building their shard cannot take "stop"
            raise
        self.executor = ex
        self.model_config = ex.model_config
        self.dtype = ex.dtype
        self.max_model_len = ex.max_model_len
        self.eos_token_ids: tuple[int, ...] = ex.model_config.eos_token_ids
        self.tokenizer_path = cfg.model
        self.model, self.pool, self.attn, self.runner = ex.model, ex.pool, ex.attn, ex.runner
        self.sched_config = ex.sched_config
        self.plan = ex.plan

        from twinserve.policies import build_scheduler

        self.scheduler = build_scheduler(
            self.sched_config, cfg.scheduling, cfg.memory, cfg.cache, cfg.scheduling_kwargs,
            cfg.memory_kwargs, cfg.cache_kwargs, eos_token_ids=self.eos_token_ids, checked=cfg.checked)
        self.overlap = self.device.type == "cuda" if cfg.overlap is None else cfg.overlap
        spec = SpecConfig.of(cfg.spec)
        if spec.enabled:
            if cfg.tp_size > 1:
                raise ValueError("speculative decoding runs at tp_size 1")
            draft = build_draft(spec, self.model, self.pool, ex.draft_runtime) if spec.method in MODEL_METHODS else None
            self.scheduler.spec = SpecDecoding(spec, draft, prepare=draft.prepare if draft is not None else None)
        self.steps: list[StepRecord] = []
        self.runner.mark_origin()
        self._t0 = time.perf_counter()
        self._inflight: tuple[InFlight, StepRecord] | None = None
        self._reported: dict[int, int] = {}
        self._pending: list[StepOutput] = []
        self._idle_arrival: float | None = None  # arrival of the request that found the engine idle
        self.options = RequestOptions(self.model_config.vocab_size, self.eos_token_ids, cfg.model)
        if spec.enabled and spec.auto_batch:  # spec.max_batch_size=auto: where speculation pays, measured
            self.scheduler.spec.set_costs(measure_step_costs(self))

    @property
    def tp_size(self) -> int:
        return self.cfg.tp_size

    # ---- public API ------------------------------------------------------------------------
    def now(self) -> float:
        """Seconds on this engine's clock (arrival and token times use it)."""
        return time.perf_counter() - self._t0

    def reset_clock(self) -> None:
        """Make ``now()`` read 0 at this instant (e.g. a trace's time origin); only while idle."""
        if self.has_work():
            raise RuntimeError("reset_clock() needs an idle engine")
        self.runner.mark_origin()
        self._t0 = time.perf_counter()
        self._idle_arrival = None

    def add(self, req: Req) -> None:
        """Queue a request; ValueError for bad params, out-of-vocab ids, a too-long request or
        ``n != 1`` (`LLM` and the server expand ``n`` into several requests)."""
        req.params.validate()
        if req.params.n != 1:
            raise ValueError(f"request {req.rid}: an Engine request has n=1; submit n requests")
        prompt = req.prompt
        if int(prompt.min()) < 0 or int(prompt.max()) >= self.model_config.vocab_size:
            raise ValueError(f"request {req.rid}: prompt token ids must lie in [0, {self.model_config.vocab_size})")
        idle = self._idle_arrival is None and not self.has_work()
        self.options.add(req)
        try:
            self.scheduler.add(req)
        except BaseException:
            self.options.drop(req.rid)
            raise
        if idle:
            self._idle_arrival = req.arrival
        self._reported[req.rid] = 0

    def abort(self, rid: int) -> bool:
        """Abort a request; its final StepOutput (reason "abort") comes with the next step()."""
        req = self.scheduler.abort(rid, self.now())
        if req is None:
            return False
        self._pending.append(self._output(req, finished=True))
        return True

    def has_work(self) -> bool:
        return self.scheduler.has_work or self._inflight is not None or bool(self._pending)

    def step(self) -> list[StepOutput]:
        if self.tp is not None and self.tp.failed is not None:
            raise self.tp.failed
        outs, self._pending = self._pending, []
        spec = self.scheduler.spec
        if spec is not None:  # a step's option tensors have one row per request
            spec.paused = bool(self.options)
            if self._inflight is not None and spec.may_draft_next(self.scheduler.running):
                outs += self._complete(*self._inflight)  # drafts need every request's tokens known
                self._inflight = None
        t = time.perf_counter()
        batch = self.scheduler.schedule(t - self._t0)
        launched = None
        if batch is not None:
            if self._inflight is not None and self.options.needs_sync(batch.reqs):
                outs += self._complete(*self._inflight)  # its tokens feed this step's penalties/grammar
                self._inflight = None
            t_s = time.perf_counter()
            start = t_s - self._t0
            rec = self.scheduler.record(batch, self.plan, start, 0.0, t_s - t)
            if self.scheduler.spec is not None:  # the draft model's proposals, inside sched_s
                rec.extra["spec_draft_s"] = self.scheduler.spec.prepare_s
            c_s = time.thread_time()
            fl = self._launch(batch, start)
            launch_cpu = time.thread_time() - c_s
            rec.cpu_s += fl.launch_s
            rec.extra.update(iter_start=t - self._t0, sched_s=t_s - t, launch_s=fl.launch_s,
                             launch_end=time.perf_counter() - self._t0, replay_end=fl.replay_at - self._t0,
                             plan_wait_s=fl.plan_wait_s, launch_cpu_s=launch_cpu,
                             graph_tokens=float(fl.graph_tokens),
                             device_busy=float(fl.device_busy), overlapped=float(self._inflight is not None))
            if self._idle_arrival is not None:
                rec.extra["wake_s"] = max(0.0, t - self._t0 - self._idle_arrival)
                self._idle_arrival = None
            launched = (fl, rec)
        if self._inflight is not None:
            outs += self._complete(*self._inflight)
            self._inflight = None
        if launched is not None:
            if self.overlap and launched[0].batch.drafts is None:  # a verify step settles at once
                self._inflight = launched
            else:
                outs += self._complete(*launched)
        return outs

    def set_mode(self, overlap: bool | None = None, cuda_graphs: bool | None = None) -> None:
        """Switch overlap scheduling and/or graph replay (graphs must have been captured) while
        idle; used to measure each one's contribution on one engine. The engine's ``plan``
        follows (its ``piecewise_max_tokens``), so that the step records' ``padded_tokens`` and
        ``eager_step`` describe what ran."""
        if self.has_work():
            raise RuntimeError("set_mode() needs an idle engine")
        if overlap is not None:
            self.overlap = overlap
        if cuda_graphs is not None:
            if cuda_graphs and self.runner.graphs is None:
                raise ValueError("this engine captured no CUDA graphs")
            self.runner.use_graphs = cuda_graphs
            tg = self.runner.token_graphs
            self.plan = replace(self.plan, piecewise_max_tokens=tg.max_tokens if cuda_graphs and tg else 0)

    def warmup(self, prompt_lens: tuple[int, ...] = (16, 128, 512, 2048, 8192), decodes: int = 32,
               seed: int = 0) -> float:
        """Run throw-away requests (one prompt of each length that fits, then ``decodes``
        concurrent short ones) so that kernel selection and allocator growth happen before
        timed work, the way a server warms up; then flush the prefix cache, drop their step
        records and speculation counters and freeze the heap (`heap.settle_heap`: no full garbage collection walks the
        startup objects during serving). Only while idle; returns the seconds it took."""
        if self.has_work():
            raise RuntimeError("warmup() needs an idle engine")
        from twinserve.core.sampling import SamplingParams

        t0 = time.perf_counter()
        n0 = len(self.steps)
        rng = np.random.default_rng(seed)
        vocab = self.model_config.vocab_size
        sc = self.sched_config
        cap = min(sc.max_model_len - 8, sc.max_num_batched_tokens, sc.num_pages * sc.page_size // 2)
        lens = [n for n in prompt_lens if n <= cap] + [min(64, cap)] * decodes
        for i, n in enumerate(lens):
            ids = rng.integers(1, vocab, size=n, dtype=np.int64).astype(np.int32)
            self.add(Req(-1 - i, ids, SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True),
                         arrival=self.now()))
            if i < len(lens) - decodes:  # prompts one at a time: each its own prefill shape
                while self.has_work():
                    self.step()
        while self.has_work():
            self.step()
        self.flush_cache()
        del self.steps[n0:]
        if self.scheduler.spec is not None:  # the throw-away requests' drafts count for nothing
            self.scheduler.spec.reset_counters()
        settle_heap()
        return time.perf_counter() - t0

    def flush_cache(self) -> int:
        """Evict every unlocked prefix from the prefix cache (only while idle); returns pages freed."""
        if self.has_work():
            raise RuntimeError("flush_cache() needs an idle engine")
        cache = self.scheduler.cache
        freed = cache.evict(cache.evictable_pages)
        self.scheduler.allocator.free(freed)
        return len(freed)

    def tp_pids(self) -> dict[int, int]:
        """Pids of the follower ranks (rank -> pid); empty at tp_size 1."""
        return self.tp.pids() if self.tp is not None else {}

    def stats(self) -> dict[str, float]:
        free, used, cached = self.scheduler.page_counts()
        total = self.sched_config.num_pages
        cs = self.scheduler.cache.stats
        return {
            "running": self.scheduler.num_running,
            "waiting": self.scheduler.num_waiting,
            "kv_usage": used / total,
            "kv_cached": cached / total,
            "cache_hit_rate": cs.hit_tokens / cs.queried_tokens if cs.queried_tokens else 0.0,
            "num_pages": total,
            "steps": len(self.steps),
            "tp_size": self.cfg.tp_size,
            **(self.scheduler.spec.stats() if self.scheduler.spec is not None else {}),
            **self.spec_cutoff(),
        }

    def spec_cutoff(self) -> dict[str, float]:
        """With ``spec.max_batch_size=auto``: the batch size speculation currently stops above."""
        sp = self.scheduler.spec
        return {} if sp is None or sp.costs is None else {"spec_max_batch_size": float(sp.max_batch)}

    def shutdown(self) -> None:
        """Drain the in-flight step, stop the other tensor-parallel ranks and free device
        memory; the engine is unusable afterwards. Unfreezes the heap (`heap.unsettle_heap`), so
        that whatever the frozen objects held can be collected again."""
        try:
            if self._inflight is not None and (self.tp is None or self.tp.failed is None):
                self._finish(self._inflight[0])
        finally:
            self._inflight = None
            if self.tp is not None:
                self.tp.stop()
            for name in ("runner", "attn", "pool", "model", "executor"):
                if hasattr(self, name):
                    delattr(self, name)
            unsettle_heap()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    # ---- internals -------------------------------------------------------------------------
    def _launch(self, batch: Batch, start: float) -> InFlight:
        t0 = time.perf_counter()
        inputs = self.runner.prepare(batch)
        opts = self.options
        if opts:  # only while a live request sets an option
            if inputs.sampling is not None:
                rows = inputs.emit_rows.tolist()
                inputs.sampling.extras = opts.build([batch.reqs[i] for i in rows],
                                                    [batch.out_pos[i] for i in rows])
            inputs.prompt_lp = opts.prompt_spec(batch)
        if self.tp is None:
            fl = self.runner.execute(inputs, start, batch, t0=t0)
        else:
            self.tp.send(inputs)
            try:
                fl = self.runner.execute(inputs, start, batch, t0=t0)
            except RuntimeError as e:
                self.tp.diagnose(e)
                raise
        if opts and inputs.sampling is not None and inputs.sampling.extras is not None:
            fl.logprobs = self.runner.sampler.last_logprobs
        return fl

    def _finish(self, fl: InFlight) -> tuple[np.ndarray, float]:
        if self.tp is None:
            return self.runner.finish(fl)
        try:
            return self.runner.finish(fl)
        except RuntimeError as e:
            if self.tp.failed is not None:
                raise
            self.tp.diagnose(e)
            raise

    def _complete(self, fl: InFlight, rec: StepRecord) -> list[StepOutput]:
        tw = time.perf_counter()
        tokens, duration = self._finish(fl)
        t = time.perf_counter()
        ended = self.scheduler.complete(fl.batch, tokens, t - self._t0, fl.verified)
        if self.scheduler.spec is not None:
            d, a = self.scheduler.spec.step_counts.pop(fl.batch.step, (0, 0))
            rec.extra.update(spec_num_draft_tokens=float(d), spec_num_accepted_tokens=float(a))
        if fl.logprobs is not None:
            rows = fl.inputs.emit_rows.tolist()
            self.options.record([fl.batch.reqs[i] for i in rows], [fl.batch.out_pos[i] for i in rows],
                                fl.logprobs.to_cpu())
        if fl.prompt_lp is not None:
            self.options.record_prompt(fl.inputs.prompt_lp, fl.prompt_lp.to_cpu())
        rec.duration = duration
        t_end = time.perf_counter()
        rec.cpu_s += t_end - t
        d0, d1 = self.runner.device_span(fl, duration, self._t0)
        rec.extra.update(wait_s=t - tw, tokens_at=t - self._t0, complete_s=t_end - t,
                         dev_start=d0, dev_end=d1)
        self.steps.append(rec)
        outs: list[StepOutput] = []
        seen: set[int] = set()
        for i, req in enumerate(fl.batch.reqs):
            if fl.batch.emits[i] and req.rid not in seen and req.rid in self._reported:
                seen.add(req.rid)
                out = self._output(req, finished=req.done)
                if out.new_token_ids or out.finished:
                    outs.append(out)
        for req in ended:
            if req.rid not in seen and req.rid in self._reported:
                outs.append(self._output(req, finished=True))
        return outs

    def _output(self, req: Req, finished: bool) -> StepOutput:
        done = self._reported.get(req.rid, 0)
        new = req.output_ids[done:].tolist()  # a list scan: a step adds a token or two per request
        if PLACEHOLDER in new:
            new = new[: new.index(PLACEHOLDER)]
        lps = plps = None
        if self.options.live:
            lps = self.options.take(req.rid, done, len(new))
            if new or finished:
                plps = self.options.take_prompt(req.rid)
        if finished:
            self._reported.pop(req.rid, None)
            if self.options.live:
                self.options.drop(req.rid)
        else:
            self._reported[req.rid] = done + len(new)
        return StepOutput(req.rid, new, finished, req.finish_reason if finished else None,
                          req.prompt_len, req.num_cached, lps, plps)
