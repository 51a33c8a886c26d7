"""Open-loop, in-process replay of a `Workload` on one `Engine` or several behind a router (the
Hydra ``backend=engine``)."""

from __future__ import annotations

import time
import warnings
from typing import Sequence

from twinserve.core.records import StepRecord
from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.engine.config import EngineConfig
from twinserve.engine.engine import Engine
from twinserve.engine.heap import settle_heap
from twinserve.policies.routing import Router, SchedulerView


def replay_workload(engine_cfg: EngineConfig, workload, progress: bool = True,
                    engine: Engine | None = None, warmup: bool = True,
                    answers: bool = True) -> tuple[list[Req], list[StepRecord]]:
    """Serve ``workload`` at its arrival times; return the requests (with their timestamps) and
    the step records of this replay, all on the trace's clock (0 = the replay's start).

    Open loop: before each step every request whose arrival time has passed is added; one that
    arrives while a step runs waits for the next schedule. Prompts are
    ``workload.prompt_tokens(spec) % vocab_size``, built before the clock starts; sampling is
    greedy with ``max_tokens=spec.output_len`` and ``ignore_eos=True``; with ``answers`` (default)
    each request emits the trace's answer (``workload.output_tokens``) instead of sampled tokens,
    as the simulator does, so that a multi-turn prompt quoting an earlier answer hits the prefix
    cache the way it would when a client sends back what it received. ``warmup`` first runs
    `Engine.warmup` (throw-away requests, not in the records). Requests the scheduler rejects
    (too long for the model or the pool) are skipped with a warning. An engine built here (no
    ``engine`` given; ``engine_cfg.tp_size`` ranks) is shut down before returning; a given one
    is left idle with an empty prefix cache.
    """
    eng = engine or Engine(engine_cfg)
    try:
        if warmup:
            eng.warmup()
        n0 = len(eng.steps)
        reqs, _ = replay_open_loop([eng], None, workload, progress, answers)
        if engine is not None:
            eng.flush_cache()
        return reqs, list(eng.steps[n0:])
    finally:
        if engine is None:
            eng.shutdown()


def _requests(eng: Engine, workload, answers: bool) -> list[Req]:
    """The workload's requests as the engine takes them (prompt ids folded into its vocabulary,
    greedy, ``max_tokens`` = the trace's output length, the trace's answers with ``answers``)."""
    vocab = eng.model_config.vocab_size
    return [Req(s.rid, workload.prompt_tokens(s) % vocab,
                SamplingParams(temperature=0.0, max_tokens=s.output_len, ignore_eos=True),
                arrival=s.arrival, priority=s.priority, tenant=s.tenant,
                output_hint=workload.output_tokens(s) % vocab if answers else None) for s in workload]


def replay_open_loop(engines: Sequence[Engine], router: Router | None, workload, progress: bool,
                     answers: bool = True) -> tuple[list[Req], list[int]]:
    """The open-loop replay of ``workload`` on ``engines`` (all idle): each request, once its
    arrival time has passed on the first engine's clock, goes to the engine ``router`` picks
    from `SchedulerView`s of their live schedulers (no router: engine 0); then every engine with
    work steps once, in index order. Returns the accepted requests in arrival order and the
    engine each went to. Every engine's clock is reset at the start, one after the other."""
    views = [SchedulerView(e.scheduler) for e in engines]
    specs = list(workload)
    pending = _requests(engines[0], workload, answers)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(specs), desc="replay", unit="req")
    reqs: list[Req] = []
    picks: list[int] = []
    skipped = 0
    i = 0
    clock = engines[0]
    settle_heap()  # the requests are built: freeze them with the rest before the clock starts
    for e in engines:
        e.reset_clock()
    while i < len(specs) or any(e.has_work() for e in engines):
        now = clock.now()
        while i < len(specs) and specs[i].arrival <= now:
            req = pending[i]
            i += 1
            k = router.choose(req, views, now) if router is not None and len(engines) > 1 else 0
            try:
                engines[k].add(req)
            except ValueError as e:
                skipped += 1
                warnings.warn(f"replay: skipping request {req.rid}: {e}", stacklevel=2)
                continue
            reqs.append(req)
            picks.append(k)
        stepped = False
        for e in engines:
            if e.has_work():
                stepped = True
                for out in e.step():
                    if out.finished and bar is not None:
                        bar.update(1)
        if not stepped and i < len(specs):
            time.sleep(max(0.0, specs[i].arrival - clock.now()))
    if bar is not None:
        bar.close()
    if skipped:
        warnings.warn(f"replay: {skipped} of {len(specs)} requests were rejected", stacklevel=2)
    return reqs, picks
