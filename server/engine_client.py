"""The API server's side of the pipeline: submit requests, route replies, fail them on faults.

Requests and aborts leave through an `Outbox` flushed once per event-loop iteration, so a burst of
requests that arrive together reaches the tokenizer as one message. One reader task drains the
API server's input socket (a message may carry many frames) and routes every ``Accepted``,
``ErrorReply`` and ``TextDelta`` to its request's queue; ``EngineStats`` refresh the engine
gauges. `EngineClient.fail_all` (a worker died, or the server is stopping) and `EngineClient.fail_stalled`
(no engine heartbeat for ``engine_stall_s``) put a terminal error into every live request's queue,
so no handler waits forever.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

import zmq
import zmq.asyncio

from twinserve.server.errors import APIError
from twinserve.server.health import EngineHeartbeat
from twinserve.server.ipc import IpcPaths
from twinserve.server.messages import (
    AbortRequest, Accepted, DetokOutputs, EngineStats, ErrorReply, ReplicaDown, RequestTimes, TextDelta,
    TokenizeRequest, decode, encode,
)
from twinserve.server.replica_stats import CUMULATIVE_STATS, merge_stats
from twinserve.server.metrics import ServerMetrics
from twinserve.server.outbox import Outbox


class _Expired:
    """Queued when a request's deadline passes (one timer per request, not one per event)."""


_EXPIRED = _Expired()


