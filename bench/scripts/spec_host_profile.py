"""Host time per engine step of each part of a step, plain decoding against prompt lookup:
``python3 bench/scripts/spec_host_profile.py --model DIR [--requests 4] [--max-output 96]
[--batch 1 16] [--device cpu]``.

It wraps the step's parts (the scheduler's ``schedule`` and ``complete``, the proposer, the
runner's ``prepare`` / ``execute`` / ``finish``, the sampler, `SpecDecoding`'s ``draft`` /
``stage`` / ``accept``, the engine's own step and completion) with timers of this thread's CPU
time (``time.thread_time``: a descheduled thread does not count) and prints each part's own
time per step (nested timed parts subtracted), the model's modules (the forward) apart. Runs
the ``code_edit`` workload (greedy, EOS ignored) without overlap, once plain and once with
``spec.method=ngram spec.num_tokens=4``, per batch size. On a GPU the device's work is not in
these numbers (``sample`` and ``execute`` then hold launches only).
"""

from __future__ import annotations

import argparse
import functools
import time
from collections import defaultdict
from typing import Any, Callable

import torch

from twinserve.core import scheduler as sched_mod
from twinserve.core import spec as spec_mod
from twinserve.core import spec_step
from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.core.workload import WORKLOADS
from twinserve.engine import engine as engine_mod
from twinserve.engine import runner as runner_mod
from twinserve.engine.engine import Engine, EngineConfig
from twinserve.engine.models import decoder

PARTS: tuple[tuple[str, Any, str], ...] = (
    ("forward", torch.nn.Module, "__call__"), ("forward", decoder.CausalLM, "compute_logits"),
    ("schedule (rest)", sched_mod.Scheduler, "schedule"), ("propose", spec_mod.NgramProposer, "propose_for"),
    ("spec.draft (rest)", spec_step.SpecDecoding, "draft"), ("spec.stage", spec_step.SpecDecoding, "stage"),
    ("record", sched_mod.Scheduler, "record"), ("prepare", runner_mod.ModelRunner, "prepare"),
    ("execute (rest)", runner_mod.ModelRunner, "execute"), ("sample", runner_mod.Sampler, "sample"),
    ("finish", runner_mod.ModelRunner, "finish"), ("complete (rest)", sched_mod.Scheduler, "complete"),
    ("spec.accept", spec_step.SpecDecoding, "accept"), ("engine complete (rest)", engine_mod.Engine, "_complete"),
    ("engine step (rest)", engine_mod.Engine, "step"),
)


class PartTimer:
    """Own CPU time per part: a timed call's time minus that of the timed calls inside it."""

    def __init__(self) -> None:
        self.own: dict[str, float] = defaultdict(float)
        self._stack: list[float] = []

    def wrap(self, name: str, f: Callable) -> Callable:
        @functools.wraps(f)
        def timed(*a: Any, **k: Any) -> Any:
            t = time.thread_time()
            self._stack.append(0.0)
            try:
                return f(*a, **k)
            finally:
                dt = time.thread_time() - t
                self.own[name] += dt - self._stack.pop()
                if self._stack:
                    self._stack[-1] += dt
        return timed


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--max-output", type=int, default=96)
    ap.add_argument("--batch", type=int, nargs="+", default=[1])
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    timer = PartTimer()
    for name, cls, attr in PARTS:
        setattr(cls, attr, timer.wrap(name, getattr(cls, attr)))
    wl = WORKLOADS.create("code_edit", tokenizer=args.model, num_requests=args.requests, rate=1.0)
    prompts = [wl.prompt_tokens(s) for s in wl]
    outs = [min(s.output_len, args.max_output) for s in wl]
    for b in args.batch:
        for spec in ({}, {"method": "ngram", "num_tokens": 4}):
            eng = Engine(EngineConfig(model=args.model, device=args.device, spec=spec, overlap=False,
                                      scheduler={"max_running": b}, cpu_kv_tokens=65536))
            reqs = [Req(i, p, SamplingParams(temperature=0.0, max_tokens=o, ignore_eos=True), arrival=0.0)
                    for i, (p, o) in enumerate(zip(prompts, outs))]
            for r in reqs:
                eng.add(r)
            timer.own.clear()
            n = 0
            while eng.has_work():
                eng.step()
                n += 1
            toks = sum(r.num_output for r in reqs)
            host = sum(v for k, v in timer.own.items() if k != "forward")
            print(f"== {'ngram' if spec else 'plain'} b{b}: {n} steps, {toks} tokens, host {1e6 * host / n:.0f} us/step "
                  f"({1e6 * host / toks:.0f} us/token), forward {1e6 * timer.own['forward'] / n:.0f} us/step")
            for k, v in sorted(timer.own.items(), key=lambda kv: -kv[1]):
                if k != "forward":
                    print(f"   {k:24s} {1e6 * v / n:8.1f} us/step")
            if spec:
                print(f"   mean accepted length {eng.stats()['spec_decode_mean_accepted_length']:.3f}")
            eng.shutdown()


if __name__ == "__main__":
    main()
