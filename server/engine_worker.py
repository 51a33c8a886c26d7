"""Engine worker: owns one `Engine`, feeds it requests and aborts, streams its step outputs.

Runs as a child process (see `twinserve.server.proc`). Loop contract: between two engine steps
it drains its input socket (waiting up to ``stats_interval_s`` only when the engine is idle),
applies every abort and add in arrival order, answers each add with ``Accepted`` or
``ErrorReply`` (400 for a request the scheduler refuses, 429 beyond the queue limit), runs one
``engine.step()`` when there is work and sends that step's outputs as one ``StepOutputs``. All
replies go to the detokenizer on one socket, so ``Accepted`` precedes the request's tokens.
A request sent ``after`` another (the other outputs of an ``n > 1`` request) waits, unanswered,
until that one has its first output or ends, and is then added like any other.
Engine gauges (``EngineStats``) go out every ``stats_interval_s`` and when the engine turns idle.
An exception from the engine ends the process (the API server then fails in-flight requests).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.engine.heap import settle_heap
from twinserve.server.ipc import pull_socket, push_socket, recv_all, send
from twinserve.server.messages import (
    AbortRequest, Accepted, EngineStats, ErrorReply, GenerateRequest, StepInputs, StepOutputs,
    TokenOutput,
)
from twinserve.server.proc import ChildContext, resolve


@dataclass(slots=True)
class EngineWorkerConfig:
    """What the engine worker needs: the engine's own config and factory, and server limits."""

    engine_cfg: Any
    engine_factory: str
    queue_limit: int | None
    stats_interval_s: float
    keep_step_records: bool = False


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
    return info


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
    """The rank-0 serving loop around one engine (see the module docstring)."""

    def __init__(self, engine: Any, out: Any, cfg: EngineWorkerConfig) -> None:
        self.engine = engine
        self.out = out
        self.cfg = cfg
        self._last_stats = 0.0
        self._was_busy = False
        self.live: dict[int, int] = {}  # rid -> prompt tokens, for requests the engine holds
        self.quiet: set[int] = set()  # leaders (``leads``) without output yet
        self.parked: dict[int, list[GenerateRequest]] = {}  # leader rid -> requests sent after it

    def _now(self) -> float:
        now = getattr(self.engine, "now", None)
        return float(now()) if callable(now) else time.monotonic()

    def _waiting(self) -> int:
        return int(self.engine.stats().get("waiting", 0))

    def apply(self, inputs: StepInputs) -> None:
        waiting = self._waiting() if inputs.adds and self.cfg.queue_limit is not None else 0
        aborts = set(inputs.aborts)
        ended: list[TokenOutput] = []
        if self.parked and aborts:
            for lead, held in list(self.parked.items()):
                self.parked[lead] = [m for m in held if m.rid not in aborts]
        for rid in inputs.aborts:
            if rid not in self.live:
                continue
            prompt = self.live.pop(rid)
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
            limit = self.cfg.queue_limit
            if limit is not None and waiting >= limit:
                send(self.out, ErrorReply(
                    msg.rid, 429, f"the server's request queue is full ({limit} requests waiting); "
                    "retry later", type="rate_limit_error", code="queue_full"))
                continue
            try:
                req = build_req(msg, self._now())
                self.engine.add(req)
            except (ValueError, TypeError) as e:
                send(self.out, ErrorReply(msg.rid, 400, str(e)))
                continue
            waiting += 1
            self.live[msg.rid] = len(msg.prompt_ids)
            if msg.leads:
                self.quiet.add(msg.rid)
            send(self.out, Accepted(msg.rid, len(msg.prompt_ids), msg.detok))
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
        for o in outs:
            if o.finished:
                self.live.pop(int(o.rid), None)
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
        if self.quiet:
            for o in outs:
                if o.rid in self.quiet:
                    self._release(int(o.rid))

    def publish_stats(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_stats >= self.cfg.stats_interval_s:
            send(self.out, EngineStats(dict(self.engine.stats()), time.time()))
            self._last_stats = now

    def run(self, inbox: Any) -> None:
        wait_ms = max(1, int(self.cfg.stats_interval_s * 1000))
        while True:
            busy = bool(self.engine.has_work())
            msgs = recv_all(inbox, 0 if busy else wait_ms)
            if msgs:
                inputs = StepInputs([m for m in msgs if isinstance(m, GenerateRequest)],
                                    [m.rid for m in msgs if isinstance(m, AbortRequest)])
                self.apply(inputs)
                busy = bool(self.engine.has_work())
            if busy:
                self.step()
                busy = bool(self.engine.has_work())
            self.publish_stats(force=self._was_busy and not busy)
            self._was_busy = busy


def run(cfg: EngineWorkerConfig, ctx: ChildContext) -> None:
    """Child entry: build the engine, bind the input socket, handshake, serve until SIGTERM."""
    engine = resolve(cfg.engine_factory)(cfg.engine_cfg)
    settle_heap()  # built (and warmed up, where the factory does): no full collection walks it
    inbox = pull_socket(ctx.zmq_ctx, ctx.paths.engine)
    out = push_socket(ctx.zmq_ctx, ctx.paths.detokenizer)
    try:
        ctx.announce(engine_info(engine))
        EngineLoop(engine, out, cfg).run(inbox)
    finally:
        inbox.close(linger=0)
        out.close(linger=0)
        engine.shutdown()
