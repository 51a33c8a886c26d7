"""Engine worker: owns one `Engine`, feeds it requests and aborts, streams its step outputs.

Runs as a child process (see `twinserve.server.proc`). Loop contract: between two engine steps
it drains its input socket (waiting up to ``stats_interval_s`` only when the engine is idle),
applies every abort and add in arrival order, answers each add with ``Accepted`` or
``ErrorReply`` (400 for a request the scheduler refuses, 429 beyond the queue limit), runs one
``engine.step()`` when there is work and sends that step's outputs as one ``StepOutputs``
(and the finished requests' phase times as one ``RequestTimes``). All replies go to the
detokenizer on one socket, so ``Accepted`` precedes the request's tokens. A request sent
``after`` another (the other outputs of an ``n > 1`` request) waits, unanswered, until that one
has its first output or ends, and is then added like any other. Engine gauges and
counters (``EngineStats``) go out from the loop itself at least every ``stats_interval_s``, idle
or busy, and when the engine turns idle: they are the engine's heartbeat (`server.health`).
An exception from the engine ends the process (the API server then fails in-flight requests).

Queue limit: the worker counts the requests the engine holds (``live``: accepted, not yet
finished or aborted); an add is accepted iff that count is below ``max_running + queue_limit``,
so ``queue_limit`` is the number of requests that may wait beyond the engine's running slots,
whatever the scheduler has admitted so far.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.engine.heap import settle_heap
from twinserve.server.ipc import pull_socket, push_socket, recv_all, send
from twinserve.server.messages import (
    AbortRequest, Accepted, EngineStats, ErrorReply, GenerateRequest, RequestTimes, StepInputs,
    StepOutputs, TokenOutput,
)
from twinserve.server.outbox import Outbox
from twinserve.server.proc import ChildContext, resolve


@dataclass(slots=True)
class EngineWorkerConfig:
    """What the engine worker needs: the engine's own config and factory, and server limits."""

    engine_cfg: Any
    engine_factory: str
    queue_limit: int | None
    stats_interval_s: float
    keep_step_records: bool = False
    replicas: int = 1


def engine_info(engine: Any) -> dict[str, Any]:
    """The facts the tokenizer, detokenizer and API server need about the engine."""
    st = engine.stats()
    info: dict[str, Any] = {
        "max_model_len": int(engine.max_model_len),
        "eos_token_ids": [int(t) for t in engine.eos_token_ids],
        "tokenizer_path": str(engine.tokenizer_path),
        "stats": st,
    }
    vocab = getattr(engine, "vocab_size", None)
    if vocab is not None:
        info["vocab_size"] = int(vocab)
    page_size = getattr(getattr(engine, "sched_config", None), "page_size", None)
    if page_size is not None:
        info["page_size"] = int(page_size)
    return info


def routing_stats(engine: Any) -> dict[str, float]:
    """What a router reads besides the gauges (`policies.routing.ReplicaView`): the tokens the
    engine still has to compute (0 for an engine without a scheduler)."""
    sched = getattr(engine, "scheduler", None)
    if sched is None:
        return {"outstanding_tokens": 0.0}
    from twinserve.policies.routing import SchedulerView

    return {"outstanding_tokens": float(SchedulerView(sched).outstanding_tokens)}


def engine_counters(engine: Any) -> dict[str, float]:
    """Cumulative counters of the engine's scheduler (0 for an engine without one): preemptions
    and prefix-cache queried / hit tokens."""
    sched = getattr(engine, "scheduler", None)
    cache = getattr(getattr(sched, "cache", None), "stats", None)
    return {"num_preemptions": float(getattr(sched, "num_preemptions", 0) or 0),
            "prefix_cache_queried_tokens": float(getattr(cache, "queried_tokens", 0) or 0),
            "prefix_cache_hit_tokens": float(getattr(cache, "hit_tokens", 0) or 0)}


def max_running(engine: Any) -> int:
    return int(getattr(getattr(engine, "sched_config", None), "max_running", 0) or 0)


