"""`ModelRunner`: turns a scheduled `Batch` into sampled tokens on the device (one step)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from twinserve.core.batch import Batch
from twinserve.core.graph_plan import DEFAULT_PLAN, GraphPlan, padded_batch_size
from twinserve.engine.capture_log import CaptureLog
from twinserve.engine.cuda_graph import CudaGraphRunner
from twinserve.engine.kv_pool import KVPool
from twinserve.engine.logits_processing import prompt_logprobs
from twinserve.engine.models.decoder import CausalLM, ForwardContext
from twinserve.engine.sampler import Sampler
from twinserve.engine.spec_sampler import verify_sample
from twinserve.engine.step_inputs import StepInputs, build_step_inputs
from twinserve.engine.token_graphs import TOKEN_GRAPHS, TokenGraphs


@dataclass
class InFlight:
    """A launched step whose tokens may not have reached the host yet (``batch`` is None on a
    tensor-parallel follower rank, which only executes)."""

    batch: Batch | None
    inputs: StepInputs
    tokens_host: torch.Tensor | None
    start: float
    launch_s: float
    used_graph: bool
    start_evt: object = None
    end_evt: object = None
    t_begin: float = 0.0
    plan_wait_s: float = 0.0
    device_busy: bool = False
    replay_at: float = float("nan")  # perf_counter when a graph replay was enqueued (NaN: eager)
    graph_tokens: int = 0  # the padded size of a token-graph step (0: none)
    logprobs: object = None  # the sampler's LogprobsOut of the step (engine.logits_processing), or None
    prompt_lp: object = None  # the step's prompt-position LogprobsOut (inputs.prompt_lp), or None
    verified: list | None = None  # speculative steps: per batch row, its scored tokens (`finish`)


def synchronize_event(evt: object) -> None:
    evt.synchronize()  # type: ignore[attr-defined]


class ModelRunner:
    """Runs one step: host inputs → (graph or eager) forward → sampler → async copy to host.

    The `GraphPlan` ``plan`` says which graphs: decode-only batches up to ``max_graph_bs``
    replay a whole-forward CUDA graph (`CudaGraphRunner`); with ``piecewise_max_tokens`` > 0
    every other step of up to that many
    tokens replays the token graphs of ``token_graph_mode`` (engine/token_graphs.py: ``full``,
    the whole forward with its attention; ``piecewise``, the dense layers with the attention
    eager; ``hybrid``, full for small steps, and decode-heavy ones with
    ``hybrid_decode_heavy``, else piecewise); the rest run eagerly. ``use_graphs`` switches
    both off and on (graphs stay captured). ``capture_log`` (a `CaptureLog`) gives the capture
    order and records every capture (the tensor-parallel ranks compare these records).

    Contract: ``launch(batch)`` = ``execute(prepare(batch))``: ``prepare`` builds the step's host
    inputs (a `StepInputs`, which names no request, so a tensor-parallel rank without a scheduler
    can ``execute`` the same step from it); ``execute`` enqueues the step and returns at once on
    CUDA (synchronously on CPU); ``finish(inflight)`` waits for it (through ``wait_event``, by
    default a blocking CUDA event synchronize) and returns ``(tokens, duration_s)`` where
    ``tokens[i]`` is the sampled token of batch row i (-1 where the row does not emit) and the
    duration is device time between CUDA events (perf_counter on CPU). Placeholder input tokens
    are filled on the device from the previous executed step's samples, so at most one step may
    be outstanding when the next is launched (overlap scheduling), and every rank must execute
    every step.
    """

    def __init__(self, model: CausalLM, pool: KVPool, attn, sampler: Sampler, use_graphs: bool,
                 plan: GraphPlan = DEFAULT_PLAN,
                 wait_event: Callable[[object], None] = synchronize_event,
                 capture_log: CaptureLog | None = None) -> None:
        self.model = model
        self.pool = pool
        self.attn = attn
        self.sampler = sampler
        self.device = pool.device
        self.cuda = self.device.type == "cuda"
        self.max_graph_bs = max_graph_bs = plan.max_graph_bs
        self.wait_event = wait_event
        self.graphs: CudaGraphRunner | None = None
        self.use_graphs = use_graphs  # may be switched off later (benchmarks); graphs stay captured
        if use_graphs:
            if not (self.cuda and attn.supports_cuda_graphs):
                raise ValueError(f"CUDA graphs need a CUDA device and a graph-capable attention backend "
                                 f"(got {self.device.type}, {attn.name})")
            # one capture stream for every graph: each further side stream used for a capture
            # slowed the decode graphs' replay on the H200 host by ~0.18 ms a step (measured)
            self.graphs = CudaGraphRunner(model, attn, pool, max_graph_bs, log=capture_log)
        self.token_graphs: TokenGraphs | None = None
        if use_graphs and plan.piecewise_max_tokens > 0:
            self.token_graphs = TOKEN_GRAPHS.create(
                plan.token_graph_mode, model=model, attn=attn, pool=pool, max_tokens=plan.piecewise_max_tokens,
                max_rows=plan.graph_rows, stream=self.graphs.stream,
                decode_heavy=plan.hybrid_decode_heavy, log=capture_log)
        self._prev_tokens: torch.Tensor | None = None
        self._prev_rows: dict[int, int] = {}
        self._plan_evt = None
        self._last_end = None  # the latest launched step's end event (is the device still busy?)
        self._origin = None  # device-clock origin event (mark_origin)

    def _graph_size(self, batch: Batch) -> int:
        if not self.use_graphs or self.graphs is None or not batch.decode_only or len(batch) > self.graphs.max_bs:
            return 0
        return padded_batch_size(len(batch), self.max_graph_bs)

    def launch(self, batch: Batch, start: float) -> InFlight:
        t0 = time.perf_counter()
        return self.execute(self.prepare(batch), start, batch, t0=t0)

    def prepare(self, batch: Batch) -> StepInputs:
        """Host inputs of ``batch`` (graph size decided here); remembers which rows sample, for
        the next step's placeholders."""
        inp = build_step_inputs(batch, self.pool.page_size, self.pool.scratch_page, self._prev_rows,
                                pad_to=self._graph_size(batch))
        if inp.logit_counts is None:
            self._prev_rows = {batch.reqs[r].rid: j for j, r in enumerate(inp.emit_rows.tolist())}
        else:  # speculative rows: a row's last logits row samples its newest token
            self._prev_rows = dict(zip((batch.reqs[r].rid for r in inp.emit_rows.tolist()),
                                       (np.cumsum(inp.logit_counts) - 1).tolist()))
        return inp

    @torch.inference_mode()
    def execute(self, inp: StepInputs, start: float = 0.0, batch: Batch | None = None,
                t0: float | None = None, host_tokens: bool = True) -> InFlight:
        """Enqueue the step ``inp``; ``host_tokens=False`` skips the copy of the sampled tokens
        to the host (a follower rank keeps them on the device for the next step only)."""
        t0 = time.perf_counter() if t0 is None else t0
        bs = inp.graph_bs
        fl = InFlight(batch=batch, inputs=inp, tokens_host=None, start=start, launch_s=0.0, used_graph=bs > 0)
        waited = 0.0
        if self.cuda:
            fl.device_busy = self._last_end is not None and not self._last_end.query()
            if self._plan_evt is not None:  # the previous plan's host→device copies have executed
                tw = time.perf_counter()
                self.wait_event(self._plan_evt)
                waited = time.perf_counter() - tw
            fl.start_evt = torch.cuda.Event(enable_timing=True)
            fl.end_evt = torch.cuda.Event(enable_timing=True)
            fl.start_evt.record()
        else:
            fl.t_begin = time.perf_counter()
            fl.launch_s = fl.t_begin - t0  # host preparation only; the forward is device time
        dev_packed = inp.packed.to(self.device, non_blocking=True)
        v = inp.views(dev_packed)
        if inp.num_ph:
            v["ids"][v["ph_idx"]] = self._prev_tokens[v["ph_src"]]
        tg = self.token_graphs if self.use_graphs and not bs else None
        pt = tg.size_for(inp.num_padded) if tg is not None else 0
        whole = False
        if bs:
            self.graphs.load(bs, dev_packed, inp.attn)
        elif pt:
            whole = tg.plan(pt, inp.attn)
        else:
            self.attn.plan(inp.attn)
        if self.cuda:
            self._plan_evt = torch.cuda.Event()
            self._plan_evt.record()
        if bs:
            logits = self.graphs.replay(bs)[: inp.num_rows]
            fl.replay_at = time.perf_counter()
            if inp.num_emit != inp.num_rows:
                logits = logits[torch.from_numpy(inp.emit_rows).to(self.device, non_blocking=True)]
        else:
            if pt:
                hidden = tg.forward(pt, v["ids"], v["positions"], v["slots"])
                if whole and self.cuda:
                    fl.replay_at = time.perf_counter()
                fl.graph_tokens = pt
            else:
                ctx = ForwardContext(positions=v["positions"], slots=v["slots"], attn=self.attn)
                hidden = self.model(v["ids"], ctx)
            logits = self.model.compute_logits(hidden[v["logits_idx"]]) if inp.num_emit else None
            if inp.prompt_lp is not None:
                fl.prompt_lp = prompt_logprobs(self.model, hidden, inp.prompt_lp)
        if inp.num_emit:
            if inp.draft_ids is not None and not inp.sampling.all_greedy:
                tokens = verify_sample(self.sampler, logits, inp.sampling, inp.draft_ids)
            else:
                tokens = self.sampler.sample(logits, inp.sampling)
            if inp.forced is not None:  # a replayed trace's answers replace the sampled tokens
                pos, vals = (torch.from_numpy(a).to(self.device, non_blocking=True) for a in inp.forced)
                tokens[pos] = vals.to(tokens.dtype)
            self._prev_tokens = tokens
            if host_tokens and self.cuda:
                host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
                fl.tokens_host = host.copy_(tokens, non_blocking=True)
            elif host_tokens:
                fl.tokens_host = tokens
        else:
            self._prev_tokens = None
        if self.cuda:
            fl.end_evt.record()
            self._last_end = fl.end_evt
            fl.launch_s = time.perf_counter() - t0 - waited  # host work only, not device waits
            fl.plan_wait_s = waited
        return fl

    def mark_origin(self) -> None:
        """Record the device clock's origin (call while the device is idle, right before the
        host clock is reset): `device_span` measures from here."""
        if self.cuda:
            self._origin = torch.cuda.Event(enable_timing=True)
            self._origin.record()
            self._origin.synchronize()

    def device_span(self, fl: InFlight, duration: float, host_origin: float) -> tuple[float, float]:
        """(start, end) of a finished step in seconds: on CUDA from its events against the origin
        event of `mark_origin`; on CPU the host span from ``fl.t_begin`` (``perf_counter``) of
        ``duration`` against ``host_origin``. NaN where the origin or start is unknown."""
        if self.cuda:
            if self._origin is None:
                return float("nan"), float("nan")
            a = self._origin.elapsed_time(fl.start_evt) / 1e3
            return a, a + fl.start_evt.elapsed_time(fl.end_evt) / 1e3
        if not fl.t_begin:
            return float("nan"), float("nan")
        a = fl.t_begin - host_origin
        return a, a + duration

    def finish(self, fl: InFlight) -> tuple[np.ndarray, float]:
        if self.cuda:
            self.wait_event(fl.end_evt)
            duration = fl.start_evt.elapsed_time(fl.end_evt) / 1e3
        else:
            duration = time.perf_counter() - fl.t_begin
        out = np.full(fl.inputs.num_rows, -1, dtype=np.int64)
        if fl.tokens_host is not None:
            toks = fl.tokens_host.numpy()
            counts = fl.inputs.logit_counts
            if counts is not None:  # speculative rows: every row's scored tokens, its last in out
                ends = np.cumsum(counts)
                vals = toks.astype(np.int64)
                fl.verified = [None] * fl.inputs.num_rows
                for r, a, b in zip(fl.inputs.emit_rows.tolist(), (ends - counts).tolist(), ends.tolist()):
                    fl.verified[r] = vals[a:b]
                toks = vals[ends - 1]
            out[fl.inputs.emit_rows] = toks
        return out, duration