@dataclass(slots=True)
class RequestStream:
    """One request's reply queue and the client-side accounting of its tokens and latencies.

    Times are ``time.perf_counter()`` values of the API server process."""

    rid: int
    arrival: float
    timer: asyncio.TimerHandle | None = None
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    finished: bool = False
    finish_reason: str | None = None
    t_first: float | None = None
    t_last: float | None = None
    replica: int | None = None  # the engine replica that accepted it (None until ``Accepted``)

    def usage(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": self.cached_tokens}}


class EngineClient:
    """Talks to the tokenizer (requests, aborts) and listens to the detokenizer and tokenizer.

    Invariant: a rid is in ``live`` from ``submit`` until its finishing delta, its error, or
    ``abort``; messages for rids not in ``live`` are dropped. ``submit`` registers nothing when it
    raises. ``unavailable`` is why new requests get 503: a dead worker (``down``, for good) or a
    stalled engine (``heartbeat.stalled``, until the next heartbeat). With several engine
    replicas, ``replicas_down`` holds those taken out of rotation (`replica_down`); the engine
    gauges are the live replicas' latest ``EngineStats`` merged (`merge_stats`), and a beat from
    any replica counts as the heartbeat.
    """

    def __init__(self, paths: IpcPaths, metrics: ServerMetrics, request_timeout_s: float | None,
                 engine_stall_s: float | None = None, retry_after_s: int = 1) -> None:
        self.zctx = zmq.asyncio.Context()
        self.inbox = self.zctx.socket(zmq.PULL)
        self.inbox.setsockopt(zmq.LINGER, 0)
        self.inbox.setsockopt(zmq.RCVHWM, 0)
        self.inbox.bind(paths.api)
        self.to_tok = self.zctx.socket(zmq.PUSH)
        self.to_tok.setsockopt(zmq.LINGER, 0)
        self.to_tok.setsockopt(zmq.SNDHWM, 0)
        self.to_tok.connect(paths.tokenizer)
        self.outbox = Outbox(zmq.Socket.shadow(self.to_tok.underlying))  # never blocks: SNDHWM is 0
        self._flush_at: asyncio.Handle | None = None
        self.metrics = metrics
        self.timeout = request_timeout_s
        self.live: dict[int, RequestStream] = {}
        self.stats: dict[str, Any] = {}
        self.stats_time = 0.0
        self.down: str | None = None  # why the pipeline is unusable, once it is
        self.heartbeat = EngineHeartbeat(engine_stall_s)
        self.retry_after_s = retry_after_s
        self._rids = itertools.count(1)
        self.replica_stats: dict[int, dict[str, Any]] = {}
        self.replicas_down: dict[int, str] = {}

    @property
    def unavailable(self) -> str | None:
        return self.down if self.down is not None else self.heartbeat.stalled

    # ---- requests ----------------------------------------------------------------------------
    def _send(self, data: bytes) -> None:
        """Queue ``data`` for the tokenizer; the queue leaves as one message once the event loop
        has run what is ready now (every handler that a burst woke up), in order."""
        self.outbox.send(data)
        if self._flush_at is None:
            self._flush_at = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_at = None
        self.outbox.flush()

    async def submit(self, build: Callable[[int], TokenizeRequest]) -> RequestStream:
        why = self.unavailable
        if why is not None:
            raise APIError(503, why)
        rid = next(self._rids)
        try:
            data = encode(build(rid))
        except (UnicodeEncodeError, TypeError, ValueError, OverflowError) as e:
            raise APIError(400, f"the request cannot be encoded: {e}", code="invalid_text") from None
        st = RequestStream(rid, time.perf_counter())
        if self.timeout is not None:
            st.timer = asyncio.get_running_loop().call_later(self.timeout, st.queue.put_nowait, _EXPIRED)
        self.live[rid] = st
        self.metrics.in_flight.set(len(self.live))
        self._send(data)
        return st

    async def abort(self, st: RequestStream, reason: str = "client") -> None:
        """Forget ``st`` and tell the engine (through the tokenizer) to free it."""
        if self.live.get(st.rid) is st:
            self._drop(st)
            self.metrics.aborted.labels(reason=reason).inc()
            if self.down is None:
                self._send(encode(AbortRequest(st.rid, reason)))

    def _drop(self, st: RequestStream) -> None:
        if st.timer is not None:
            st.timer.cancel()
        if self.live.get(st.rid) is st:
            del self.live[st.rid]
            self.metrics.in_flight.set(len(self.live))

    async def _check(self, st: RequestStream, ev: Any) -> Accepted | TextDelta:
        if isinstance(ev, ErrorReply):
            self._drop(st)
            self.metrics.rejected.labels(status=str(ev.status)).inc()
            headers = {"Retry-After": str(self.retry_after_s)} if ev.status == 429 else None
            raise APIError(ev.status, ev.message, ev.type, ev.param, ev.code, headers)
        if ev is _EXPIRED:
            await self.abort(st, "timeout")
            raise APIError(504, f"the request did not finish within {self.timeout} s")
        return ev

    async def next_event(self, st: RequestStream) -> Accepted | TextDelta:
        """The next reply of ``st``; raises `APIError` on an error reply or the deadline."""
        return await self._check(st, await st.queue.get())

    async def delta_batches(self, st: RequestStream) -> AsyncIterator[list[TextDelta]]:
        """The ``TextDelta``s of an accepted request, through the finishing one, in batches of
        whatever had arrived when the consumer asked (a consumer that lags gets several at once
        and can answer with one write). An error is raised after the deltas that preceded it.

        Ends on the finishing delta itself, not on ``st.finished``: the reader marks the request
        finished when it routes the last delta, possibly before earlier ones were consumed."""
        q = st.queue
        while True:
            batch: list[TextDelta] = []
            ev: Any = await q.get()
            while True:
                if not isinstance(ev, TextDelta):
                    if batch:
                        yield batch
                        batch = []
                    await self._check(st, ev)
                else:
                    batch.append(ev)
                    if ev.finished:
                        yield batch
                        return
                if q.empty():
                    break
                ev = q.get_nowait()
            if batch:
                yield batch

    # ---- routing -----------------------------------------------------------------------------
    def _on_delta(self, d: TextDelta, now: float) -> None:
        st = self.live.get(d.rid)
        if st is None:
            return
        m = self.metrics
        if d.token_ids:
            if st.t_first is None:
                st.t_first = now
                m.ttft.observe(now - st.arrival)
            else:
                m.itl.observe(now - (st.t_last or now))
            st.t_last = now
            st.completion_tokens += len(d.token_ids)
        st.cached_tokens = max(st.cached_tokens, d.cached_tokens)
        if d.prompt_tokens:
            st.prompt_tokens = d.prompt_tokens
        if d.finished:
            st.finished = True
            st.finish_reason = d.finish_reason
            self._drop(st)
            m.e2e.observe(now - st.arrival)
            m.prompt_tokens.inc(st.prompt_tokens)
            m.cached_tokens.inc(st.cached_tokens)
            m.finished.labels(finish_reason=str(d.finish_reason)).inc()
        st.queue.put_nowait(d)

    def _route(self, msg: Any) -> None:
        now = time.perf_counter()
        if isinstance(msg, DetokOutputs):
            ntok = 0
            for d in msg.items():
                ntok += len(d.token_ids) if d.rid in self.live else 0
                self._on_delta(d, now)
            self.metrics.generation_tokens.inc(ntok)
        elif isinstance(msg, Accepted):
            st = self.live.get(msg.rid)
            if st is not None:
                st.prompt_tokens = msg.prompt_tokens
                st.replica = msg.replica
                st.queue.put_nowait(msg)
        elif isinstance(msg, ErrorReply):
            st = self.live.get(msg.rid)
            if st is not None:
                st.queue.put_nowait(msg)
        elif isinstance(msg, EngineStats):
            self.heartbeat.beat()
            if self.down is None and msg.replica not in self.replicas_down:
                self.replica_stats[msg.replica] = msg.stats
                self.stats = merge_stats(self.replica_stats)
                self.stats_time = msg.t
                self.metrics.update_engine(self.stats)
        elif isinstance(msg, RequestTimes):
            self.metrics.observe_request_times(msg)

    async def run_reader(self) -> None:
        while True:
            for data in await self.inbox.recv_multipart():
                try:
                    msg = decode(data)
                except ValueError:
                    continue
                self._route(msg)

    # ---- faults and shutdown -----------------------------------------------------------------
    def _fail_live(self, status: int, message: str) -> list[int]:
        rids = list(self.live)
        for rid in rids:
            self.live[rid].queue.put_nowait(ErrorReply(rid, status, message, "service_unavailable"))
        if rids:
            self.metrics.aborted.labels(reason="server").inc(len(rids))
        return rids

    async def replica_down(self, replica: int, message: str) -> None:
        """Take engine ``replica`` out of rotation: the tokenizer routes nothing to it again;
        the live requests it had accepted fail with 503 and ``message``, and so do those no
        replica has accepted yet (this process cannot tell where they were routed; their aborts
        free them wherever they landed). Its last gauges stay out of the merged ones, its
        counters in."""
        if replica in self.replicas_down or self.down is not None:
            return
        self.replicas_down[replica] = message
        self._send(encode(ReplicaDown(replica, message)))
        last = self.replica_stats.get(replica)
        if last is not None:
            self.replica_stats[replica] = {k: v for k, v in last.items() if k in CUMULATIVE_STATS}
        self.stats = merge_stats(self.replica_stats)
        self.metrics.update_engine(self.stats)
        hit = [rid for rid, st in self.live.items() if st.replica in (replica, None)]
        for rid in hit:
            self.live[rid].queue.put_nowait(ErrorReply(rid, 503, message, "service_unavailable"))
        if hit:
            self.metrics.aborted.labels(reason="server").inc(len(hit))
        for rid in hit:
            self._send(encode(AbortRequest(rid, "replica_down")))

    def fail_all(self, status: int, message: str) -> None:
        """Mark the pipeline down for good, end every live request with ``status``, zero the
        engine gauges (no worker reports them any more)."""
        self.down = message
        self.stats = {}
        self.metrics.reset_engine()
        self._fail_live(status, message)

    async def fail_stalled(self, message: str) -> None:
        """End every live request with 503 and ask the engine to free them (it reads the aborts
        if it resumes); new requests get 503 until the next heartbeat."""
        self.metrics.reset_engine()
        for rid in self._fail_live(503, message):
            if self.down is None:
                self._send(encode(AbortRequest(rid, "stalled")))

    def close(self) -> None:
        if self._flush_at is not None:
            self._flush_at.cancel()
        self.inbox.close(linger=0)
        self.to_tok.close(linger=0)
        self.zctx.term()