def request_times(reqs: list[Req]) -> RequestTimes | None:
    """Phase times of finished requests that reached their first token (others have no phases)."""
    rows = [(r.t_scheduled - r.arrival, r.t_first_token - r.t_scheduled, r.t_finish - r.t_first_token)
            for r in reqs if r.t_scheduled is not None and r.t_first_token is not None
            and r.t_finish is not None]
    if not rows:
        return None
    q, p, d = (list(map(float, c)) for c in zip(*rows))
    return RequestTimes(q, p, d)


def build_req(msg: GenerateRequest, now: float) -> Req:
    params = dict(msg.params)
    params["stop_token_ids"] = tuple(params.get("stop_token_ids") or ())
    if "logit_bias" in params:
        params["logit_bias"] = {int(k): float(v) for k, v in params["logit_bias"].items()}
    sp = SamplingParams(**params)
    sp.validate()
    return Req(msg.rid, np.asarray(msg.prompt_ids, dtype=np.int32), sp, arrival=now,
               priority=msg.priority, tenant=msg.tenant)


class EngineLoop:
    """The rank-0 serving loop around one engine (see the module docstring). ``replica`` tags
    its ``Accepted`` and ``EngineStats``; with ``to_router`` (several replicas) every
    ``EngineStats``, with `routing_stats`, also goes to the tokenizer worker, which routes."""

    def __init__(self, engine: Any, out: Any, cfg: EngineWorkerConfig, replica: int = 0,
                 to_router: Any = None) -> None:
        self.engine = engine
        self.out = out
        self.cfg = cfg
        self.replica = replica
        self.to_router = to_router
        self._last_stats = 0.0
        self._was_busy = False
        self.live: dict[int, Req] = {}  # the requests the engine holds
        self.capacity = None if cfg.queue_limit is None else max_running(engine) + cfg.queue_limit
        self.quiet: set[int] = set()  # leaders (``leads``) without output yet
        self.parked: dict[int, list[GenerateRequest]] = {}  # leader rid -> requests sent after it

    def _now(self) -> float:
        now = getattr(self.engine, "now", None)
        return float(now()) if callable(now) else time.monotonic()

    def apply(self, inputs: StepInputs) -> None:
        aborts = set(inputs.aborts)
        ended: list[TokenOutput] = []
        if self.parked and aborts:
            for lead, held in list(self.parked.items()):
                self.parked[lead] = [m for m in held if m.rid not in aborts]
        for rid in inputs.aborts:
            if rid not in self.live:
                continue
            prompt = self.live.pop(rid).prompt_len
            if self.engine.abort(rid) is not True:  # an engine that reports no final output itself
                ended.append(TokenOutput(rid, [], True, "abort", prompt, 0))
        if ended:  # tells the detokenizer to drop these requests' state
            send(self.out, StepOutputs.of(ended, time.time()))
        for msg in inputs.adds:
            if msg.rid in aborts:
                continue
            if msg.after is not None and msg.after in self.quiet:
                self.parked.setdefault(msg.after, []).append(msg)
                continue
            if self.capacity is not None and len(self.live) >= self.capacity:
                send(self.out, ErrorReply(
                    msg.rid, 429, f"the server's request queue is full ({self.cfg.queue_limit} requests "
                    "waiting); retry later", type="rate_limit_error", code="queue_full"))
                continue
            try:
                req = build_req(msg, self._now())
                self.engine.add(req)
            except (ValueError, TypeError) as e:
                send(self.out, ErrorReply(msg.rid, 400, str(e)))
                continue
            self.live[msg.rid] = req
            if msg.leads:
                self.quiet.add(msg.rid)
            send(self.out, Accepted(msg.rid, len(msg.prompt_ids), msg.detok, self.replica))
        for rid in inputs.aborts:
            self._release(rid)

    def _release(self, lead: int) -> None:
        """``lead`` has output (or ended): add the requests held after it."""
        self.quiet.discard(lead)
        held = self.parked.pop(lead, None)
        if held:
            self.apply(StepInputs(held, []))

    def step(self) -> None:
        options = bool(getattr(self.engine, "options", None))  # a live request asked for logprobs
        outs = self.engine.step() or []
        steps = getattr(self.engine, "steps", None)
        if isinstance(steps, list) and not self.cfg.keep_step_records:
            steps.clear()  # a long-running server must not grow a record per step forever
        done: list[Req] = []
        for o in outs:
            if o.finished:
                req = self.live.pop(int(o.rid), None)
                if req is not None and o.finish_reason != "abort":
                    done.append(req)
        if outs:
            lp = plp = None
            if options:
                lp = [getattr(o, "logprobs", None) for o in outs]
                plp = [getattr(o, "prompt_logprobs", None) for o in outs]
                lp = lp if any(x is not None for x in lp) else None
                plp = plp if any(x is not None for x in plp) else None
            send(self.out, StepOutputs(
                [o.rid for o in outs], [o.new_token_ids for o in outs], [o.finished for o in outs],
                [o.finish_reason for o in outs], [o.prompt_tokens for o in outs],
                [o.cached_tokens or 0 for o in outs], time.time(), lp, plp))
        times = request_times(done)
        if times is not None:
            send(self.out, times)
        if self.quiet:
            for o in outs:
                if o.rid in self.quiet:
                    self._release(int(o.rid))

    def publish_stats(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_stats >= self.cfg.stats_interval_s:
            stats = {**self.engine.stats(), **engine_counters(self.engine)}
            if self.to_router is not None:
                stats.update(routing_stats(self.engine))
                send(self.to_router, EngineStats(stats, time.time(), self.replica))
            send(self.out, EngineStats(stats, time.time(), self.replica))
            self._last_stats = now

    def run(self, inbox: Any) -> None:
        """Serve ``inbox`` forever; the replies of one apply (``Accepted``, errors) leave as one
        message (`Outbox`), and so do one step's outputs, each flushed before the next wait or
        step."""
        wait_ms = max(1, int(self.cfg.stats_interval_s * 1000))
        self.out = box = Outbox(self.out)
        while True:
            busy = bool(self.engine.has_work())
            msgs = recv_all(inbox, 0 if busy else wait_ms)
            if msgs:
                inputs = StepInputs([m for m in msgs if isinstance(m, GenerateRequest)],
                                    [m.rid for m in msgs if isinstance(m, AbortRequest)])
                self.apply(inputs)
                box.flush()
                busy = bool(self.engine.has_work())
            if busy:
                self.step()
                box.flush()
                busy = bool(self.engine.has_work())
            self.publish_stats(force=self._was_busy and not busy)
            box.flush()
            self._was_busy = busy


def run(cfg: EngineWorkerConfig, ctx: ChildContext) -> None:
    """Child entry: build the engine (replica ``ctx.rank`` of ``cfg.replicas``, on its device:
    `engine.cluster.replica_devices`), bind its input socket, handshake, serve until SIGTERM."""
    engine_cfg = cfg.engine_cfg
    if cfg.replicas > 1 and dataclasses.is_dataclass(engine_cfg) and hasattr(engine_cfg, "device"):
        from twinserve.engine.cluster import replica_devices

        device = replica_devices(engine_cfg.device, cfg.replicas, int(getattr(engine_cfg, "tp_size", 1)))[ctx.rank]
        engine_cfg = dataclasses.replace(engine_cfg, device=device)
    engine = resolve(cfg.engine_factory)(engine_cfg)
    settle_heap()  # built (and warmed up, where the factory does): no full collection walks it
    inbox = pull_socket(ctx.zmq_ctx, ctx.paths.engine_of(ctx.rank))
    out = push_socket(ctx.zmq_ctx, ctx.paths.detokenizer)
    to_router = push_socket(ctx.zmq_ctx, ctx.paths.tokenizer) if cfg.replicas > 1 else None
    try:
        ctx.announce(engine_info(engine))
        EngineLoop(engine, out, cfg, ctx.rank, to_router).run(inbox)
    finally:
        for s in (inbox, out, to_router):
            if s is not None:
                s.close(linger=0)
        engine.shutdown()
