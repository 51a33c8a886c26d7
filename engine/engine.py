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

from twinserve.core.records import StepRecord
from twinserve.core.request import PLACEHOLDER, Req
from twinserve.engine.attention import ATTENTION, AttentionSpec
from twinserve.engine.config import EngineConfig
from twinserve.engine.kv_pool import KVGeometry, KVPool
from twinserve.engine.layers.kernels import KERNELS
from twinserve.engine.loader import load_weights
from twinserve.engine.memory_plan import activation_reserve, plan_num_pages
from twinserve.engine.model_config import ModelConfig, parse_dtype
from twinserve.engine.models import build_model
from twinserve.engine.outputs import StepOutput
from twinserve.engine.runner import InFlight, ModelRunner
from twinserve.engine.sampler import Sampler


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class Engine:
    """Owns the scheduler, model runner and step log of one engine instance.

    Contract: ``add`` validates and queues a request (ValueError on bad input; times are on this
    engine's clock ``now()``). ``step`` runs one scheduler step; with overlap it launches step
    k+1 before completing step k, so tokens of a step are reported by the next ``step`` call.
    Every request yields StepOutputs whose ``new_token_ids`` concatenate to its output ids, the
    last one with ``finished=True``. ``steps`` gets one StepRecord per executed step (batch
    features, device-measured duration, host cpu_s of schedule+complete+launch).
    """

    def __init__(self, cfg: EngineConfig) -> None:
        if cfg.tp_size != 1:
            raise NotImplementedError("tensor parallelism is not implemented yet (tp_size must be 1)")
        self.cfg = cfg
        self.device = resolve_device(cfg.device)
        cuda = self.device.type == "cuda"
        self.model_config = mc = ModelConfig.from_dir(cfg.model)
        if cfg.dtype == "auto":
            self.dtype = parse_dtype(mc.torch_dtype) if cuda else torch.float32
        else:
            self.dtype = parse_dtype(cfg.dtype)
        self.max_model_len = self._max_model_len(mc, cfg)
        self.eos_token_ids: tuple[int, ...] = mc.eos_token_ids
        self.tokenizer_path = cfg.model
        torch.manual_seed(cfg.seed)

        attn_name = cfg.attention_backend if cfg.attention_backend != "auto" else ("flashinfer" if cuda else "torch")
        kern_name = cfg.kernels if cfg.kernels != "auto" else ("flashinfer" if attn_name == "flashinfer" else "torch")
        kernels = KERNELS.create(kern_name)
        self.model = build_model(mc, kernels, self.dtype, self.device, max_positions=self.max_model_len + 1)
        load_weights(self.model, cfg.model, cfg.load_format, cfg.seed)

        sched_fields = cfg.scheduler if isinstance(cfg.scheduler, dict) else {}
        max_tokens = int(getattr(cfg.scheduler, "max_num_batched_tokens", sched_fields.get("max_num_batched_tokens", 8192)))
        geom0 = KVGeometry(mc.num_layers, 0, cfg.page_size, mc.num_kv_heads, mc.head_dim, self.dtype)
        num_pages = cfg.num_pages or plan_num_pages(
            geom0, self.device, cfg.mem_fraction,
            activation_reserve(mc, max_tokens, cfg.max_graph_bs, self.dtype), cfg.cpu_kv_tokens)
        self.pool = KVPool(replace(geom0, num_pages=num_pages), self.device)
        self.sched_config = cfg.scheduler_config(num_pages, self.max_model_len)

        from twinserve.policies import build_scheduler

        self.scheduler = build_scheduler(
            self.sched_config, cfg.scheduling, cfg.memory, cfg.cache, cfg.scheduling_kwargs,
            cfg.memory_kwargs, cfg.cache_kwargs, eos_token_ids=self.eos_token_ids, checked=cfg.checked)

        max_pages_per_seq = -(-self.max_model_len // cfg.page_size) + 1
        spec = AttentionSpec(mc.num_heads, mc.num_kv_heads, mc.head_dim, self.dtype, self.pool,
                             self.sched_config.max_running, max_pages_per_seq)
        kw: dict[str, Any] = {}
        if attn_name == "flashinfer":
            kw["decode_tensor_cores"] = cfg.decode_tensor_cores
        self.attn = ATTENTION.create(attn_name, spec=spec, **kw)
        self.overlap = cuda if cfg.overlap is None else cfg.overlap
        self.runner = ModelRunner(self.model, self.pool, self.attn, Sampler(self.device, cfg.seed),
                                  use_graphs=cfg.cuda_graphs and cuda, max_graph_bs=cfg.max_graph_bs)
        self.steps: list[StepRecord] = []
        self._t0 = time.perf_counter()
        self._inflight: tuple[InFlight, StepRecord] | None = None
        self._reported: dict[int, int] = {}
        self._pending: list[StepOutput] = []

    @staticmethod
    def _max_model_len(mc: ModelConfig, cfg: EngineConfig) -> int:
        n = mc.max_position_embeddings
        window = mc.raw.get("sliding_window")
        if window and mc.raw.get("use_sliding_window", True):
            n = min(n, int(window))  # never longer than the window: no token ever slides out
        if cfg.max_model_len:
            n = min(n, int(cfg.max_model_len))
        return n

    # ---- public API ------------------------------------------------------------------------
    def now(self) -> float:
        """Seconds on this engine's clock (arrival and token times use it)."""
        return time.perf_counter() - self._t0

    def reset_clock(self) -> None:
        """Make ``now()`` read 0 at this instant (e.g. a trace's time origin); only while idle."""
        if self.has_work():
            raise RuntimeError("reset_clock() needs an idle engine")
        self._t0 = time.perf_counter()

    def add(self, req: Req) -> None:
        """Queue a request; ValueError for bad params, out-of-vocab ids or a too-long request."""
        req.params.validate()
        prompt = req.prompt
        if int(prompt.min()) < 0 or int(prompt.max()) >= self.model_config.vocab_size:
            raise ValueError(f"request {req.rid}: prompt token ids must lie in [0, {self.model_config.vocab_size})")
        self.scheduler.add(req)
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
        outs, self._pending = self._pending, []
        t = time.perf_counter()
        batch = self.scheduler.schedule(self.now())
        launched = None
        if batch is not None:
            start = self.now()
            rec = self.scheduler.record(batch, start, 0.0, time.perf_counter() - t)
            fl = self.runner.launch(batch, start)
            rec.cpu_s += fl.launch_s
            launched = (fl, rec)
        if self._inflight is not None:
            outs += self._complete(*self._inflight)
            self._inflight = None
        if launched is not None:
            if self.overlap:
                self._inflight = launched
            else:
                outs += self._complete(*launched)
        return outs

    def set_mode(self, overlap: bool | None = None, cuda_graphs: bool | None = None) -> None:
        """Switch overlap scheduling and/or graph replay (graphs must have been captured) while
        idle; used to measure each one's contribution on one engine."""
        if self.has_work():
            raise RuntimeError("set_mode() needs an idle engine")
        if overlap is not None:
            self.overlap = overlap
        if cuda_graphs is not None:
            if cuda_graphs and self.runner.graphs is None:
                raise ValueError("this engine captured no CUDA graphs")
            self.runner.use_graphs = cuda_graphs

    def flush_cache(self) -> int:
        """Evict every unlocked prefix from the prefix cache (only while idle); returns pages freed."""
        if self.has_work():
            raise RuntimeError("flush_cache() needs an idle engine")
        cache = self.scheduler.cache
        freed = cache.evict(cache.evictable_pages)
        self.scheduler.allocator.free(freed)
        return len(freed)

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
        }

    def shutdown(self) -> None:
        """Drain the in-flight step and free device memory; the engine is unusable afterwards."""
        if self._inflight is not None:
            self.runner.finish(self._inflight[0])
            self._inflight = None
        for name in ("runner", "attn", "pool", "model"):
            if hasattr(self, name):
                delattr(self, name)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # ---- internals -------------------------------------------------------------------------
    def _complete(self, fl: InFlight, rec: StepRecord) -> list[StepOutput]:
        tokens, duration = self.runner.finish(fl)
        t = time.perf_counter()
        ended = self.scheduler.complete(fl.batch, tokens, self.now())
        rec.duration = duration
        rec.cpu_s += time.perf_counter() - t
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
        outs = req.output_ids[done:]
        holes = np.flatnonzero(outs == PLACEHOLDER)
        new = outs[: holes[0]] if holes.size else outs
        if finished:
            self._reported.pop(req.rid, None)
        else:
            self._reported[req.rid] = done + len(new)
        return StepOutput(req.rid, new.tolist(), finished, req.finish_reason if finished else None,
                          req.prompt_len, req.num_cached)
